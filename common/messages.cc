#include "common/messages.h"

#include <string>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "common/bfloat16.h"
#include "common/json_fields.h"

namespace tessera {

Message EncodeLookupRequest(const LookupMeta& meta, std::vector<LookupEntry>&& entries,
                            std::vector<int32_t>&& lengths, std::vector<int64_t>&& ids,
                            std::vector<float>&& weights) {
  Message m(Opcode::kLookup);
  m.AddStruct(meta);
  m.AddArray(std::move(entries));
  m.AddArray(std::move(lengths));
  if (meta.flags & kLookupIds32) {
    std::vector<uint32_t> narrow(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      CHECK(ids[i] >= 0 && ids[i] <= int64_t{UINT32_MAX}) << "id " << ids[i] << " sent as uint32";
      narrow[i] = static_cast<uint32_t>(ids[i]);
    }
    m.AddArray(std::move(narrow));
  } else {
    m.AddArray(std::move(ids));
  }
  m.AddArray(std::move(weights));
  return m;
}

StatusOr<LookupRequest> DecodeLookupRequest(Message&& m) {
  TESSERA_RETURN_IF_ERROR(ExpectFrames(m, 5));
  LookupRequest r;
  r.source = std::move(m);
  TESSERA_RETURN_IF_ERROR(ReadStruct(r.source, 0, "lookup meta", &r.meta));
  TESSERA_RETURN_IF_ERROR(r.entries.Read(r.source, 1, "lookup entries"));
  TESSERA_RETURN_IF_ERROR(r.lengths.Read(r.source, 2, "lengths"));
  if (r.meta.flags & ~(kLookupNoContext | kLookupIds32 | kLookupAfterOwnPush | kLookupBf16Values)) {
    return Status::InvalidArgument("lookup meta has unknown flags " + std::to_string(r.meta.flags));
  }
  TESSERA_RETURN_IF_ERROR(r.meta.flags & kLookupIds32 ? r.ids.ReadWidened<uint32_t>(r.source, 3, "ids")
                                                      : r.ids.Read(r.source, 3, "ids"));
  TESSERA_RETURN_IF_ERROR(r.weights.Read(r.source, 4, "weights"));

  uint64_t bags = 0, ids = 0, weighted_ids = 0;
  for (const LookupEntry& e : r.entries.span()) {
    bags += e.num_bags;
    ids += e.num_ids;
    if (e.flags & ~(kEntryWeighted | kEntrySumPartial | kEntryContextOnly | kEntryRows)) {
      return Status::InvalidArgument("lookup entry has unknown flags " + std::to_string(e.flags));
    }
    if (e.rows() && (e.num_bags != 0 || e.weighted() || e.sum_partial())) {
      return Status::InvalidArgument("a rows lookup entry has bags, weights or sum_partial (it has none)");
    }
    if (e.weighted()) weighted_ids += e.num_ids;
  }
  if (bags != r.lengths.size()) {
    return Status::InvalidArgument("lookup entries announce " + std::to_string(bags) + " bags but " +
                                   std::to_string(r.lengths.size()) + " lengths were sent");
  }
  if (ids != r.ids.size()) {
    return Status::InvalidArgument("lookup entries announce " + std::to_string(ids) + " ids but " +
                                   std::to_string(r.ids.size()) + " were sent");
  }
  if (weighted_ids != r.weights.size()) {
    return Status::InvalidArgument("lookup has " + std::to_string(r.weights.size()) + " weights for " +
                                   std::to_string(weighted_ids) + " weighted ids");
  }
  size_t bag = 0;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const LookupEntry& e = r.entries[i];
    int64_t sum = 0;
    for (uint32_t b = 0; b < e.num_bags; ++b, ++bag) {
      const int32_t len = r.lengths[bag];
      if (len < 0) return Status::InvalidArgument("negative bag length in lookup entry " + std::to_string(i));
      sum += len;
    }
    if (!e.rows() && sum != e.num_ids) {
      return Status::InvalidArgument("lengths of lookup entry " + std::to_string(i) + " sum to " +
                                     std::to_string(sum) + " but it has " + std::to_string(e.num_ids) + " ids");
    }
  }
  return r;
}

namespace {

// A frame of `values` rounded to bfloat16, or as they are.
void AddValues(Message* m, std::vector<float>&& values, bool bf16) {
  if (!bf16) {
    m->AddArray(std::move(values));
    return;
  }
  std::vector<Bf16> narrow(values.size());
  FloatsToBf16(values.data(), values.size(), narrow.data());
  m->AddArray(std::move(narrow));
}

Status ReadValues(const Message& m, size_t index, const char* what, bool bf16, ArrayFrame<float>* out) {
  return bf16 ? out->ReadWidened<Bf16>(m, index, what) : out->Read(m, index, what);
}

}  // namespace

Message EncodeLookupResponse(const Header& request, std::vector<float>&& values, bool bf16) {
  Message m = MakeReply(request);
  AddValues(&m, std::move(values), bf16);
  return m;
}

