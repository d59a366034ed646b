#include "trainer/master_store.h"

#include <charconv>

#include "common/messages.h"

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
  const std::string text = reply->frames[0].to_string();
  int64_t count = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (ec != std::errc() || end != text.data() + text.size()) {
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
