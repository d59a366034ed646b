#include "master/kv_store.h"

#include <charconv>

namespace tessera {

namespace {
Message ValueReply(const Header& request, const std::string& value) {
  Message m = MakeReply(request);
  m.AddString(value);
  return m;
}
}  // namespace

void KvStore::Set(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  StoreLocked(key, std::move(value));
}

void KvStore::StoreLocked(const std::string& key, std::string value) {
  const std::string& v = values_[key] = std::move(value);
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  // Replying only queues the message for the I/O thread: fine under the lock.
  for (Responder& r : it->second) r.Reply(ValueReply(r.request_header(), v));
  waiters_.erase(it);
}

StatusOr<int64_t> KvStore::Add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t count = 0;
  if (auto it = values_.find(key); it != values_.end()) {
    const std::string& v = it->second;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), count);
    if (ec != std::errc() || end != v.data() + v.size()) {
      return Status::InvalidArgument("store add " + key + ": its value is not a counter");
    }
  }
  if (__builtin_add_overflow(count, delta, &count)) {
    return Status::InvalidArgument("store add " + key + ": the counter would overflow");
  }
  StoreLocked(key, std::to_string(count));
  return count;
}

void KvStore::Get(const std::string& key, Responder responder) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(key);
  if (it != values_.end()) {
    responder.Reply(ValueReply(responder.request_header(), it->second));
    return;
  }
  waiters_[key].push_back(std::move(responder));
}

void KvStore::FailWaiters(const Status& status) {
  std::map<std::string, std::vector<Responder>> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting.swap(waiters_);
  }
  for (auto& [key, rs] : waiting) {
    for (Responder& r : rs) r.ReplyError(status);
  }
}

}  // namespace tessera
