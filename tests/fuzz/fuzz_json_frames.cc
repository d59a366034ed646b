// The JSON frames of control-plane messages (DecodeJson, DecodeJsonFrame):
//   Input := status:fixed8 index:fixed8 Frame*   (tests/fuzz/fuzz_frames.h)
// Besides not crashing: an error reply comes back as its status, and what
// decodes prints as JSON that parses back to the same value.
#include <glog/logging.h>

#include <nlohmann/json.hpp>

#include "common/messages.h"
#include "tests/fuzz/fuzz_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 2) return 0;
  const auto status = static_cast<StatusCode>(data[0] % (kMaxStatusCode + 1));
  const size_t index = data[1];
  Message m = MessageFromFrames(Opcode::kCommand, data + 2, size - 2);
  m.header.status = status;
  for (const StatusOr<nlohmann::json>& j : {DecodeJson(m), DecodeJsonFrame(m, index)}) {
    if (status != StatusCode::kOk) {
      CHECK(j.status().code() == status) << j.status();
      continue;
    }
    if (!j.ok()) continue;
    const std::string text = j->dump();
    CHECK(nlohmann::json::parse(text) == *j) << text;
  }
  return 0;
}
