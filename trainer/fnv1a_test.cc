#include "trainer/fnv1a.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

// The published FNV-1a 64 vectors (Fowler/Noll/Vo test suite).
TEST(Fnv1aTest, StandardVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

// The three test vectors of REFERENCE.md, N = 1000.
TEST(Fnv1aTest, ReferenceVectors) {
  EXPECT_EQ(CriteoHash(0, "68fd1e64"), 0x4015d6a91ef64e33ULL);
  EXPECT_EQ(CriteoRow(0, "68fd1e64", 1000), 123);
  EXPECT_EQ(CriteoHash(13, "b28479f6"), 0x772c0d1bc180a1e0ULL);
  EXPECT_EQ(CriteoRow(13, "b28479f6", 1000), 64);
  EXPECT_EQ(CriteoHash(25, ""), 0xaf63d44c8601def4ULL);
  EXPECT_EQ(CriteoRow(25, "", 1000), 308);
}

TEST(Fnv1aTest, ColumnPrefixIsOneByte) {
  const char prefixed[] = {13, 'b', '2', '8', '4', '7', '9', 'f', '6'};
  EXPECT_EQ(CriteoHash(13, "b28479f6"), Fnv1a64(std::string_view(prefixed, sizeof(prefixed))));
  // Same value, different column: different hash.
  EXPECT_NE(CriteoHash(0, "b28479f6"), CriteoHash(1, "b28479f6"));
}

TEST(Fnv1aTest, UsableAtCompileTime) {
  static_assert(CriteoRow(0, "68fd1e64", 1000) == 123);
  static_assert(CriteoRow(25, "", 1) == 0);
}

}  // namespace
}  // namespace tessera
