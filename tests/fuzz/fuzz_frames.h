// How the fuzz targets of binary messages read their input: as the frames of
// one multipart ZeroMQ message, each behind its length, so that mutations
// add, drop, grow and shrink frames as well as change their bytes:
//
//   Input := Frame*
//   Frame := size:fixed16 bytes[size]   (little-endian; a last frame cut
//                                        short keeps the bytes that are there)
//
// tessera_fuzz_seeds writes the seed corpora in this form from the encoders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <glog/logging.h>
#include <zmq.hpp>

#include "common/status.h"
#include "common/wire_format.h"

namespace tessera {

std::vector<zmq::message_t> SplitFrames(const uint8_t* data, size_t size);
// The inverse: frames longer than 65535 bytes are cut there.
std::string JoinFrames(const std::vector<zmq::message_t>& frames);

// A message with `op` in its header (status OK) and the input's frames.
Message MessageFromFrames(Opcode op, const uint8_t* data, size_t size);

// The elements of a decoded array frame, to encode them again.
template <typename T>
std::vector<T> Elements(const ArrayFrame<T>& a) {
  return std::vector<T>(a.span().begin(), a.span().end());
}

// Decodes the input's frames as an `op` request; when that succeeds, checks
// that encoding what was decoded gives the same frames back, so what a
// receiver accepts is exactly what a sender can send.
template <typename Request, typename Decode, typename Encode>
void CheckDecodeEncodesBack(Opcode op, const uint8_t* data, size_t size, Decode decode, Encode encode) {
  Message m = MessageFromFrames(op, data, size);
  const std::string sent = JoinFrames(m.frames);
  StatusOr<Request> r = decode(std::move(m));
  if (!r.ok()) return;
  CHECK(JoinFrames(encode(*r).frames) == sent) << OpcodeName(op) << " decoded, then encoded to other frames";
}

}  // namespace tessera
