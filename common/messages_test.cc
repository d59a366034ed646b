// Round trips of the wire format and every structural validation error.
#include "common/messages.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/bfloat16.h"
#include "common/json_fields.h"
#include "common/wire_format.h"

namespace tessera {
namespace {

// Simulates the network: the frames a receiver would get (copies).
Message Transmit(const Message& m) {
  Message out;
  out.header = m.header;
  out.header.frame_count = static_cast<uint16_t>(m.frames.size());
  for (const auto& f : m.frames) out.frames.emplace_back(f.data(), f.size());
  return out;
}

TEST(WireFormatTest, HeaderRoundTrip) {
  Header h;
  h.op = Opcode::kPushGradients;
  h.request_id = 0x0123456789abcdefULL;
  h.plan_version = 7;
  h.status = StatusCode::kPlanChanged;
  h.frame_count = 3;
  uint8_t buf[kHeaderBytes];
  EncodeHeader(h, buf);
  Header d;
  ASSERT_TRUE(DecodeHeader(buf, sizeof(buf), &d).ok());
  EXPECT_EQ(d.op, h.op);
  EXPECT_EQ(d.request_id, h.request_id);
  EXPECT_EQ(d.plan_version, 7u);
  EXPECT_EQ(d.status, StatusCode::kPlanChanged);
  EXPECT_EQ(d.frame_count, 3);
  // Little-endian on the wire whatever the host.
  EXPECT_EQ(buf[0], 'T');
  EXPECT_EQ(buf[8], 0xef);
}

TEST(WireFormatTest, HeaderErrors) {
  Header h;
  uint8_t buf[kHeaderBytes];
  EncodeHeader(h, buf);
  Header d;
  EXPECT_EQ(DecodeHeader(buf, kHeaderBytes - 1, &d).code(), StatusCode::kInvalidArgument);  // truncated
  uint8_t bad[kHeaderBytes];
  std::memcpy(bad, buf, kHeaderBytes);
  bad[0] = 'X';
  EXPECT_NE(DecodeHeader(bad, kHeaderBytes, &d).message().find("magic"), std::string::npos);
  std::memcpy(bad, buf, kHeaderBytes);
  bad[4] = 99;
  EXPECT_NE(DecodeHeader(bad, kHeaderBytes, &d).message().find("version"), std::string::npos);
  std::memcpy(bad, buf, kHeaderBytes);
  bad[20] = 200;
  EXPECT_FALSE(DecodeHeader(bad, kHeaderBytes, &d).ok());
  std::memcpy(bad, buf, kHeaderBytes);
  bad[22] = 0xff;
  bad[23] = 0xff;
  EXPECT_FALSE(DecodeHeader(bad, kHeaderBytes, &d).ok());
}

Message SampleLookup() {
  LookupMeta meta{3, 0, 42};
  std::vector<LookupEntry> entries = {{5, 2, 3, 0}, {9, 1, 2, kEntryWeighted}};
  return EncodeLookupRequest(meta, std::move(entries), {1, 2, 2}, {10, 11, 12, 7, 8}, {0.5f, 2.0f});
}

TEST(MessagesTest, LookupRoundTrip) {
  auto r = DecodeLookupRequest(Transmit(SampleLookup()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->meta.trainer, 3u);
  EXPECT_EQ(r->meta.step, 42u);
  ASSERT_EQ(r->entries.size(), 2u);
  EXPECT_EQ(r->entries[1].shard, 9u);
  EXPECT_EQ(r->lengths.size(), 3u);
  EXPECT_EQ(r->ids[4], 8);
  EXPECT_EQ(r->weights[1], 2.0f);
  // The decoded spans stay valid when the request is moved around.
  LookupRequest moved = std::move(r).value();
  EXPECT_EQ(moved.ids[0], 10);
}

TEST(MessagesTest, LookupIds32RoundTripsInHalfTheBytes) {
  const std::vector<int64_t> ids = {0, 11, 4'294'967'295, 7, 8};
  Message wide = EncodeLookupRequest(LookupMeta{3, 0, 42}, {{5, 2, 3, 0}, {9, 1, 2, kEntryWeighted}}, {1, 2, 2},
                                     std::vector<int64_t>(ids), {0.5f, 2.0f});
  Message narrow = EncodeLookupRequest(LookupMeta{3, kLookupIds32 | kLookupNoContext, 42},
                                       {{5, 2, 3, 0}, {9, 1, 2, kEntryWeighted}}, {1, 2, 2},
                                       std::vector<int64_t>(ids), {0.5f, 2.0f});
  EXPECT_EQ(wide.frames[3].size(), 40u);
  EXPECT_EQ(narrow.frames[3].size(), 20u);
  auto r = DecodeLookupRequest(Transmit(narrow));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->meta.flags, kLookupIds32 | kLookupNoContext);
  ASSERT_EQ(r->ids.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(r->ids[i], ids[i]) << i;
  // The widened ids live in the request: moved twice, they stay valid.
  LookupRequest moved = std::move(r).value();
  LookupRequest again;
  again = std::move(moved);
  EXPECT_EQ(again.ids[2], 4'294'967'295);
  // Counted as uint32: an ids frame of 8-byte ids is 2x too long.
  Message mislabeled = Transmit(wide);
  LookupMeta meta{3, kLookupIds32, 42};
  mislabeled.frames[0] = zmq::message_t(&meta, sizeof(meta));
  EXPECT_NE(DecodeLookupRequest(std::move(mislabeled)).status().message().find("announce 5 ids but 10"),
            std::string::npos);
}

TEST(MessagesTest, LookupUnknownMetaFlagsRefused) {
  Message m = Transmit(SampleLookup());
  LookupMeta meta{3, 16, 42};
  m.frames[0] = zmq::message_t(&meta, sizeof(meta));
  auto r = DecodeLookupRequest(std::move(m));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("unknown flags 16"), std::string::npos) << r.status();
  // The known ones pass.
  Message known = Transmit(SampleLookup());
  meta.flags = kLookupNoContext | kLookupIds32 | kLookupAfterOwnPush | kLookupBf16Values;
  known.frames[0] = zmq::message_t(&meta, sizeof(meta));
  known.frames[3] = zmq::message_t(known.frames[3].size() / 2);  // ids as uint32
  auto k = DecodeLookupRequest(std::move(known));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->meta.flags, kLookupNoContext | kLookupIds32 | kLookupAfterOwnPush | kLookupBf16Values);
}

TEST(MessagesTest, LookupWrongFrameCount) {
  Message m = Transmit(SampleLookup());
  m.frames.pop_back();
  EXPECT_NE(DecodeLookupRequest(std::move(m)).status().message().find("frames"), std::string::npos);
}

TEST(MessagesTest, LookupTruncatedFrame) {
  Message m = Transmit(SampleLookup());
  m.frames[3] = zmq::message_t(m.frames[3].data(), m.frames[3].size() - 3);  // ids cut mid-element
  auto r = DecodeLookupRequest(std::move(m));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("multiple"), std::string::npos);
}

TEST(MessagesTest, LookupLengthsNotSummingToIds) {
  LookupMeta meta{0, 0, 1};
  Message m = EncodeLookupRequest(meta, {{1, 2, 3, 0}}, {1, 1}, {1, 2, 3}, {});
  auto r = DecodeLookupRequest(Transmit(m));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("sum to 2"), std::string::npos) << r.status();
}

TEST(MessagesTest, LookupIdCountMismatch) {
  Message m = EncodeLookupRequest(LookupMeta{}, {{1, 1, 3, 0}}, {3}, {1, 2}, {});
  EXPECT_FALSE(DecodeLookupRequest(Transmit(m)).ok());
}

TEST(MessagesTest, LookupNegativeLength) {
  Message m = EncodeLookupRequest(LookupMeta{}, {{1, 2, 0, 0}}, {-1, 1}, {}, {});
  EXPECT_NE(DecodeLookupRequest(Transmit(m)).status().message().find("negative"), std::string::npos);
}

TEST(MessagesTest, LookupWeightsMismatch) {
  Message m = EncodeLookupRequest(LookupMeta{}, {{1, 1, 2, 1}}, {2}, {1, 2}, {1.0f});
  EXPECT_NE(DecodeLookupRequest(Transmit(m)).status().message().find("weights"), std::string::npos);
}

TEST(MessagesTest, LookupRowsEntriesHaveNoBagsWeightsOrPartials) {
  // Beside a pooled entry: lengths belong to the pooled one only.
  Message ok = EncodeLookupRequest(LookupMeta{}, {{1, 0, 3, kEntryRows}, {2, 1, 2, 0}}, {2}, {4, 5, 6, 7, 8}, {});
  auto r = DecodeLookupRequest(Transmit(ok));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->entries[0].rows());
  EXPECT_FALSE(r->entries[1].rows());
  for (const LookupEntry& bad : {LookupEntry{1, 1, 1, kEntryRows}, LookupEntry{1, 0, 1, kEntryRows | kEntryWeighted},
                                 LookupEntry{1, 0, 1, kEntryRows | kEntrySumPartial}}) {
    std::vector<int32_t> lengths(bad.num_bags, 1);
    std::vector<float> weights(bad.weighted() ? 1 : 0, 1.0f);
    Message m = EncodeLookupRequest(LookupMeta{}, {bad}, std::move(lengths), {4}, std::move(weights));
    auto d = DecodeLookupRequest(Transmit(m));
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << bad.flags;
    EXPECT_NE(d.status().message().find("rows lookup entry"), std::string::npos) << d.status();
  }
}

