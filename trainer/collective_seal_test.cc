// The trainers' collective seal, without sockets: what opens, what does not.
#include "trainer/collective_seal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tessera {
namespace {

const std::string kSecret(32, '\x5a');

std::vector<std::string> Contributions(int ranks, char aes) {
  std::vector<std::string> c;
  for (int r = 0; r < ranks; ++r) {
    std::string one = CollectiveSeal::NewContribution();
    one.back() = aes;
    c.push_back(one);
  }
  return c;
}

CollectiveSeal Make(const std::string& secret, const std::string& name, const std::vector<std::string>& c) {
  StatusOr<CollectiveSeal> seal = CollectiveSeal::ForSession(secret, name, c);
  EXPECT_TRUE(seal.ok()) << seal.status();
  return std::move(seal).value();
}

std::vector<float> Floats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f - 3.0f;
  return v;
}

struct Sealed {
  std::vector<uint8_t> bytes;
};

Sealed SealOf(const CollectiveSeal& seal, int from, int to, uint64_t counter, const CollectiveSeal::Place& place,
              const std::vector<float>& v) {
  Sealed s;
  s.bytes.resize(v.size() * sizeof(float) + CollectiveSeal::kTagBytes);
  seal.Seal(from, to, counter, place, v.data(), v.size() * sizeof(float), s.bytes.data());
  return s;
}

bool Opens(const CollectiveSeal& seal, int from, int to, uint64_t counter, const CollectiveSeal::Place& place,
           const Sealed& s, std::vector<float>* out) {
  out->assign((s.bytes.size() - CollectiveSeal::kTagBytes) / sizeof(float), 0.0f);
  return seal.Open(from, to, counter, place, s.bytes.data(), out->size() * sizeof(float), out->data());
}

class CollectiveSealTest : public testing::TestWithParam<char> {};

TEST_P(CollectiveSealTest, OnlyTheMessageItselfOpens) {
  const std::vector<std::string> c = Contributions(3, GetParam());
  const CollectiveSeal a = Make(kSecret, "gloo/job/g1", c);
  const CollectiveSeal b = Make(kSecret, "gloo/job/g1", c);  // another rank's, the same session
  if (GetParam() == 1) {
    EXPECT_EQ(a.cipher(), CollectiveSeal::Cipher::kAes256Gcm);
  } else {
    EXPECT_EQ(a.cipher(), CollectiveSeal::Cipher::kChaCha20Poly1305);
  }

  const std::vector<float> v = Floats(1000);
  const CollectiveSeal::Place place{3000, 1, 0};
  const Sealed s = SealOf(a, 0, 1, 7, place, v);
  std::vector<float> out;
  ASSERT_TRUE(Opens(b, 0, 1, 7, place, s, &out));
  EXPECT_EQ(out, v);

  // The plain numbers are not on the wire.
  EXPECT_EQ(std::search(s.bytes.begin(), s.bytes.end(), reinterpret_cast<const uint8_t*>(v.data() + 10),
                        reinterpret_cast<const uint8_t*>(v.data() + 14)),
            s.bytes.end());

  // Another counter (replayed or reordered), sender, receiver or place.
  EXPECT_FALSE(Opens(b, 0, 1, 6, place, s, &out));
  EXPECT_FALSE(Opens(b, 0, 1, 8, place, s, &out));
  EXPECT_FALSE(Opens(b, 2, 1, 7, place, s, &out));
  EXPECT_FALSE(Opens(b, 0, 2, 7, place, s, &out));
  EXPECT_FALSE(Opens(b, 0, 1, 7, {3000, 2, 0}, s, &out));
  EXPECT_FALSE(Opens(b, 0, 1, 7, {3000, 1, 1}, s, &out));
  EXPECT_FALSE(Opens(b, 0, 1, 7, {3001, 1, 0}, s, &out));

  // Any one bit flipped, in the numbers or in the tag.
  for (size_t byte : {size_t{0}, size_t{1999}, s.bytes.size() - 1}) {
    Sealed damaged = s;
    damaged.bytes[byte] ^= 0x10;
    EXPECT_FALSE(Opens(b, 0, 1, 7, place, damaged, &out)) << "byte " << byte;
  }
  // Cut short by a float: the tag no longer matches.
  Sealed cut = s;
  cut.bytes.erase(cut.bytes.begin() + 4, cut.bytes.begin() + 8);
  EXPECT_FALSE(Opens(b, 0, 1, 7, place, cut, &out));

  // An empty chunk still carries a tag that must match.
  const Sealed empty = SealOf(a, 1, 2, 0, {1, 2, 0}, {});
  ASSERT_EQ(empty.bytes.size(), CollectiveSeal::kTagBytes);
  EXPECT_TRUE(Opens(b, 1, 2, 0, {1, 2, 0}, empty, &out));
  EXPECT_FALSE(Opens(b, 1, 2, 1, {1, 2, 0}, empty, &out));
}

