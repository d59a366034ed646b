#include "master/listening_clock.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tessera {
namespace {

using std::chrono::milliseconds;
using Clock = ListeningClock::Clock;

TEST(ListeningClockTest, SilenceCountsFromTheEndOfAPause) {
  ListeningClock c(milliseconds(1000));
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(c.Check(t0), Clock::duration::zero());  // the first check has nothing to compare with
  const Clock::time_point heard = t0 - milliseconds(200);
  // Regular checks: silence counts from when the member was heard.
  for (int i = 1; i <= 20; ++i) EXPECT_EQ(c.Check(t0 + milliseconds(100 * i)), Clock::duration::zero());
  EXPECT_EQ(c.Heard(heard), heard);
  EXPECT_EQ(c.pauses(), 0);
  // No check for 4 s: the process was away, so was its hearing.
  const Clock::time_point woke = t0 + milliseconds(2000 + 4000);
  EXPECT_EQ(c.Check(woke), milliseconds(4000));
  EXPECT_EQ(c.pauses(), 1);
  EXPECT_EQ(c.Heard(heard), woke);
  // A member heard after the pause keeps its own time.
  EXPECT_EQ(c.Heard(woke + milliseconds(50)), woke + milliseconds(50));
  // A gap at the limit is not a pause.
  EXPECT_EQ(c.Check(woke + milliseconds(1000)), Clock::duration::zero());
  EXPECT_EQ(c.pauses(), 1);
}

TEST(ListeningClockTest, AnEarlierTimeFromAnotherCheckerIsNoPauseAndMovesNothingBack) {
  ListeningClock c(milliseconds(1000));
  const Clock::time_point t0 = Clock::now();
  c.Check(t0);
  c.Check(t0 + milliseconds(3000));  // a pause
  const Clock::time_point resumed = c.Heard(Clock::time_point());
  // A checker that read the clock before the pause and checks after it.
  EXPECT_EQ(c.Check(t0 + milliseconds(10)), Clock::duration::zero());
  EXPECT_EQ(c.Heard(Clock::time_point()), resumed);
  EXPECT_EQ(c.Check(t0 + milliseconds(3500)), Clock::duration::zero());
  EXPECT_EQ(c.pauses(), 1);
}

}  // namespace
}  // namespace tessera
