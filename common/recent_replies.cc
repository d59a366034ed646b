#include "common/recent_replies.h"

#include <cstring>

namespace tessera {

Message ShareFrames(Message& m) {
  Message copy;
  copy.header = m.header;
  copy.frames.reserve(m.frames.size());
  for (zmq::message_t& f : m.frames) {
    copy.frames.emplace_back();
    copy.frames.back().copy(f);
  }
  return copy;
}

RecentReplies::RecentReplies(size_t max_entries, size_t max_kept_bytes, size_t max_reply_bytes,
                             Clock::duration max_age, std::function<Clock::time_point()> now)
    : max_entries_(max_entries),
      max_kept_bytes_(max_kept_bytes),
      max_reply_bytes_(max_reply_bytes),
      max_age_(max_age),
      now_(std::move(now)) {}

std::string RecentReplies::Key(const std::string& routing_id, uint64_t request_id) {
  std::string key = routing_id;
  key.append(reinterpret_cast<const char*>(&request_id), sizeof(request_id));
  return key;
}

RecentReplies::Seen RecentReplies::Arrived(const std::string& routing_id, uint64_t request_id, Message* reply) {
  auto [it, inserted] = entries_.try_emplace(Key(routing_id, request_id));
  if (inserted) return Seen::kNew;
  Entry& e = it->second;
  if (!e.answered) return Seen::kInProgress;
  if (e.kept) {
    *reply = ShareFrames(e.reply);
    return Seen::kAnswered;
  }
  // Answered, but too large to keep: served again (it is in progress now;
  // its old place in the eviction order goes when it is reached).
  e.answered = false;
  return Seen::kNew;
}

void RecentReplies::Answered(const std::string& routing_id, uint64_t request_id, Message& reply) {
  const std::string key = Key(routing_id, request_id);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.answered) return;
  Entry& e = it->second;
  e.answered = true;
  size_t bytes = 0;
  for (const zmq::message_t& f : reply.frames) bytes += f.size();
  if (bytes <= max_reply_bytes_) {
    kept_bytes_ -= e.kept ? e.bytes : 0;
    e.reply = ShareFrames(reply);
    e.kept = true;
    e.bytes = bytes;
    kept_bytes_ += bytes;
  }
  const Clock::time_point now = now_();
  answered_.emplace_back(now, key);
  Evict(now);
}

void RecentReplies::Evict(Clock::time_point now) {
  const Clock::time_point oldest = now - max_age_;
  while (!answered_.empty() && (entries_.size() > max_entries_ || kept_bytes_ > max_kept_bytes_ ||
                                answered_.front().first < oldest)) {
    auto it = entries_.find(answered_.front().second);
    answered_.pop_front();
    // In progress again (served a second time): it is queued again when answered.
    if (it == entries_.end() || !it->second.answered) continue;
    if (it->second.kept) kept_bytes_ -= it->second.bytes;
    entries_.erase(it);
  }
}

}  // namespace tessera
