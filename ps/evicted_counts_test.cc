// EvictedCounts: what a row's count was at eviction comes back once, faded
// by the epochs since, and saturates at a byte.
#include "ps/evicted_counts.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(EvictedCountsTest, ACountComesBackOnceAndFadesByEpoch) {
  EvictedCounts c = EvictedCounts::Over(100, 200);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.Take(150, 0), 0u);  // never evicted
  c.Save(150, 7, 0);
  EXPECT_EQ(c.Take(150, 0), 7u);
  EXPECT_EQ(c.Take(150, 0), 0u);  // taken: the resident row counts from here
  c.Save(150, 12, 0);
  EXPECT_EQ(c.Take(150, 2), 3u);  // halved twice since
  c.Save(151, 200, 0);
  EXPECT_EQ(c.Take(151, 8), 0u);  // faded
}

TEST(EvictedCountsTest, ALaterSaveAgesEveryCountAndAnEarlierOneIsFaded) {
  EvictedCounts c = EvictedCounts::Over(0, 10);
  c.Save(1, 8, 0);
  c.Save(2, 8, 1);  // the counts of epoch 0 are halved first
  EXPECT_EQ(c.Take(1, 1), 4u);
  EXPECT_EQ(c.Take(2, 1), 8u);
  c.Save(3, 8, 0);  // counted before the last halving: stored as of epoch 1
  EXPECT_EQ(c.Take(3, 1), 4u);
  c.Save(4, 5, 1);
  c.Save(5, 5, 20);  // far later: every older count is gone
  EXPECT_EQ(c.Take(4, 20), 0u);
  EXPECT_EQ(c.Take(5, 20), 5u);
}

TEST(EvictedCountsTest, CountsSaturateAndIdsOutsideTheRangeAreNotKept) {
  EvictedCounts c = EvictedCounts::Over(0, 10);
  c.Save(3, 100000, 0);
  EXPECT_EQ(c.Take(3, 0), 255u);
  c.Save(10, 9, 0);
  c.Save(-1, 9, 0);
  EXPECT_EQ(c.Take(10, 0), 0u);
  EXPECT_EQ(c.Take(-1, 0), 0u);
  EvictedCounts none;
  EXPECT_TRUE(none.empty());
  none.Save(3, 9, 0);
  EXPECT_EQ(none.Take(3, 0), 0u);
  EXPECT_TRUE(EvictedCounts::Over(5, 5).empty());
}

}  // namespace
}  // namespace tessera
