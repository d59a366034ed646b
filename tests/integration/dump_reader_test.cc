// tessera_compare_dumps' comparison: a row one dump lacks holds its initial
// value there (a server stores only rows it materialized), so the other
// dump's row is compared with that value rather than counted as missing.
#include "tests/integration/dump_reader.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/config_conversion.h"

namespace tessera::testing {
namespace {

constexpr int kDim = 4;

Dump Empty() {
  Dump d;
  InitializerSpec spec;
  spec.low = -0.5;
  spec.high = 0.5;
  d.initial["t"] = {kernels::ToRowInitializer(spec, 99), kDim};
  d.dense.push_back(ParamArray::Floats("w", 1, 2, {1.0f, 2.0f}));
  return d;
}

std::vector<float> Initial(const Dump& d, int64_t id) {
  std::vector<float> row(kDim);
  kernels::InitRow(d.initial.at("t").first, id, 0, kDim, row.data());
  return row;
}

TEST(DumpReaderTest, AnAbsentRowIsItsInitialValue) {
  Dump a = Empty(), b = Empty();
  a.rows["t"][5] = Initial(a, 5);  // stored, never trained
  a.rows["t"][6] = {1, 2, 3, 4};
  b.rows["t"][6] = {1, 2, 3, 4};
  std::string where;
  EXPECT_EQ(MaxDifference(a, b, &where), 0.0) << where;
  EXPECT_EQ(MaxDifference(b, a, &where), 0.0) << where;
  // A trained row one dump lacks differs from its initial value: found,
  // from either side.
  b.rows["t"][7] = Initial(b, 7);
  b.rows["t"][7][2] += 0.25f;
  EXPECT_NEAR(MaxDifference(a, b, &where), 0.25, 1e-6);
  EXPECT_NE(where.find("row 7 col 2"), std::string::npos) << where;
  EXPECT_NE(where.find("initial value"), std::string::npos) << where;
  EXPECT_NEAR(MaxDifference(b, a, &where), 0.25, 1e-6);
}

TEST(DumpReaderTest, DifferencesInRowsAndDenseWeightsAreFound) {
  Dump a = Empty(), b = Empty();
  a.rows["t"][1] = {1, 2, 3, 4};
  b.rows["t"][1] = {1, 2, 3.5f, 4};
  std::string where;
  EXPECT_NEAR(MaxDifference(a, b, &where), 0.5, 1e-6);
  b.rows["t"][1] = a.rows["t"][1];
  b.dense[0].f32[1] = 3.0f;
  EXPECT_NEAR(MaxDifference(a, b, &where), 1.0, 1e-6);
  EXPECT_NE(where.find("dense w"), std::string::npos) << where;
  // A column no shard wrote (NaN) is never equal.
  b.dense[0].f32[1] = 2.0f;
  a.rows["t"][1][0] = NAN;
  EXPECT_TRUE(std::isinf(MaxDifference(a, b, &where)));
}

}  // namespace
}  // namespace tessera::testing
