// The framing every Tessera message uses on the wire (DESIGN.md §5,
// docs/wire_format.md). One ZeroMQ multipart message per request or reply:
//
//   Message := Header Frame{frame_count}
//   Header  := magic:fixed32 version:fixed16 op:fixed16 request_id:fixed64
//              plan_version:fixed32 status:fixed16 frame_count:fixed16
//              (24 bytes, little-endian; magic = "TSRA" = 0x41525354)
//   Frame   := raw bytes: a little-endian array of one element type, a small
//              fixed-layout struct array, UTF-8 text or JSON (per message)
//
// A reply carries the request's op and request_id. status != OK makes it an
// error reply: ErrorReply := Header(status) Text, Text := UTF-8 message.
// The per-message frame grammars live in common/messages.h.
//
// Arrays travel as raw frames: encoding moves a std::vector into the frame
// without copying; decoding returns a span over the received frame, or over a
// copy when the frame is not aligned for the element type.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <zmq.hpp>

#include "common/status.h"

namespace tessera {

inline constexpr uint32_t kWireMagic = 0x41525354;  // "TSRA" little-endian
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kHeaderBytes = 24;
// No Tessera message has more frames; a header claiming more is malformed.
inline constexpr uint16_t kMaxFrames = 64;

// Append only: the numbers are on the wire.
enum class Opcode : uint16_t {
  kInvalid = 0,
  // Control plane (JSON frame), master side.
  kRegister = 1,
  kHeartbeat = 2,
  kWaitStart = 3,
  kReportDone = 4,
  kStoreSet = 5,
  kStoreGet = 6,
  kCommand = 7,
  kCheckpointBarrier = 8,
  kStoreAdd = 9,
  // Control plane, parameter-server side.
  kCreateShards = 20,
  kShutdown = 21,
  kDumpShards = 22,
  kAbort = 23,
  kServerStats = 24,
  kSnapshot = 25,
  kPromote = 26,
  kMigrate = 27,
  // Between parameter servers (a migration).
  kFetchRows = 28,
  // Data plane.
  kLookup = 40,
  kPushGradients = 41,
};
const char* OpcodeName(Opcode op);

struct Header {
  uint16_t version = kWireVersion;
  Opcode op = Opcode::kInvalid;
  uint64_t request_id = 0;
  uint32_t plan_version = 0;
  StatusCode status = StatusCode::kOk;
  uint16_t frame_count = 0;
};

void EncodeHeader(const Header& h, uint8_t out[kHeaderBytes]);
// Checks size, magic, version and that status and frame_count are in range.
Status DecodeHeader(const void* data, size_t size, Header* h);

// A decoded or to-be-encoded message: the header plus the frames after it.
// header.frame_count is filled in from frames.size() when it is sent.
struct Message {
  Header header;
  std::vector<zmq::message_t> frames;

  Message() = default;
  explicit Message(Opcode op) { header.op = op; }
  Message(Message&&) = default;
  Message& operator=(Message&&) = default;

  // Copies `size` bytes into a new frame.
  void AddBytes(const void* data, size_t size) { frames.emplace_back(data, size); }
  void AddString(std::string_view s) { AddBytes(s.data(), s.size()); }
  // Moves the vector into a new frame without copying its elements.
  template <typename T>
  void AddArray(std::vector<T>&& v);
  // Copies the elements into a new frame.
  template <typename T>
  void AddArrayCopy(std::span<const T> v) {
    AddBytes(v.data(), v.size_bytes());
  }
  template <typename T>
  void AddStruct(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    AddBytes(&v, sizeof(T));
  }
};

// An error reply to `request` (same op and request id).
Message MakeErrorReply(const Header& request, const Status& status);
// A reply header for `request` with status OK.
Message MakeReply(const Header& request);
// The Status an error reply carries (OK for a non-error reply).
Status StatusFromReply(const Message& reply);

// Checks the message has exactly `n` frames.
Status ExpectFrames(const Message& m, size_t n);

// The received parts of one multipart message from `first` on (Header
// Frame*, after any routing id) as *m, the frames moved out of `parts`.
// InvalidArgument when there is no header, the header is malformed or the
// frame count disagrees with it; *m's header then holds what could be read
// (op and request id, when the header has 16 bytes or more), so the receiver
// can answer the sender with an error reply.
Status DecodeMessage(std::vector<zmq::message_t>&& parts, size_t first, Message* m);

// A typed read-only view of a received array frame. Keeps a copy only when
// the frame's bytes are not aligned for T.
template <typename T>
class ArrayFrame {
 public:
  ArrayFrame() = default;
  // A copy views its own copy_ (a moved vector keeps its buffer: the default
  // moves are right).
  ArrayFrame(const ArrayFrame& o) : span_(o.span_), copy_(o.copy_) {
    if (!copy_.empty()) span_ = std::span<const T>(copy_);
  }
  ArrayFrame& operator=(const ArrayFrame& o) {
    if (this != &o) {
      copy_ = o.copy_;
      span_ = copy_.empty() ? o.span_ : std::span<const T>(copy_);
    }
    return *this;
  }
  ArrayFrame(ArrayFrame&&) noexcept = default;
  ArrayFrame& operator=(ArrayFrame&&) noexcept = default;

