// A lookup's reply (DecodeLookupResponse), ok or an error reply:
//   Input := status_and_bf16:fixed8 expected_values:fixed16 Frame*   (tests/fuzz/fuzz_frames.h)
// (the top bit of the first byte: the values are bfloat16, as a lookup with
// kLookupBf16Values asked)
// Besides not crashing: an error status always comes back as that status,
// and an accepted reply holds exactly the values the frame carries.
#include <cstring>

#include <glog/logging.h>

#include "common/bfloat16.h"
#include "common/messages.h"
#include "tests/fuzz/fuzz_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 3) return 0;
  const auto status = static_cast<StatusCode>((data[0] & 0x7f) % (kMaxStatusCode + 1));
  const bool bf16 = (data[0] & 0x80) != 0;
  const size_t expected = data[1] | (data[2] << 8);
  Message m = MessageFromFrames(Opcode::kLookup, data + 3, size - 3);
  m.header.status = status;
  ArrayFrame<float> values;
  const Status st = DecodeLookupResponse(m, expected, &values, bf16);
  if (status != StatusCode::kOk) {
    CHECK(st.code() == status) << st;
    return 0;
  }
  if (!st.ok()) return 0;
  CHECK_EQ(values.size(), expected);
  if (bf16) {
    CHECK_EQ(m.frames[0].size(), expected * sizeof(Bf16));
    for (size_t i = 0; i < expected; ++i) {
      uint16_t bits;
      std::memcpy(&bits, static_cast<const uint8_t*>(m.frames[0].data()) + 2 * i, 2);
      const float want = Bf16BitsToFloat(bits);  // bit for bit: NaNs too
      CHECK_EQ(std::memcmp(&values[i], &want, sizeof(float)), 0);
    }
    return 0;
  }
  CHECK_EQ(m.frames[0].size(), expected * sizeof(float));
  if (expected > 0) CHECK_EQ(std::memcmp(values.data(), m.frames[0].data(), m.frames[0].size()), 0);
  return 0;
}
