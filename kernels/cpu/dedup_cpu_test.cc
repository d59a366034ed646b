// IdDeduper::Run against a std::unordered_map reference, on one deduper reused
// across calls of growing and shrinking sizes (stale table contents must not leak).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <unordered_map>
#include <vector>

#include "kernels/dedup.h"

namespace tessera::kernels {
namespace {

void ExpectCorrect(IdDeduper& deduper, const std::vector<int64_t>& ids) {
  std::vector<int64_t> unique = {42, 43};  // stale contents must be replaced
  std::vector<int32_t> inverse = {7};
  deduper.Run(ids, &unique, &inverse);

  std::unordered_map<int64_t, int32_t> position;
  std::vector<int64_t> want_unique;
  for (int64_t id : ids) {
    if (position.emplace(id, static_cast<int32_t>(want_unique.size())).second) want_unique.push_back(id);
  }
  ASSERT_EQ(unique, want_unique);
  ASSERT_EQ(inverse.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(inverse[i], position[ids[i]]) << "id " << i;
    ASSERT_EQ(unique[inverse[i]], ids[i]);
  }
}

std::vector<int64_t> RandomIds(std::mt19937_64& rng, size_t n, int64_t range) {
  std::uniform_int_distribution<int64_t> id(0, range - 1);
  std::vector<int64_t> ids(n);
  for (int64_t& x : ids) x = id(rng);
  return ids;
}

TEST(IdDeduperTest, Empty) {
  IdDeduper deduper;
  ExpectCorrect(deduper, {});
}

TEST(IdDeduperTest, SmallCases) {
  IdDeduper deduper;
  ExpectCorrect(deduper, {5});
  ExpectCorrect(deduper, {5, 5, 5, 5});
  ExpectCorrect(deduper, {3, 1, 3, 2, 1, 0});
  ExpectCorrect(deduper, {0, -1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -1, 0,
                          std::numeric_limits<int64_t>::max()});
}

TEST(IdDeduperTest, RandomWithRepeatsReusedAcrossSizes) {
  std::mt19937_64 rng(7);
  IdDeduper deduper;
  for (size_t n : {1000, 100000, 10, 50000, 300000, 3}) {
    SCOPED_TRACE(n);
    ExpectCorrect(deduper, RandomIds(rng, n, static_cast<int64_t>(n / 3 + 1)));  // many repeats
    ExpectCorrect(deduper, RandomIds(rng, n, int64_t{1} << 40));                 // nearly all distinct
  }
}

// Keys that share their low bits or are spaced by powers of two: a weak hash
// would pile them into a few slots (still correct, but checks the probing).
TEST(IdDeduperTest, StructuredKeys) {
  IdDeduper deduper;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 20000; ++i) ids.push_back(i << 20);
  for (int64_t i = 0; i < 20000; ++i) ids.push_back((i % 777) << 32);
  for (int64_t i = 0; i < 20000; ++i) ids.push_back(20000 - i);
  ExpectCorrect(deduper, ids);
}

// RunAtMost answers like Run while the distinct ids are few enough, and
// refuses exactly when one more would be needed.
TEST(IdDeduperTest, RunAtMostStopsOnlyPastItsBound) {
  std::mt19937_64 rng(11);
  IdDeduper bounded, reference;
  for (size_t n : {0, 1, 40, 5000, 100000}) {
    for (int64_t range : {int64_t{1}, int64_t{7}, int64_t{300}, int64_t{1} << 40}) {
      SCOPED_TRACE(std::to_string(n) + " ids in " + std::to_string(range));
      const std::vector<int64_t> ids = RandomIds(rng, n, range);
      std::vector<int64_t> want_unique, unique;
      std::vector<int32_t> want_inverse, inverse;
      reference.Run(ids, &want_unique, &want_inverse);
      const size_t u = want_unique.size();
      for (size_t bound : {u, u + 1, 2 * u + 100}) {
        ASSERT_TRUE(bounded.RunAtMost(ids, bound, &unique, &inverse)) << "bound " << bound;
        ASSERT_EQ(unique, want_unique);
        ASSERT_EQ(inverse, want_inverse);
      }
      if (u > 0) {
        EXPECT_FALSE(bounded.RunAtMost(ids, u - 1, &unique, &inverse));
      }
      if (u > 1) {
        EXPECT_FALSE(bounded.RunAtMost(ids, u / 2, &unique, &inverse));
      }
    }
  }
  // Still right after refusals left the table dirty.
  ExpectCorrect(bounded, RandomIds(rng, 3000, 500));
}

}  // namespace
}  // namespace tessera::kernels
