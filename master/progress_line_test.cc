// The master's progress line: redrawn in place on a terminal while nothing
// else is printed, log lines otherwise.
#include "master/progress_line.h"

#include <gtest/gtest.h>

#include <sstream>

namespace tessera {
namespace {

TEST(ProgressLineTest, SaysStepOfTotalLossRateAndEta) {
  // 100 steps of 1000 done at 10 steps/s: 900 left, 90 s.
  EXPECT_EQ(FormatProgressLine(100, 1000, -1, 0.5, 5120, 10),
            "[master] step 100/1000 (10.0%)  loss 0.50000  examples/s 5120  ETA 1m30s");
  EXPECT_EQ(FormatProgressLine(1, 100001, -1, 0.25, 100, 1),
            "[master] step 1/100001 (0.0%)  loss 0.25000  examples/s 100  ETA 27h46m");
  EXPECT_NE(FormatProgressLine(1000, 1000, 2, 0.5, 5120, 10).find("(100.0%)  epoch 2  loss 0.50000  examples/s 5120  ETA 0m00s"),
            std::string::npos);
  EXPECT_NE(FormatProgressLine(5, 10, -1, 0.1, 0, 0).find("ETA --"), std::string::npos);
  // No total known: no ETA.
  EXPECT_EQ(FormatProgressLine(7, 0, 0, 0.125, 64, 2), "[master] step 7  epoch 0  loss 0.12500  examples/s 64");
}

TEST(ProgressLineTest, LiveLineIsRedrawnOnlyWhileItIsTheLastThingPrinted) {
  std::ostringstream out;
  {
    ProgressLine p(out, /*live=*/true);
    p.Show("A");
    p.Show("B");  // replaces A
    out << "a log line\n";
    p.Show("C");  // below the log line
    p.Show("D");  // replaces C
  }
  EXPECT_EQ(out.str(), "A\n\033[1A\033[2KB\na log line\nC\n\033[1A\033[2KD\n");
}

TEST(ProgressLineTest, NotATerminalPrintsPlainLines) {
  std::ostringstream out;
  {
    ProgressLine p(out, /*live=*/false);
    p.Show("A");
    p.Show("B");
  }
  EXPECT_EQ(out.str(), "A\nB\n");
}

}  // namespace
}  // namespace tessera
