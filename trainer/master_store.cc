#include "trainer/master_store.h"

#include "common/messages.h"
#include "trainer/text_fields.h"

namespace tessera {

Status MasterStore::Set(const std::string& key, std::string value) {
  Message m(Opcode::kStoreSet);
  m.AddString(key);
  m.AddString(value);
  auto reply = client_->CallSync(master_peer_, std::move(m), set_timeout_);
  if (!reply.ok()) return reply.status().WithContext("store set " + key);
  return Status::OK();
}

StatusOr<int64_t> MasterStore::Add(const std::string& key, int64_t delta) {
  Message m(Opcode::kStoreAdd);
  m.AddString(key);
  m.frames.emplace_back(&delta, sizeof(delta));  // little-endian, as every integer on the wire
  auto reply = client_->CallSync(master_peer_, std::move(m), set_timeout_);
  if (!reply.ok()) return reply.status().WithContext("store add " + key);
  if (reply->frames.size() != 1) return Status::DataLoss("store add " + key + ": malformed reply");
  int64_t count = 0;
  if (!ParseInteger(reply->frames[0].to_string(), &count)) {
    return Status::DataLoss("store add " + key + ": the reply is not a count");
  }
  return count;
}

StatusOr<std::string> MasterStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  Message m(Opcode::kStoreGet);
  m.AddString(key);
  auto reply = client_->CallSync(master_peer_, std::move(m), timeout);
  if (!reply.ok()) return reply.status().WithContext("store get " + key);
  if (reply->frames.size() != 1) return Status::DataLoss("store get " + key + ": malformed reply");
  return reply->frames[0].to_string();
}

}  // namespace tessera
