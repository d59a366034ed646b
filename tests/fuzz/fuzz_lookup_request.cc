// LookupRequest (common/messages.h) from the frames of a LOOKUP message.
// Besides not crashing: a request that decodes encodes back to the same
// frames.
#include "common/messages.h"
#include "tests/fuzz/fuzz_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  CheckDecodeEncodesBack<LookupRequest>(Opcode::kLookup, data, size, DecodeLookupRequest, [](const LookupRequest& r) {
    return EncodeLookupRequest(r.meta, Elements(r.entries), Elements(r.lengths), Elements(r.ids), Elements(r.weights));
  });
  return 0;
}
