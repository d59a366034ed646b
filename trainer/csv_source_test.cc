#include "trainer/csv_source.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

namespace fs = std::filesystem;

class CsvSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "csv_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& contents) {
    const std::string path = (dir_ / ("f" + std::to_string(files_++) + ".csv")).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  // click label, one dense column, two sparse columns of 1000 rows.
  static CsvOptions ClickOptions() {
    CsvOptions o;
    o.format.label_column = "click";
    o.format.dense = {{"hour", false}};
    o.format.sparse = {"site", "app"};
    o.sparse_rows = {1000, 1000};
    return o;
  }

  // MovieLens u.data: user item rating timestamp, tab-separated, no header;
  // label rating >= 4; users and items sparse; no dense column.
  static CsvOptions RatingOptions(const std::string& path, int64_t user_rows, int64_t item_rows) {
    CsvOptions o;
    o.path = path;
    o.format.delimiter = '\t';
    o.format.header = false;
    o.format.columns = {"user_id", "item_id", "rating", "timestamp"};
    o.format.label_column = "rating";
    o.format.has_label_threshold = true;
    o.format.label_threshold = 4;
    o.format.sparse = {"user_id", "item_id"};
    o.sparse_rows = {user_rows, item_rows};
    return o;
  }

  // Expects opening `contents` with `o` to fail with InvalidArgument
  // mentioning every one of `needles`.
  void ExpectError(CsvOptions o, const std::string& contents, const std::vector<std::string>& needles) {
    o.path = Write(contents);
    auto source = OpenCsv(o);
    ASSERT_FALSE(source.ok());
    EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument) << source.status();
    for (const std::string& needle : needles) {
      EXPECT_NE(source.status().message().find(needle), std::string::npos)
          << "'" << needle << "' missing from: " << source.status();
    }
  }

  fs::path dir_;
  int files_ = 0;
};

TEST_F(CsvSourceTest, HashIsFnv1aOfColumnNulValue) {
  // Computed independently (Python): FNV-1a 64 of b"site_id\0" b"1fbe01fe".
  EXPECT_EQ(CsvHash("site_id", "1fbe01fe"), 0xf1a8986ee821843eULL);
  EXPECT_EQ(CsvRow("site_id", "1fbe01fe", 1000), 950);
  EXPECT_EQ(CsvHash("user_id", ""), 0xe888bc40090309ceULL);
  static_assert(CsvRow("user_id", "", 7) == 0);
  // The column keeps equal values of two columns apart, and the separator
  // keeps ("ab", "c") apart from ("a", "bc").
  EXPECT_NE(CsvHash("user_id", "5"), CsvHash("item_id", "5"));
  EXPECT_NE(CsvHash("ab", "c"), CsvHash("a", "bc"));
}

TEST_F(CsvSourceTest, ReadsAFileWithAHeader) {
  CsvOptions o = ClickOptions();
  o.path = Write("id,click,hour,site,app\n7,0,3,s1,a1\n8,1,5.5,s2,\r\n");
  auto source = OpenCsv(o);
  ASSERT_TRUE(source.ok()) << source.status();
  DataSource& s = **source;
  EXPECT_EQ(s.num_examples(), 2);
  EXPECT_EQ(s.num_dense(), 1);
  EXPECT_EQ(s.feature_names(), (std::vector<std::string>{"site", "app"}));
  Batch b;
  ASSERT_TRUE(s.Read(0, 2, &b).ok());
  EXPECT_EQ(b.labels, (std::vector<float>{0, 1}));
  EXPECT_EQ(b.dense, (std::vector<float>{3, 5.5}));
  EXPECT_EQ(b.sparse.keys, s.feature_names());
  EXPECT_EQ(b.sparse.lengths, (std::vector<int32_t>(4, 1)));
  // Feature-major: site of both rows, then app of both (an empty app hashes "").
  EXPECT_EQ(b.sparse.values, (std::vector<int64_t>{CsvRow("site", "s1", 1000), CsvRow("site", "s2", 1000),
                                                   CsvRow("app", "a1", 1000), CsvRow("app", "", 1000)}));
  EXPECT_FALSE(s.Read(1, 2, &b).ok());
}

TEST_F(CsvSourceTest, WithoutAHeaderTheColumnsNameTheFields) {
  CsvOptions o = ClickOptions();
  o.format.header = false;
  o.format.columns = {"id", "click", "hour", "site", "app"};
  o.path = Write("7,1,3,s1,a1\n");
  auto source = OpenCsv(o);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->num_examples(), 1);  // the first line is a row, not a header

  o.format.columns.clear();
  ExpectError(o, "7,1,3,s1,a1\n", {"no header and no column names"});
}

TEST_F(CsvSourceTest, AHeaderMustAgreeWithTheColumnsGiven) {
  CsvOptions o = ClickOptions();
  o.format.columns = {"id", "click", "hour", "site", "app"};
  o.path = Write("id,click,hour,site,app\n7,1,3,s1,a1\n");
  EXPECT_TRUE(OpenCsv(o).ok());
  ExpectError(o, "id,click,hour,app,site\n7,1,3,s1,a1\n", {":1:", "header (id,click,hour,app,site)", "differs"});
}

TEST_F(CsvSourceTest, TabSeparatedRatingsWithAThresholdAndNoDense) {
  const CsvOptions o =
      RatingOptions(Write("196\t242\t3\t881250949\n186\t302\t4\t891717742\n22\t377\t5\t878887116\n"), 100, 200);
  auto source = OpenCsv(o);
  ASSERT_TRUE(source.ok()) << source.status();
  Batch b;
  ASSERT_TRUE((*source)->Read(0, 3, &b).ok());
  EXPECT_EQ(b.labels, (std::vector<float>{0, 1, 1}));
  EXPECT_EQ(b.num_dense, 0);
  EXPECT_TRUE(b.dense.empty());
  EXPECT_EQ(b.sparse.values[0], CsvRow("user_id", "196", 100));
  EXPECT_EQ(b.sparse.values[3], CsvRow("item_id", "242", 200));
}

