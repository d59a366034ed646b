// Connections of one RpcClient to a changing set of servers, one per key (an
// endpoint, a member id): made on first use, kept while the server is in the
// job, closed when it leaves. A master, server or trainer that connected to
// every server it ever called would keep a socket and its monitor per server
// that died or left, for as long as the job runs.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/rpc_client.h"
#include "common/status.h"

namespace tessera {

template <typename Key>
class PeerPool {
 public:
  // `client` outlives the pool; `role` is the servers' (RpcClient::Connect).
  PeerPool(RpcClient* client, Role role) : client_(client), role_(role) {}
  PeerPool(const PeerPool&) = delete;
  PeerPool& operator=(const PeerPool&) = delete;

  // The peer of `key`, connected to `endpoint` on first use (a later call's
  // endpoint is not looked at: Forget a key whose server moved).
  StatusOr<int> Get(const Key& key, const std::string& endpoint) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(key);
    if (it != peers_.end()) return it->second;
    TESSERA_ASSIGN_OR_RETURN(int peer, client_->Connect(endpoint, role_));
    peers_[key] = peer;
    return peer;
  }

  // The peer of `key` if it is connected.
  std::optional<int> Find(const Key& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(key);
    if (it == peers_.end()) return std::nullopt;
    return it->second;
  }

  // Closes the connection of `key` (its calls end CANCELLED); none: nothing.
  void Forget(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(key);
    if (it == peers_.end()) return;
    client_->Disconnect(it->second);
    peers_.erase(it);
  }

  // Closes every connection whose key is not in `keep`.
  void ForgetAllBut(const std::vector<Key>& keep) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (std::find(keep.begin(), keep.end(), it->first) != keep.end()) {
        ++it;
        continue;
      }
      client_->Disconnect(it->second);
      it = peers_.erase(it);
    }
  }

  void ForgetAll() { ForgetAllBut({}); }

  // The keys connected now, in order.
  std::vector<Key> keys() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Key> out;
    for (const auto& [key, peer] : peers_) out.push_back(key);
    return out;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peers_.size();
  }

 private:
  RpcClient* const client_;
  const Role role_;
  mutable std::mutex mu_;
  std::map<Key, int> peers_;  // GUARDED_BY(mu_)
};

}  // namespace tessera