TEST(MessagesTest, LookupBadMetaSize) {
  Message m = Transmit(SampleLookup());
  m.frames[0] = zmq::message_t(8);
  EXPECT_FALSE(DecodeLookupRequest(std::move(m)).ok());
}

TEST(MessagesTest, PushRoundTripAndErrors) {
  Message m = EncodePushRequest(PushMeta{1, 0, 5}, {{2, 2, 3, 0}}, std::vector<float>(6, 1.5f));
  auto r = DecodePushRequest(Transmit(m));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->meta.step, 5u);
  EXPECT_EQ(r->grads.size(), 6u);
  Message bad = EncodePushRequest(PushMeta{}, {{2, 2, 3, 0}}, std::vector<float>(5, 0.0f));
  EXPECT_NE(DecodePushRequest(Transmit(bad)).status().message().find("announce 6"), std::string::npos);
}

TEST(MessagesTest, Bf16ValuesTravelInHalfTheBytesRoundedOnce) {
  const std::vector<float> values = {1.0f, -3.14159f, 1e-30f, 0.1f, 1.00390625f, 7.0f};
  Header req;
  req.op = Opcode::kLookup;
  Message reply = EncodeLookupResponse(req, std::vector<float>(values), /*bf16=*/true);
  ASSERT_EQ(reply.frames.size(), 1u);
  EXPECT_EQ(reply.frames[0].size(), values.size() * 2);
  ArrayFrame<float> got;
  ASSERT_TRUE(DecodeLookupResponse(Transmit(reply), values.size(), &got, true).ok());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], Bf16BitsToFloat(FloatToBf16Bits(values[i]))) << i;
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_NE(got[1], values[1]);
  // Read as float32 (a receiver that did not ask for bfloat16): 6 x 2 bytes
  // are 3 floats, not the 6 expected.
  EXPECT_FALSE(DecodeLookupResponse(Transmit(reply), values.size(), &got, false).ok());
  // An odd byte count is not bfloat16.
  Message odd = MakeReply(req);
  odd.AddBytes("abc", 3);
  EXPECT_FALSE(DecodeLookupResponse(Transmit(odd), 1, &got, true).ok());

  Message push = EncodePushRequest(PushMeta{1, kPushBf16Grads, 5}, {{2, 2, 3, 0}}, std::vector<float>(values));
  EXPECT_EQ(push.frames[2].size(), values.size() * 2);
  auto r = DecodePushRequest(Transmit(push));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->grads.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(r->grads[i], Bf16BitsToFloat(FloatToBf16Bits(values[i])));
  // The flag and the bytes must agree: 6 bfloat16 values announced as 6 floats.
  Message lying = Transmit(push);
  PushMeta plain{1, 0, 5};
  lying.frames[0] = zmq::message_t(&plain, sizeof(plain));
  EXPECT_NE(DecodePushRequest(std::move(lying)).status().message().find("announce 6"), std::string::npos);
}

