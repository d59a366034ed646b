// Checksum64: a 64-bit checksum of a byte stream, for files a checkpoint
// writes (ps/row_snapshot.cc's rows, the trainer state in a manifest).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tessera {

// A 64-bit checksum of a byte stream fed in pieces of any size (four
// independent multiply-rotate lanes, so it runs at memory speed: a checkpoint
// pays for it on every byte). Detects damage and truncation; not
// cryptographic.
class Checksum64 {
 public:
  void Update(const void* data, size_t n) {
    if (n == 0) return;  // data may be null (an empty vector's)
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += n;
    if (pending_ > 0) {
      const size_t take = std::min(n, sizeof(buf_) - pending_);
      std::memcpy(buf_ + pending_, p, take);
      pending_ += take;
      p += take;
      n -= take;
      if (pending_ < sizeof(buf_)) return;
      Block(buf_);
      pending_ = 0;
    }
    for (; n >= sizeof(buf_); p += sizeof(buf_), n -= sizeof(buf_)) Block(p);
    std::memcpy(buf_, p, n);
    pending_ = n;
  }

  uint64_t Final() const {
    uint64_t h = std::rotl(v_[0], 1) + std::rotl(v_[1], 7) + std::rotl(v_[2], 12) + std::rotl(v_[3], 18);
    h ^= total_ * kP1;
    size_t i = 0;
    for (; i + 8 <= pending_; i += 8) h = std::rotl(h ^ Round(0, Load(buf_ + i)), 27) * kP1 + kP3;
    for (; i < pending_; ++i) h = std::rotl(h ^ (buf_[i] * kP3), 11) * kP1;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    return h ^ (h >> 32);
  }

 private:
  static constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL, kP3 = 0x165667B19E3779F9ULL;
  static uint64_t Load(const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint64_t Round(uint64_t acc, uint64_t in) { return std::rotl(acc + in * kP2, 31) * kP1; }
  void Block(const unsigned char* p) {
    for (int k = 0; k < 4; ++k) v_[k] = Round(v_[k], Load(p + 8 * k));
  }

  uint64_t v_[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  unsigned char buf_[32];
  size_t pending_ = 0;
  uint64_t total_ = 0;
};

}  // namespace tessera
