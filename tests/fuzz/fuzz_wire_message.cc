// Wire frames: a received multipart message (Header Frame*) decoded as the
// transport does (DecodeMessage), then read the ways the decoders read
// frames. Besides not crashing: a header that decodes encodes back to the
// same bytes, and a frame reads as an array exactly when its size allows.
#include <cstring>

#include <glog/logging.h>

#include "common/messages.h"
#include "common/wire_format.h"
#include "tests/fuzz/fuzz_frames.h"

namespace tessera {
namespace {

template <typename T>
void ReadEveryFrameAs(const Message& m) {
  for (size_t i = 0; i <= m.frames.size(); ++i) {
    ArrayFrame<T> array;
    const Status st = array.Read(m, i, "fuzzed");
    const bool fits = i < m.frames.size() && m.frames[i].size() % sizeof(T) == 0;
    CHECK_EQ(st.ok(), fits) << st;
    if (fits && array.size() > 0) CHECK_EQ(std::memcmp(array.data(), m.frames[i].data(), m.frames[i].size()), 0);
    T one{};
    const Status single = ReadStruct(m, i, "fuzzed", &one);
    CHECK_EQ(single.ok(), i < m.frames.size() && m.frames[i].size() == sizeof(T)) << single;
  }
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  std::vector<zmq::message_t> parts = SplitFrames(data, size);
  const std::string header_bytes = parts.empty() ? std::string() : parts[0].to_string();
  Message m;
  if (!DecodeMessage(std::move(parts), 0, &m).ok()) return 0;

  uint8_t encoded[kHeaderBytes];
  EncodeHeader(m.header, encoded);
  CHECK_EQ(std::string(reinterpret_cast<const char*>(encoded), kHeaderBytes), header_bytes);
  CHECK(ExpectFrames(m, m.frames.size()).ok());
  CHECK(!ExpectFrames(m, m.frames.size() + 1).ok());
  const Status reply = StatusFromReply(m);
  CHECK_EQ(reply.ok(), m.header.status == StatusCode::kOk);

  ReadEveryFrameAs<uint8_t>(m);
  ReadEveryFrameAs<int32_t>(m);
  ReadEveryFrameAs<int64_t>(m);
  ReadEveryFrameAs<LookupEntry>(m);
  return 0;
}