TEST_P(CollectiveSealTest, AnotherSecretNameOrSessionGivesAnotherKey) {
  const std::vector<std::string> c = Contributions(2, GetParam());
  const CollectiveSeal a = Make(kSecret, "gloo/job/g1", c);
  const std::vector<float> v = Floats(64);
  const CollectiveSeal::Place place{64, 0, 0};
  const Sealed s = SealOf(a, 0, 1, 0, place, v);
  std::vector<float> out;

  std::string stranger = kSecret;
  stranger[31] ^= 1;
  EXPECT_FALSE(Opens(Make(stranger, "gloo/job/g1", c), 0, 1, 0, place, s, &out)) << "another secret";
  EXPECT_FALSE(Opens(Make(kSecret, "gloo/job/g2", c), 0, 1, 0, place, s, &out)) << "another generation";
  std::vector<std::string> other = c;
  other[1][0] ^= 1;
  EXPECT_FALSE(Opens(Make(kSecret, "gloo/job/g1", other), 0, 1, 0, place, s, &out)) << "another session";
  EXPECT_TRUE(Opens(Make(kSecret, "gloo/job/g1", c), 0, 1, 0, place, s, &out));
}

TEST_P(CollectiveSealTest, OpenedInPiecesAsWhole) {
  const std::vector<std::string> c = Contributions(2, GetParam());
  const CollectiveSeal a = Make(kSecret, "gloo/job/g1", c);
  const std::vector<float> v = Floats(1001);
  const CollectiveSeal::Place place{2002, 1, 0};
  const Sealed s = SealOf(a, 1, 0, 3, place, v);
  const size_t bytes = v.size() * sizeof(float);
  for (size_t piece : {size_t{1}, size_t{7}, size_t{64}, size_t{4000}, bytes, bytes + 5}) {
    std::vector<uint8_t> scratch(piece);
    std::vector<uint8_t> got;
    size_t pieces = 0;
    const auto take = [&](size_t offset, const uint8_t* plain, size_t n) {
      EXPECT_EQ(offset, got.size()) << "pieces in order, none left out";
      EXPECT_LE(n, piece);
      EXPECT_EQ(plain, scratch.data());
      got.insert(got.end(), plain, plain + n);
      ++pieces;
    };
    ASSERT_TRUE(a.OpenInPieces(1, 0, 3, place, s.bytes.data(), bytes, scratch.data(), piece, take)) << piece;
    ASSERT_EQ(got.size(), bytes);
    EXPECT_EQ(std::memcmp(got.data(), v.data(), bytes), 0) << piece;
    EXPECT_EQ(pieces, (bytes + piece - 1) / piece);

    // Damage after the last piece (in the tag) and in the first: every
    // piece is still handed over, and the whole is refused.
    for (size_t byte : {s.bytes.size() - 1, size_t{0}}) {
      Sealed damaged = s;
      damaged.bytes[byte] ^= 0x01;
      got.clear();
      pieces = 0;
      EXPECT_FALSE(a.OpenInPieces(1, 0, 3, place, damaged.bytes.data(), bytes, scratch.data(), piece, take))
          << piece << " byte " << byte;
    }
    got.clear();
    EXPECT_FALSE(a.OpenInPieces(1, 0, 4, place, s.bytes.data(), bytes, scratch.data(), piece, take))
        << "another counter";
  }
}

INSTANTIATE_TEST_SUITE_P(Ciphers, CollectiveSealTest, testing::Values(char{1}, char{0}),
                         [](const testing::TestParamInfo<char>& p) { return p.param == 1 ? "Aes" : "ChaCha"; });

TEST(CollectiveSealChoiceTest, AesOnlyWhenEveryRankHasIt) {
  std::vector<std::string> c = Contributions(3, 1);
  EXPECT_EQ(Make(kSecret, "n", c).cipher(), CollectiveSeal::Cipher::kAes256Gcm);
  c[2].back() = 0;
  EXPECT_EQ(Make(kSecret, "n", c).cipher(), CollectiveSeal::Cipher::kChaCha20Poly1305);
  const std::string mine = CollectiveSeal::NewContribution();
  ASSERT_EQ(mine.size(), CollectiveSeal::kContributionBytes);
  EXPECT_NE(mine, CollectiveSeal::NewContribution()) << "contributions must be random";
}

TEST(CollectiveSealChoiceTest, BadSecretsAndContributionsAreRefused) {
  const std::vector<std::string> c = Contributions(2, 0);
  auto short_secret = CollectiveSeal::ForSession(std::string(31, 'x'), "n", c);
  ASSERT_FALSE(short_secret.ok());
  EXPECT_EQ(short_secret.status().code(), StatusCode::kInvalidArgument) << short_secret.status();
  auto none = CollectiveSeal::ForSession(kSecret, "n", {});
  EXPECT_FALSE(none.ok());
  std::vector<std::string> bad = c;
  bad[1].pop_back();
  auto short_one = CollectiveSeal::ForSession(kSecret, "n", bad);
  ASSERT_FALSE(short_one.ok());
  EXPECT_NE(short_one.status().message().find("rank 1"), std::string::npos) << short_one.status();
}

}  // namespace
}  // namespace tessera