TEST(MessagesTest, PushUnknownMetaFlagsRefused) {
  Message m = EncodePushRequest(PushMeta{1, 0, 5}, {{2, 2, 3, 0}}, std::vector<float>(6, 1.5f));
  PushMeta meta{1, 2, 5};
  m.frames[0] = zmq::message_t(&meta, sizeof(meta));
  EXPECT_NE(DecodePushRequest(Transmit(m)).status().message().find("unknown flags"), std::string::npos);
}

TEST(MessagesTest, LookupResponseSizeChecked) {
  Header req;
  req.op = Opcode::kLookup;
  Message reply = EncodeLookupResponse(req, std::vector<float>(8, 1.0f));
  ArrayFrame<float> values;
  EXPECT_TRUE(DecodeLookupResponse(Transmit(reply), 8, &values).ok());
  EXPECT_FALSE(DecodeLookupResponse(Transmit(reply), 9, &values).ok());
  Message err = MakeErrorReply(req, Status::OutOfRange("id 12 not in shard"));
  Status st = DecodeLookupResponse(Transmit(err), 8, &values);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(), "id 12 not in shard");
}

TEST(MessagesTest, JsonRoundTripAndGarbage) {
  nlohmann::json body = {{"role", "ps"}, {"port", 123}};
  auto j = DecodeJson(Transmit(EncodeJson(Opcode::kRegister, body)));
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["port"], 123);
  Message garbage(Opcode::kRegister);
  garbage.AddString("{not json");
  EXPECT_EQ(DecodeJson(garbage).status().code(), StatusCode::kInvalidArgument);
}

