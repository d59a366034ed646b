#include "tests/fuzz/fuzz_frames.h"

#include <algorithm>

namespace tessera {

std::vector<zmq::message_t> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<zmq::message_t> frames;
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t announced = data[at] | (data[at + 1] << 8);
    at += 2;
    const size_t n = std::min(announced, size - at);
    frames.emplace_back(data + at, n);
    at += n;
  }
  return frames;
}

std::string JoinFrames(const std::vector<zmq::message_t>& frames) {
  std::string out;
  for (const zmq::message_t& f : frames) {
    const size_t n = std::min<size_t>(f.size(), 0xffff);
    out.push_back(static_cast<char>(n & 0xff));
    out.push_back(static_cast<char>(n >> 8));
    out.append(static_cast<const char*>(f.data()), n);
  }
  return out;
}

Message MessageFromFrames(Opcode op, const uint8_t* data, size_t size) {
  Message m(op);
  m.frames = SplitFrames(data, size);
  m.header.frame_count = static_cast<uint16_t>(std::min<size_t>(m.frames.size(), 0xffff));
  return m;
}

}  // namespace tessera
