#include "trainer/collective_seal.h"

#include <sodium.h>

#include <cstring>

#include <glog/logging.h>

namespace tessera {
namespace {

// sodium_init picks each primitive's fastest implementation for this CPU;
// it may be called any number of times, from any thread.
void InitSodium() { CHECK_GE(sodium_init(), 0) << "libsodium failed to initialize"; }

constexpr size_t kNonceBytes = 12;  // both ciphers' IETF nonce
static_assert(crypto_aead_aes256gcm_NPUBBYTES == kNonceBytes);
static_assert(crypto_aead_chacha20poly1305_ietf_NPUBBYTES == kNonceBytes);
static_assert(crypto_aead_aes256gcm_ABYTES == CollectiveSeal::kTagBytes);
static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == CollectiveSeal::kTagBytes);

void PutLe(uint64_t v, int bytes, uint8_t* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Sender, receiver and counter: unique per message of one key.
std::array<uint8_t, kNonceBytes> Nonce(int from, int to, uint64_t counter) {
  std::array<uint8_t, kNonceBytes> n{};
  PutLe(static_cast<uint16_t>(from), 2, n.data());
  PutLe(static_cast<uint16_t>(to), 2, n.data() + 2);
  PutLe(counter, 8, n.data() + 4);
  return n;
}

std::array<uint8_t, 16> Associated(const CollectiveSeal::Place& place) {
  std::array<uint8_t, 16> ad{};
  PutLe(place.total, 8, ad.data());
  PutLe(place.chunk, 4, ad.data() + 8);
  PutLe(place.phase, 4, ad.data() + 12);
  return ad;
}

}  // namespace

struct CollectiveSeal::AesState {
  crypto_aead_aes256gcm_state state;
};

CollectiveSeal::CollectiveSeal(CollectiveSeal&&) noexcept = default;
CollectiveSeal& CollectiveSeal::operator=(CollectiveSeal&&) noexcept = default;
CollectiveSeal::~CollectiveSeal() { sodium_memzero(key_.data(), key_.size()); }

std::string CollectiveSeal::NewContribution() {
  InitSodium();
  std::string c(kContributionBytes, '\0');
  randombytes_buf(c.data(), kContributionBytes - 1);
  c.back() = crypto_aead_aes256gcm_is_available() ? 1 : 0;
  return c;
}

StatusOr<CollectiveSeal> CollectiveSeal::ForSession(std::string_view secret, std::string_view name,
                                                    const std::vector<std::string>& contributions) {
  InitSodium();
  if (secret.size() != kSecretBytes) {
    return Status::InvalidArgument("collective seal: the trainers' secret must be " + std::to_string(kSecretBytes) +
                                   " bytes, not " + std::to_string(secret.size()));
  }
  if (contributions.empty()) return Status::InvalidArgument("collective seal: no rank's contribution");
  bool all_aes = true;
  for (size_t r = 0; r < contributions.size(); ++r) {
    if (contributions[r].size() != kContributionBytes) {
      return Status::InvalidArgument("collective seal: rank " + std::to_string(r) + "'s contribution has " +
                                     std::to_string(contributions[r].size()) + " bytes, not " +
                                     std::to_string(kContributionBytes));
    }
    all_aes = all_aes && contributions[r].back() == 1;
  }
  CollectiveSeal seal;
  // BLAKE2b keyed with the secret, over what makes this collective itself.
  crypto_generichash_state h;
  crypto_generichash_init(&h, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                          seal.key_.size());
  static constexpr char kDomain[] = "tessera collective seal v1";
  crypto_generichash_update(&h, reinterpret_cast<const unsigned char*>(kDomain), sizeof(kDomain));
  std::array<uint8_t, 8> len{};
  PutLe(name.size(), 8, len.data());
  crypto_generichash_update(&h, len.data(), len.size());
  crypto_generichash_update(&h, reinterpret_cast<const unsigned char*>(name.data()), name.size());
  for (const std::string& c : contributions) {
    crypto_generichash_update(&h, reinterpret_cast<const unsigned char*>(c.data()), c.size());
  }
  crypto_generichash_final(&h, seal.key_.data(), seal.key_.size());

  // Every rank's own contribution says what its CPU has, so all ranks agree;
  // the local check only guards against a contribution that lies.
  if (all_aes && crypto_aead_aes256gcm_is_available()) {
    seal.cipher_ = Cipher::kAes256Gcm;
    seal.aes_ = std::make_unique<AesState>();
    crypto_aead_aes256gcm_beforenm(&seal.aes_->state, seal.key_.data());
  }
  return seal;
}

const char* CollectiveSeal::cipher_name() const {
  return cipher_ == Cipher::kAes256Gcm ? "AES-256-GCM" : "ChaCha20-Poly1305";
}

void CollectiveSeal::Seal(int from, int to, uint64_t counter, const Place& place, const void* plain, size_t bytes,
                          uint8_t* out) const {
  const auto nonce = Nonce(from, to, counter);
  const auto ad = Associated(place);
  const auto* m = static_cast<const unsigned char*>(plain);
  unsigned long long out_bytes = 0;
  if (cipher_ == Cipher::kAes256Gcm) {
    crypto_aead_aes256gcm_encrypt_afternm(out, &out_bytes, m, bytes, ad.data(), ad.size(), nullptr, nonce.data(),
                                          &aes_->state);
  } else {
    crypto_aead_chacha20poly1305_ietf_encrypt(out, &out_bytes, m, bytes, ad.data(), ad.size(), nullptr, nonce.data(),
                                              key_.data());
  }
  DCHECK_EQ(out_bytes, bytes + kTagBytes);
}

bool CollectiveSeal::Open(int from, int to, uint64_t counter, const Place& place, const uint8_t* sealed, size_t bytes,
                          void* plain) const {
  const auto nonce = Nonce(from, to, counter);
  const auto ad = Associated(place);
  auto* m = static_cast<unsigned char*>(plain);
  unsigned long long plain_bytes = 0;
  const int rc =
      cipher_ == Cipher::kAes256Gcm
          ? crypto_aead_aes256gcm_decrypt_afternm(m, &plain_bytes, nullptr, sealed, bytes + kTagBytes, ad.data(),
                                                  ad.size(), nonce.data(), &aes_->state)
          : crypto_aead_chacha20poly1305_ietf_decrypt(m, &plain_bytes, nullptr, sealed, bytes + kTagBytes, ad.data(),
                                                      ad.size(), nonce.data(), key_.data());
  return rc == 0 && plain_bytes == bytes;
}

}  // namespace tessera