TEST_F(CsvSourceTest, Log1pIsCriteosTransform) {
  CsvOptions o = ClickOptions();
  o.format.dense = {{"hour", true}};
  o.path = Write("click,hour,site,app\n1,7,s,a\n0,-3,s,a\n");
  auto source = OpenCsv(o);
  ASSERT_TRUE(source.ok()) << source.status();
  Batch b;
  ASSERT_TRUE((*source)->Read(0, 2, &b).ok());
  EXPECT_EQ(b.dense[0], static_cast<float>(std::log(8.0)));
  EXPECT_EQ(b.dense[1], 0.0f);
}

TEST_F(CsvSourceTest, BadRowsAreErrorsNamingFileLineAndColumn) {
  const std::string header = "click,hour,site,app\n";
  const CsvOptions o = ClickOptions();
  ExpectError(o, header + "1,2,s,a\n1,2,s\n", {".csv:3", "expected 4 fields, found 3"});
  ExpectError(o, header + "1,2,s,a,extra\n", {".csv:2", "expected 4 fields, found 5"});
  ExpectError(o, header + ",2,s,a\n", {".csv:2", "column 'click'", "label must be 0 or 1", "\"\""});
  ExpectError(o, header + "yes,2,s,a\n", {"column 'click'", "\"yes\""});
  ExpectError(o, header + "0.5,2,s,a\n", {"column 'click'", "0 or 1"});
  ExpectError(o, header + "1,,s,a\n", {".csv:2", "column 'hour'", "not a number"});
  ExpectError(o, header + "1,nan,s,a\n", {"column 'hour'", "\"nan\""});
  // Finite as a double, infinite as a float.
  ExpectError(o, header + "1,-7e84,s,a\n", {".csv:2", "column 'hour'", "out of a float's range", "\"-7e84\""});
  ExpectError(o, "click,site,app\n1,s,a\n", {"dense column 'hour' is not a column of"});
  ExpectError(o, header, {"has no rows"});
  ExpectError(o, "", {"no header line"});

  CsvOptions rating = o;
  rating.format.has_label_threshold = true;
  rating.format.label_threshold = 4;
  ExpectError(rating, header + "four,2,s,a\n", {"column 'click'", "label must be a number"});
}

TEST_F(CsvSourceTest, MissingFileIsNotFound) {
  CsvOptions o = ClickOptions();
  o.path = (dir_ / "absent.csv").string();
  auto source = OpenCsv(o);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_NE(source.status().message().find("absent.csv"), std::string::npos);
}

TEST_F(CsvSourceTest, EvalFractionHoldsOutTheLastRows) {
  CsvOptions o = ClickOptions();
  std::string text = "click,hour,site,app\n";
  for (int i = 0; i < 10; ++i) text += std::to_string(i % 2) + "," + std::to_string(i) + ",s,a\n";
  o.path = Write(text);
  o.format.eval_fraction = 0.3;  // floor(10 * 0.3) = 3 rows held out
  auto dense_of = [&](CsvPart part) {
    o.part = part;
    auto source = OpenCsv(o);
    EXPECT_TRUE(source.ok()) << source.status();
    Batch b;
    EXPECT_TRUE((*source)->Read(0, (*source)->num_examples(), &b).ok());
    return b.dense;
  };
  EXPECT_EQ(dense_of(CsvPart::kTrain), (std::vector<float>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(dense_of(CsvPart::kEval), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(dense_of(CsvPart::kAll).size(), 10u);

  // max_examples cuts the file first; the split is of what is left.
  o.max_examples = 5;  // floor(5 * 0.3) = 1
  EXPECT_EQ(dense_of(CsvPart::kEval), (std::vector<float>{4}));

  o.max_examples = 0;
  o.format.eval_fraction = 0.05;  // floor(0.5) = 0: an empty eval part
  o.part = CsvPart::kEval;
  auto empty = OpenCsv(o);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty train or eval part"), std::string::npos) << empty.status();
  o.format.eval_fraction = 0;
  EXPECT_FALSE(OpenCsv(o).ok());  // a split needs a fraction
  o.part = CsvPart::kAll;
  o.sparse_rows = {1000};
  EXPECT_FALSE(OpenCsv(o).ok());  // a table size per sparse column
}

#ifdef TESSERA_SHARED_DATA_DIR
TEST_F(CsvSourceTest, MovieLensAndAvazuSamplesLoad) {
  const fs::path data = TESSERA_SHARED_DATA_DIR;
  if (!fs::exists(data / "movielens_100k/u.data") || !fs::exists(data / "avazu_9k/train.csv")) {
    GTEST_SKIP() << "the samples are not in " << data << " (as in a fresh clone)";
  }
  CsvOptions ml = RatingOptions((data / "movielens_100k/u.data").string(), 1000, 2000);
  ml.format.eval_fraction = 0.1;
  ml.part = CsvPart::kTrain;
  auto train = OpenCsv(ml);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->num_examples(), 90000);
  ml.part = CsvPart::kEval;
  auto eval = OpenCsv(ml);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ((*eval)->num_examples(), 10000);

  CsvOptions avazu;
  avazu.path = (data / "avazu_9k/train.csv").string();
  avazu.format.label_column = "click";
  avazu.format.sparse = {"site_id", "device_ip"};
  avazu.sparse_rows = {1000, 10000};
  auto a = OpenCsv(avazu);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->num_examples(), 8087);
}
#endif

}  // namespace
}  // namespace tessera