// Found writing the fuzz targets: a body nested 100,000 deep (200 KB)
// overflowed the stack of a master printing it in an error ("rank: must be
// an integer, got [[[..."). Nesting is bounded where JSON is read.
TEST(MessagesTest, JsonNestedTooDeep) {
  auto nested = [](int depth) {
    return "{\"role\": \"ps\", \"rank\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  Message deep(Opcode::kHeartbeat);
  deep.AddString(nested(100000));
  auto j = DecodeJson(deep);
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("nested deeper than 64"), std::string::npos) << j.status();
  Message fine(Opcode::kHeartbeat);
  fine.AddString(nested(kMaxJsonDepth - 1));
  EXPECT_TRUE(DecodeJson(fine).ok());
}

// The transport's decoding of received parts: a header it cannot accept
// still yields the request id, so the sender can be told.
TEST(WireFormatTest, DecodeMessageKeepsTheRequestIdOfABadHeader) {
  Header h;
  h.op = Opcode::kLookup;
  h.request_id = 77;
  h.frame_count = 2;
  uint8_t header[kHeaderBytes];
  EncodeHeader(h, header);
  auto parts = [&](int frames) {
    std::vector<zmq::message_t> p;
    p.emplace_back("routing", 7);
    p.emplace_back(header, kHeaderBytes);
    for (int i = 0; i < frames; ++i) p.emplace_back("x", 1);
    return p;
  };
  Message m;
  ASSERT_TRUE(DecodeMessage(parts(2), 1, &m).ok());
  EXPECT_EQ(m.frames.size(), 2u);
  const Status wrong_count = DecodeMessage(parts(3), 1, &m);
  EXPECT_NE(wrong_count.message().find("announces 2 frames but 3 arrived"), std::string::npos) << wrong_count;
  EXPECT_EQ(m.header.request_id, 77u);
  header[4] = 9;  // an unknown protocol version
  EXPECT_FALSE(DecodeMessage(parts(2), 1, &m).ok());
  EXPECT_EQ(m.header.request_id, 77u);
  EXPECT_EQ(m.header.op, Opcode::kLookup);
  EXPECT_FALSE(DecodeMessage(parts(0), 2, &m).ok());  // no header at all
}

}  // namespace
}  // namespace tessera
