#include "ps/row_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera {
namespace {

TEST(RowLayoutTest, WidthsMatchTheOptimizers) {
  EXPECT_EQ(RowLayout::For("sgd").Width(5), 5);
  EXPECT_EQ(RowLayout::For("adagrad").Width(5), 10);
  EXPECT_EQ(RowLayout::For("rowwise_adagrad").Width(5), 6);
  EXPECT_EQ(RowLayout::For("adam").Width(5), 16);
  for (const char* o : {"sgd", "adagrad", "rowwise_adagrad", "adam"}) {
    EXPECT_EQ(RowLayout::For(o).Width(7), 7 + OptimizerStateFloats(o, 7)) << o;
  }
}

TEST(RowLayoutTest, TwoColumnShardsReassembleIntoThree) {
  // A 5-column Adam row, value = 100 * block + column (step float = 7).
  const RowLayout adam = RowLayout::For("adam");
  auto make = [&](int col, int cols) {
    std::vector<float> row(adam.Width(cols));
    for (int b = 0; b < 3; ++b) {
      for (int c = 0; c < cols; ++c) row[b * cols + c] = 100.0f * b + static_cast<float>(col + c);
    }
    row.back() = 7;
    return row;
  };
  const auto left = make(0, 3), right = make(3, 2);  // old split 3 + 2
  for (auto [col, cols] : std::vector<std::pair<int, int>>{{0, 2}, {2, 2}, {4, 1}}) {  // new split 2 + 2 + 1
    std::vector<float> row(adam.Width(cols), -1);
    CopyRowColumns(adam, left.data(), 0, 3, row.data(), col, cols);
    CopyRowColumns(adam, right.data(), 3, 2, row.data(), col, cols);
    EXPECT_EQ(row, make(col, cols)) << "columns " << col << ".." << col + cols;
  }
}

TEST(RowLayoutTest, DisjointColumnsCopyNothing) {
  const RowLayout rw = RowLayout::For("rowwise_adagrad");
  std::vector<float> src = {1, 2, 9}, dst = {-1, -1, -1};
  CopyRowColumns(rw, src.data(), 0, 2, dst.data(), 2, 2);
  EXPECT_EQ(dst, (std::vector<float>{-1, -1, -1}));
}

}  // namespace
}  // namespace tessera