Status DecodeLookupResponse(const Message& m, size_t expected_values, ArrayFrame<float>* values, bool bf16) {
  TESSERA_RETURN_IF_ERROR(StatusFromReply(m));
  TESSERA_RETURN_IF_ERROR(ExpectFrames(m, 1));
  TESSERA_RETURN_IF_ERROR(ReadValues(m, 0, "lookup values", bf16, values));
  if (values->size() != expected_values) {
    return Status::InvalidArgument("lookup reply has " + std::to_string(values->size()) + " values, expected " +
                                   std::to_string(expected_values));
  }
  return Status::OK();
}

Message EncodePushRequest(const PushMeta& meta, std::vector<PushEntry>&& entries, std::vector<float>&& grads) {
  Message m(Opcode::kPushGradients);
  m.AddStruct(meta);
  m.AddArray(std::move(entries));
  AddValues(&m, std::move(grads), (meta.flags & kPushBf16Grads) != 0);
  return m;
}

StatusOr<PushRequest> DecodePushRequest(Message&& m) {
  TESSERA_RETURN_IF_ERROR(ExpectFrames(m, 3));
  PushRequest r;
  r.source = std::move(m);
  TESSERA_RETURN_IF_ERROR(ReadStruct(r.source, 0, "push meta", &r.meta));
  TESSERA_RETURN_IF_ERROR(r.entries.Read(r.source, 1, "push entries"));
  if (r.meta.flags & ~kPushBf16Grads) {
    return Status::InvalidArgument("push meta has unknown flags " + std::to_string(r.meta.flags));
  }
  TESSERA_RETURN_IF_ERROR(ReadValues(r.source, 2, "gradients", (r.meta.flags & kPushBf16Grads) != 0, &r.grads));
  uint64_t total = 0;
  for (const PushEntry& e : r.entries.span()) total += static_cast<uint64_t>(e.rows) * e.cols;
  if (total != r.grads.size()) {
    return Status::InvalidArgument("push entries announce " + std::to_string(total) + " gradient values but " +
                                   std::to_string(r.grads.size()) + " were sent");
  }
  return r;
}

Message EncodeFetchRowsReply(const Header& request, const FetchMeta& meta, std::vector<int64_t>&& ids,
                             std::vector<float>&& rows) {
  Message m = MakeReply(request);
  m.AddStruct(meta);
  m.AddArray(std::move(ids));
  m.AddArray(std::move(rows));
  return m;
}

StatusOr<FetchRowsReply> DecodeFetchRowsReply(Message&& m) {
  TESSERA_RETURN_IF_ERROR(StatusFromReply(m));
  TESSERA_RETURN_IF_ERROR(ExpectFrames(m, 3));
  FetchRowsReply r;
  TESSERA_RETURN_IF_ERROR(ReadStruct(m, 0, "FetchMeta", &r.meta));
  TESSERA_RETURN_IF_ERROR(r.ids.Read(m, 1, "fetched ids"));
  TESSERA_RETURN_IF_ERROR(r.rows.Read(m, 2, "fetched rows"));
  if (r.meta.width < 1) return Status::InvalidArgument("FETCH_ROWS reply: row width 0");
  if (r.rows.size() != r.ids.size() * r.meta.width) {
    return Status::InvalidArgument("FETCH_ROWS reply: " + std::to_string(r.rows.size()) + " floats for " +
                                   std::to_string(r.ids.size()) + " rows of " + std::to_string(r.meta.width));
  }
  for (size_t i = 0; i < r.ids.size(); ++i) {
    if (r.ids[i] < 0 || (i > 0 && r.ids[i] <= r.ids[i - 1])) {
      return Status::InvalidArgument("FETCH_ROWS reply: ids not increasing at " + std::to_string(i));
    }
  }
  if (r.meta.next >= 0 && r.ids.size() > 0 && r.meta.next < r.ids[r.ids.size() - 1]) {
    return Status::InvalidArgument("FETCH_ROWS reply: next " + std::to_string(r.meta.next) + " before its last row");
  }
  if (r.meta.next < -1) return Status::InvalidArgument("FETCH_ROWS reply: next " + std::to_string(r.meta.next));
  r.source = std::move(m);
  return r;
}

Message EncodeJson(Opcode op, const nlohmann::json& body) {
  Message m(op);
  m.AddString(body.dump());
  return m;
}

Message EncodeJsonReply(const Header& request, const nlohmann::json& body) {
  Message m = MakeReply(request);
  m.AddString(body.dump());
  return m;
}

StatusOr<nlohmann::json> DecodeJson(const Message& m) {
  TESSERA_RETURN_IF_ERROR(StatusFromReply(m));
  TESSERA_RETURN_IF_ERROR(ExpectFrames(m, 1));
  return DecodeJsonFrame(m, 0);
}

StatusOr<nlohmann::json> DecodeJsonFrame(const Message& m, size_t index) {
  TESSERA_RETURN_IF_ERROR(StatusFromReply(m));
  if (index >= m.frames.size()) return Status::InvalidArgument(std::string(OpcodeName(m.header.op)) + ": missing JSON frame");
  const auto& f = m.frames[index];
  nlohmann::json j;
  const Status st = ParseJson(std::string_view(static_cast<const char*>(f.data()), f.size()), &j);
  if (!st.ok()) return Status::InvalidArgument(std::string(OpcodeName(m.header.op)) + ": frame is " + st.message());
  return j;
}

}  // namespace tessera
