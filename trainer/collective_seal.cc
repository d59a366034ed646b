#include "trainer/collective_seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include <glog/logging.h>

namespace tessera {
namespace {

constexpr size_t kNonceBytes = 12;  // both ciphers' IETF nonce, OpenSSL's default IV length for them
// EVP's lengths are ints: longer messages go through in pieces.
constexpr size_t kMaxPiece = size_t{1} << 30;

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

// Whether this CPU computes AES-GCM in hardware (AES-NI and carry-less
// multiply); without, OpenSSL's software AES is slower than ChaCha20.
bool CpuHasAesGcm() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
#else
  return false;
#endif
}

const EVP_CIPHER* EvpCipher(CollectiveSeal::Cipher c) {
  return c == CollectiveSeal::Cipher::kAes256Gcm ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
}

struct CipherCtx {
  CipherCtx() : ctx(EVP_CIPHER_CTX_new()) { CHECK(ctx != nullptr) << "OpenSSL: out of memory for a cipher context"; }
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
  EVP_CIPHER_CTX* ctx;
};

}  // namespace

CollectiveSeal::CollectiveSeal(CollectiveSeal&&) noexcept = default;
CollectiveSeal& CollectiveSeal::operator=(CollectiveSeal&&) noexcept = default;
CollectiveSeal::~CollectiveSeal() { OPENSSL_cleanse(key_.data(), key_.size()); }

std::string CollectiveSeal::NewContribution() {
  std::string c(kContributionBytes, '\0');
  CHECK_EQ(RAND_bytes(reinterpret_cast<unsigned char*>(c.data()), static_cast<int>(kContributionBytes - 1)), 1)
      << "OpenSSL's random generator failed";
  c.back() = CpuHasAesGcm() ? 1 : 0;
  return c;
}

StatusOr<CollectiveSeal> CollectiveSeal::ForSession(std::string_view secret, std::string_view name,
                                                    const std::vector<std::string>& contributions) {
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
  // HMAC-SHA256 keyed with the secret, over what makes this collective
  // itself: the name (its length first, so no name runs into the shares)
  // and every rank's share.
  static constexpr char kDomain[] = "tessera collective seal v1";
  std::string message(kDomain, sizeof(kDomain));
  std::array<uint8_t, 8> len{};
  PutLe(name.size(), 8, len.data());
  message.append(reinterpret_cast<const char*>(len.data()), len.size());
  message.append(name);
  for (const std::string& c : contributions) message += c;
  CollectiveSeal seal;
  unsigned int key_bytes = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), seal.key_.data(),
           &key_bytes) == nullptr ||
      key_bytes != seal.key_.size()) {
    return Status::Internal("collective seal: OpenSSL's HMAC-SHA256 failed");
  }
  OPENSSL_cleanse(message.data(), message.size());
  // Every rank's own share says what its CPU has, so all ranks choose alike.
  seal.cipher_ = all_aes ? Cipher::kAes256Gcm : Cipher::kChaCha20Poly1305;
  return seal;
}

const char* CollectiveSeal::cipher_name() const {
  return cipher_ == Cipher::kAes256Gcm ? "AES-256-GCM" : "ChaCha20-Poly1305";
}

void CollectiveSeal::Seal(int from, int to, uint64_t counter, const Place& place, const void* plain, size_t bytes,
                          uint8_t* out) const {
  const auto nonce = Nonce(from, to, counter);
  const auto ad = Associated(place);
  CipherCtx c;
  int n = 0;
  CHECK_EQ(EVP_EncryptInit_ex(c.ctx, EvpCipher(cipher_), nullptr, key_.data(), nonce.data()), 1);
  CHECK_EQ(EVP_EncryptUpdate(c.ctx, nullptr, &n, ad.data(), static_cast<int>(ad.size())), 1);
  const auto* m = static_cast<const unsigned char*>(plain);
  for (size_t done = 0; done < bytes;) {
    const size_t piece = std::min(kMaxPiece, bytes - done);
    CHECK_EQ(EVP_EncryptUpdate(c.ctx, out + done, &n, m + done, static_cast<int>(piece)), 1);
    CHECK_EQ(static_cast<size_t>(n), piece);  // stream ciphers: all out at once
    done += piece;
  }
  CHECK_EQ(EVP_EncryptFinal_ex(c.ctx, out + bytes, &n), 1);
  CHECK_EQ(EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_AEAD_GET_TAG, static_cast<int>(kTagBytes), out + bytes), 1);
}

bool CollectiveSeal::Open(int from, int to, uint64_t counter, const Place& place, const uint8_t* sealed, size_t bytes,
                          void* plain) const {
  return Decrypt(from, to, counter, place, sealed, bytes, static_cast<uint8_t*>(plain), /*in_place=*/true, kMaxPiece,
                 nullptr);
}

bool CollectiveSeal::OpenInPieces(int from, int to, uint64_t counter, const Place& place, const uint8_t* sealed,
                                  size_t bytes, uint8_t* scratch, size_t piece,
                                  const std::function<void(size_t, const uint8_t*, size_t)>& take) const {
  CHECK_GT(piece, 0u);
  return Decrypt(from, to, counter, place, sealed, bytes, scratch, /*in_place=*/false, std::min(kMaxPiece, piece),
                 &take);
}

bool CollectiveSeal::Decrypt(int from, int to, uint64_t counter, const Place& place, const uint8_t* sealed,
                             size_t bytes, uint8_t* out, bool in_place, size_t piece,
                             const std::function<void(size_t, const uint8_t*, size_t)>* take) const {
  const auto nonce = Nonce(from, to, counter);
  const auto ad = Associated(place);
  CipherCtx c;
  int n = 0;
  if (EVP_DecryptInit_ex(c.ctx, EvpCipher(cipher_), nullptr, key_.data(), nonce.data()) != 1) return false;
  if (EVP_DecryptUpdate(c.ctx, nullptr, &n, ad.data(), static_cast<int>(ad.size())) != 1) return false;
  for (size_t done = 0; done < bytes;) {
    const size_t len = std::min(piece, bytes - done);
    uint8_t* to_here = in_place ? out + done : out;
    if (EVP_DecryptUpdate(c.ctx, to_here, &n, sealed + done, static_cast<int>(len)) != 1) return false;
    if (take != nullptr) (*take)(done, to_here, len);
    done += len;
  }
  // The tag is read-only to us; OpenSSL's control call takes it non-const.
  unsigned char tag[kTagBytes];
  std::memcpy(tag, sealed + bytes, kTagBytes);
  if (EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_AEAD_SET_TAG, static_cast<int>(kTagBytes), tag) != 1) return false;
  unsigned char final_block[16];  // stream ciphers: nothing is left to write
  return EVP_DecryptFinal_ex(c.ctx, final_block, &n) == 1;
}

}  // namespace tessera
