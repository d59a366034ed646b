// PushRequest (common/messages.h) from the frames of a PUSH_GRADIENTS
// message. Besides not crashing: a request that decodes encodes back to the
// same frames.
#include "common/messages.h"
#include "tests/fuzz/fuzz_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  CheckDecodeEncodesBack<PushRequest>(Opcode::kPushGradients, data, size, DecodePushRequest, [](const PushRequest& r) {
    return EncodePushRequest(r.meta, Elements(r.entries), Elements(r.grads));
  });
  return 0;
}