  std::span<const T> span() const { return span_; }
  size_t size() const { return span_.size(); }
  const T* data() const { return span_.data(); }
  const T& operator[](size_t i) const { return span_[i]; }

  // Reads frame `index` of `m` as an array of T; the frame's length must be a
  // multiple of sizeof(T). `what` names the field in errors.
  Status Read(const Message& m, size_t index, const char* what);

  // Reads frame `index` as an array of Narrow (a narrower encoding of T on
  // the wire) and keeps it widened to T.
  template <typename Narrow>
  Status ReadWidened(const Message& m, size_t index, const char* what);

 private:
  std::span<const T> span_;
  std::vector<T> copy_;
};

// Reads frame `index` as exactly one T (a fixed-layout struct).
template <typename T>
Status ReadStruct(const Message& m, size_t index, const char* what, T* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (index >= m.frames.size()) return Status::InvalidArgument(std::string("missing frame: ") + what);
  const auto& f = m.frames[index];
  if (f.size() != sizeof(T)) {
    return Status::InvalidArgument(std::string(what) + " frame has " + std::to_string(f.size()) +
                                   " bytes, expected " + std::to_string(sizeof(T)));
  }
  std::memcpy(out, f.data(), sizeof(T));
  return Status::OK();
}

// ---- implementation of the templates ----

template <typename T>
void Message::AddArray(std::vector<T>&& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (v.empty()) {
    frames.emplace_back();
    return;
  }
  auto* owned = new std::vector<T>(std::move(v));
  frames.emplace_back(
      owned->data(), owned->size() * sizeof(T),
      [](void*, void* hint) { delete static_cast<std::vector<T>*>(hint); }, owned);
}

template <typename T>
Status ArrayFrame<T>::Read(const Message& m, size_t index, const char* what) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (index >= m.frames.size()) return Status::InvalidArgument(std::string("missing frame: ") + what);
  const auto& f = m.frames[index];
  if (f.size() % sizeof(T) != 0) {
    return Status::InvalidArgument(std::string(what) + " frame has " + std::to_string(f.size()) +
                                   " bytes, not a multiple of " + std::to_string(sizeof(T)));
  }
  const size_t n = f.size() / sizeof(T);
  const void* p = f.data();
  if (n == 0) {
    span_ = {};
  } else if (reinterpret_cast<uintptr_t>(p) % alignof(T) == 0) {
    span_ = std::span<const T>(static_cast<const T*>(p), n);
  } else {
    copy_.resize(n);
    std::memcpy(copy_.data(), p, f.size());
    span_ = std::span<const T>(copy_);
  }
  return Status::OK();
}

template <typename T>
template <typename Narrow>
Status ArrayFrame<T>::ReadWidened(const Message& m, size_t index, const char* what) {
  ArrayFrame<Narrow> narrow;
  TESSERA_RETURN_IF_ERROR(narrow.Read(m, index, what));
  copy_.assign(narrow.span().begin(), narrow.span().end());
  span_ = std::span<const T>(copy_);
  return Status::OK();
}

}  // namespace tessera
