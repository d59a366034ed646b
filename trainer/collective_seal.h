// CollectiveSeal: the authenticated cipher a job's trainers seal the messages
// of their CPU collective with (docs/design.md, "Who may say what").
//
// Gloo's TCP connections carry no encryption and no proof of who connected
// (Debian's Gloo has no TLS). A stranger who reaches a trainer's Gloo port
// during the rendezvous can take a peer's place and feed it numbers that
// Gloo would add into the dense gradients: a silently wrong model. So in a
// job with keys every message of the trainers' allreduce is sealed: a key
// only the trainers can derive (from the trainer role's secret, which
// servers, the master and strangers lack), a nonce per sender, receiver and
// message, and the message's place in the sum as associated data. A message
// that does not open is refused, and the sum with it.
//
// The key is new for every collective: it hashes the collective's name (the
// job and generation) and a random contribution of every rank, exchanged
// through the master's store. Nonces restart with every collective, so
// no two messages are ever sealed with the same key and nonce, and a
// message recorded in one collective does not open in another.
//
// OpenSSL's libcrypto: its AES-GCM runs 2.4x as fast as libsodium's on this
// project's machines (4.6 against 1.9 GB/s, AVX-512 with VAES), and every
// byte of the dense gradients goes through it twice a step.
//
// Pure computation: no sockets (the ring that sends the messages is
// trainer/sealed_ring_collective.h). Thread-safe: Seal and Open are const
// and keep no state between calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera {

class CollectiveSeal {
 public:
  static constexpr size_t kSecretBytes = 32;
  static constexpr size_t kTagBytes = 16;
  // 16 random bytes and one that says whether this CPU has AES-GCM in
  // hardware.
  static constexpr size_t kContributionBytes = 17;

  enum class Cipher { kAes256Gcm, kChaCha20Poly1305 };

  // This rank's contribution to a collective's key: fresh random bytes.
  static std::string NewContribution();

  // The seal of one collective. `secret`: the trainer role's 32-byte secret
  // (JobKeys::own_secret_bytes); `name`: the collective's (its store
  // prefix); `contributions`: every rank's, in rank order. AES-256-GCM when
  // every contribution says its CPU has AES-GCM in hardware, otherwise
  // ChaCha20-Poly1305: each rank computes the same choice. The key is
  // HMAC-SHA256(secret, name and contributions).
  static StatusOr<CollectiveSeal> ForSession(std::string_view secret, std::string_view name,
                                             const std::vector<std::string>& contributions);

  CollectiveSeal(CollectiveSeal&&) noexcept;
  CollectiveSeal& operator=(CollectiveSeal&&) noexcept;
  ~CollectiveSeal();

  Cipher cipher() const { return cipher_; }
  const char* cipher_name() const;

  // Where a message belongs: bound into its seal, so a message moved to
  // another place in a sum, or into a sum of another size, does not open.
  struct Place {
    uint64_t total = 0;  // elements in the whole sum
    uint32_t chunk = 0;
    uint32_t phase = 0;
  };

  // Seals `bytes` bytes at `plain` into `out` [bytes + kTagBytes]: message
  // number `counter` from rank `from` to rank `to`. Each (from, to, counter)
  // must be sealed once.
  void Seal(int from, int to, uint64_t counter, const Place& place, const void* plain, size_t bytes,
            uint8_t* out) const;

  // Opens `sealed` [bytes + kTagBytes] into `plain` [bytes]. False when it
  // is not that message: sealed under another key, damaged, replayed or
  // reordered (another counter), or meant for another place. `plain` is
  // then undefined.
  bool Open(int from, int to, uint64_t counter, const Place& place, const uint8_t* sealed, size_t bytes,
            void* plain) const;

  // Opens the same message a piece at a time, so that a caller who adds
  // what it receives into a sum reads each piece from `scratch` [piece]
  // while it is still in the core's cache, instead of writing the whole
  // plaintext out and reading it back. `take(offset, plain, n)` sees the
  // pieces in order, before the tag is checked: what the caller makes of
  // them is unauthenticated until this returns true, and must be thrown
  // away when it returns false.
  bool OpenInPieces(int from, int to, uint64_t counter, const Place& place, const uint8_t* sealed, size_t bytes,
                    uint8_t* scratch, size_t piece,
                    const std::function<void(size_t offset, const uint8_t* plain, size_t n)>& take) const;

 private:
  CollectiveSeal() = default;

  // Decrypts piece by piece, each into out + its offset (in_place) or into
  // out itself, handing each piece to *take when there is one, then checks
  // the tag.
  bool Decrypt(int from, int to, uint64_t counter, const Place& place, const uint8_t* sealed, size_t bytes,
               uint8_t* out, bool in_place, size_t piece,
               const std::function<void(size_t, const uint8_t*, size_t)>* take) const;

  Cipher cipher_ = Cipher::kChaCha20Poly1305;
  std::array<uint8_t, 32> key_{};
};

}  // namespace tessera
