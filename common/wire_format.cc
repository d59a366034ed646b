#include "common/wire_format.h"

#include <string>

namespace tessera {
namespace {

// Little-endian stores and loads, independent of the host's byte order.
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const char* OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kInvalid: return "INVALID";
    case Opcode::kRegister: return "REGISTER";
    case Opcode::kHeartbeat: return "HEARTBEAT";
    case Opcode::kWaitStart: return "WAIT_START";
    case Opcode::kReportDone: return "REPORT_DONE";
    case Opcode::kStoreSet: return "STORE_SET";
    case Opcode::kStoreGet: return "STORE_GET";
    case Opcode::kCommand: return "COMMAND";
    case Opcode::kCheckpointBarrier: return "CHECKPOINT_BARRIER";
    case Opcode::kStoreAdd: return "STORE_ADD";
    case Opcode::kCreateShards: return "CREATE_SHARDS";
    case Opcode::kShutdown: return "SHUTDOWN";
    case Opcode::kDumpShards: return "DUMP_SHARDS";
    case Opcode::kAbort: return "ABORT";
    case Opcode::kServerStats: return "SERVER_STATS";
    case Opcode::kSnapshot: return "SNAPSHOT";
    case Opcode::kPromote: return "PROMOTE";
    case Opcode::kMigrate: return "MIGRATE";
    case Opcode::kFetchRows: return "FETCH_ROWS";
    case Opcode::kLookup: return "LOOKUP";
    case Opcode::kPushGradients: return "PUSH_GRADIENTS";
  }
  return "UNKNOWN";
}

void EncodeHeader(const Header& h, uint8_t out[kHeaderBytes]) {
  Put32(out + 0, kWireMagic);
  Put16(out + 4, h.version);
  Put16(out + 6, static_cast<uint16_t>(h.op));
  Put64(out + 8, h.request_id);
  Put32(out + 16, h.plan_version);
  Put16(out + 20, static_cast<uint16_t>(h.status));
  Put16(out + 22, h.frame_count);
}

Status DecodeHeader(const void* data, size_t size, Header* h) {
  if (size != kHeaderBytes) {
    return Status::InvalidArgument("header frame has " + std::to_string(size) + " bytes, expected " +
                                   std::to_string(kHeaderBytes));
  }
  const auto* p = static_cast<const uint8_t*>(data);
  if (Get32(p) != kWireMagic) return Status::InvalidArgument("bad magic in header: not a Tessera message");
  h->version = Get16(p + 4);
  if (h->version != kWireVersion) {
    return Status::InvalidArgument("unsupported protocol version " + std::to_string(h->version) + " (this build speaks " +
                                   std::to_string(kWireVersion) + ")");
  }
  h->op = static_cast<Opcode>(Get16(p + 6));
  h->request_id = Get64(p + 8);
  h->plan_version = Get32(p + 16);
  const uint16_t status = Get16(p + 20);
  if (status > kMaxStatusCode) return Status::InvalidArgument("unknown status code " + std::to_string(status));
  h->status = static_cast<StatusCode>(status);
  h->frame_count = Get16(p + 22);
  if (h->frame_count > kMaxFrames) {
    return Status::InvalidArgument("header claims " + std::to_string(h->frame_count) + " frames (max " +
                                   std::to_string(kMaxFrames) + ")");
  }
  return Status::OK();
}

Message MakeErrorReply(const Header& request, const Status& status) {
  Message m(request.op);
  m.header.request_id = request.request_id;
  m.header.plan_version = request.plan_version;
  m.header.status = status.ok() ? StatusCode::kInternal : status.code();
  m.AddString(status.ok() ? "error reply built from an OK status" : status.message());
  return m;
}

Message MakeReply(const Header& request) {
  Message m(request.op);
  m.header.request_id = request.request_id;
  m.header.plan_version = request.plan_version;
  return m;
}

Status StatusFromReply(const Message& reply) {
  if (reply.header.status == StatusCode::kOk) return Status::OK();
  std::string text = reply.frames.empty() ? std::string("(no message)") : reply.frames[0].to_string();
  return Status(reply.header.status, std::move(text));
}

Status ExpectFrames(const Message& m, size_t n) {
  if (m.frames.size() != n) {
    return Status::InvalidArgument(std::string(OpcodeName(m.header.op)) + " has " + std::to_string(m.frames.size()) +
                                   " frames, expected " + std::to_string(n));
  }
  return Status::OK();
}

Status DecodeMessage(std::vector<zmq::message_t>&& parts, size_t first, Message* m) {
  m->frames.clear();
  m->header = Header();
  if (parts.size() <= first) return Status::InvalidArgument("empty message");
  const zmq::message_t& hdr = parts[first];
  // Read the request id even from a header that fails validation, so the
  // sender can be told which request was malformed.
  if (hdr.size() >= 16) {
    const auto* p = static_cast<const uint8_t*>(hdr.data());
    m->header.op = static_cast<Opcode>(Get16(p + 6));
    m->header.request_id = Get64(p + 8);
  }
  Header h;
  TESSERA_RETURN_IF_ERROR(DecodeHeader(hdr.data(), hdr.size(), &h));
  m->header = h;
  const size_t frames = parts.size() - first - 1;
  if (frames != h.frame_count) {
    return Status::InvalidArgument("header announces " + std::to_string(h.frame_count) + " frames but " +
                                   std::to_string(frames) + " arrived");
  }
  m->frames.reserve(frames);
  for (size_t i = first + 1; i < parts.size(); ++i) m->frames.push_back(std::move(parts[i]));
  return Status::OK();
}

}  // namespace tessera
