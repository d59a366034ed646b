#include "common/master_registration.h"

#include <algorithm>
#include <thread>

#include "common/messages.h"

namespace tessera {

StatusOr<nlohmann::json> RegisterWithMaster(RpcClient* client, int master_peer, const std::string& master,
                                            const nlohmann::json& body, std::chrono::milliseconds give_up) {
  const auto deadline = std::chrono::steady_clock::now() + give_up;
  Status last = Status::DeadlineExceeded("no attempt within the time given");
  while (std::chrono::steady_clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto reply = client->CallSync(master_peer, EncodeJson(Opcode::kRegister, body),
                                  std::min(left, std::chrono::milliseconds(2000)) + std::chrono::milliseconds(1));
    if (reply.ok()) return DecodeJson(*reply);
    last = reply.status();
    // No answer yet: the master is not up (or not reachable) so far.
    if (last.code() != StatusCode::kDeadlineExceeded && last.code() != StatusCode::kUnavailable) {
      return last.WithContext("registering with the master");
    }
    // The master answered "not yet" (a rank still held by a member it has
    // not found lost): ask again shortly rather than at once.
    if (last.code() == StatusCode::kUnavailable) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status::Unavailable("could not reach the master at " + master + ": " + last.ToString());
}

}  // namespace tessera
