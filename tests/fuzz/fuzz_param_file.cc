// A parameter file (DecodeParams: a trainer's state in a checkpoint, in a
// WAIT_START reply and at a barrier; a server's dump). The input's last four
// bytes are replaced by the CRC of the rest, as a writer would put it, so
// the fuzzer explores the entries rather than the checksum. Besides not
// crashing: what decodes encodes back to the same bytes.
#include <string>

#include <glog/logging.h>

#include "common/param_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 4) return 0;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  const uint32_t crc = Crc32(bytes.data(), size - 4);
  for (int i = 0; i < 4; ++i) bytes[size - 4 + i] = static_cast<char>(crc >> (8 * i));
  auto arrays = DecodeParams(bytes, "fuzzed");
  if (!arrays.ok()) return 0;
  auto again = EncodeParams(*arrays);
  CHECK(again.ok()) << again.status();
  CHECK(*again == bytes);
  return 0;
}
