#include "trainer/master_store.h"

#include "common/messages.h"

namespace tessera {

Status MasterStoreSet(RpcClient* client, int master_peer, const std::string& key, const void* data, size_t size,
                      std::chrono::milliseconds timeout) {
  Message m(Opcode::kStoreSet);
  m.AddString(key);
  m.AddBytes(data, size);
  auto reply = client->CallSync(master_peer, std::move(m), timeout);
  if (!reply.ok()) return reply.status().WithContext("store set " + key);
  return Status::OK();
}

StatusOr<std::string> MasterStoreGet(RpcClient* client, int master_peer, const std::string& key,
                                     std::chrono::milliseconds timeout) {
  Message m(Opcode::kStoreGet);
  m.AddString(key);
  auto reply = client->CallSync(master_peer, std::move(m), timeout);
  if (!reply.ok()) return reply.status().WithContext("store get " + key);
  if (reply->frames.size() != 1) return Status::DataLoss("store get " + key + ": malformed reply");
  return reply->frames[0].to_string();
}

}  // namespace tessera
