#include "trainer/criteo_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trainer/fnv1a.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A line of 40 fields: label, I1..I13 = ints, C1..C26 = cats.
std::string Line(const std::string& label, const std::vector<std::string>& ints, const std::vector<std::string>& cats) {
  std::string out = label;
  for (int j = 0; j < kCriteoNumDense; ++j) out += "\t" + (j < static_cast<int>(ints.size()) ? ints[j] : "");
  for (int c = 0; c < kCriteoNumCategorical; ++c) out += "\t" + (c < static_cast<int>(cats.size()) ? cats[c] : "");
  return out;
}

// A line whose C{c+1} is "c{c}v" and I{j+1} is j.
std::string GoodLine(const std::string& label = "1") {
  std::vector<std::string> ints, cats;
  for (int j = 0; j < kCriteoNumDense; ++j) ints.push_back(std::to_string(j));
  for (int c = 0; c < kCriteoNumCategorical; ++c) cats.push_back("c" + std::to_string(c) + "v");
  return Line(label, ints, cats);
}

class CriteoParseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "criteo_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `contents` to a fresh file and returns its path.
  std::string Write(const std::string& contents) {
    const std::string path = (dir_ / ("f" + std::to_string(files_++) + ".tsv")).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  StatusOr<std::unique_ptr<DataSource>> Open(const std::string& contents,
                                             std::vector<CriteoFeature> features = AllCriteoFeatures(1000)) {
    CriteoOptions options;
    options.path = Write(contents);
    options.features = std::move(features);
    return OpenCriteoTsv(options);
  }

  // Expects opening `contents` to fail with InvalidArgument mentioning `needle`.
  void ExpectError(const std::string& contents, const std::string& needle) {
    auto source = Open(contents);
    ASSERT_FALSE(source.ok()) << "opened: " << contents;
    EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument) << source.status();
    EXPECT_NE(source.status().message().find(needle), std::string::npos) << source.status();
  }

  fs::path dir_;
  int files_ = 0;
};

TEST_F(CriteoParseTest, ParsesOneLine) {
  auto source = Open(GoodLine() + "\n");
  ASSERT_TRUE(source.ok()) << source.status();
  DataSource& s = **source;
  EXPECT_EQ(s.num_examples(), 1);
  EXPECT_EQ(s.num_dense(), 13);
  ASSERT_EQ(s.feature_names().size(), 26u);
  EXPECT_EQ(s.feature_names()[0], "C1");
  EXPECT_EQ(s.feature_names()[25], "C26");
  Batch batch;
  ASSERT_TRUE(s.Read(0, 1, &batch).ok());
  EXPECT_EQ(batch.size, 1);
  EXPECT_EQ(batch.num_dense, 13);
  ASSERT_EQ(batch.labels, std::vector<float>{1.0f});
  ASSERT_EQ(batch.dense.size(), 13u);
  for (int j = 0; j < 13; ++j) EXPECT_EQ(batch.dense[j], static_cast<float>(std::log(1.0 + j))) << j;
  ASSERT_TRUE(batch.sparse.Validate().ok());
  for (int c = 0; c < 26; ++c) {
    EXPECT_EQ(batch.sparse.values[c], CriteoRow(c, "c" + std::to_string(c) + "v", 1000)) << c;
    EXPECT_EQ(batch.sparse.lengths[c], 1);
  }
  EXPECT_FALSE(batch.sparse.weighted());
}

TEST_F(CriteoParseTest, TrailingTabMissingAndNegativeValues) {
  // I1 missing, I2 = -2, C26 missing (line ends with a tab), C3 missing.
  std::vector<std::string> ints = {"", "-2", "7"};
  std::vector<std::string> cats(26, "deadbeef");
  cats[2] = "";
  cats[25] = "";
  const std::string line = Line("0", ints, cats);
  ASSERT_EQ(line.back(), '\t');
  auto source = Open(line + "\n" + GoodLine("0") + "\n");
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_EQ((*source)->num_examples(), 2);
  Batch batch;
  ASSERT_TRUE((*source)->Read(0, 1, &batch).ok());
  EXPECT_EQ(batch.labels[0], 0.0f);
  EXPECT_EQ(batch.dense[0], 0.0f);  // missing
  EXPECT_EQ(batch.dense[1], 0.0f);  // log(1 + max(-2, 0))
  EXPECT_EQ(batch.dense[2], static_cast<float>(std::log(8.0)));
  EXPECT_EQ(batch.dense[3], 0.0f);
  EXPECT_EQ(batch.sparse.values[2], CriteoRow(2, "", 1000));
  EXPECT_EQ(batch.sparse.values[25], 308);  // REFERENCE.md: column 25 missing -> 308
  EXPECT_EQ(batch.sparse.values[0], CriteoRow(0, "deadbeef", 1000));
}

// One line on its own, as the reader and the fuzz target parse it: the
// features asked for in their order, errors without a file or line.
TEST(CriteoLineTest, ParsesOneLine) {
  std::vector<std::string> cats(26, "");
  cats[0] = "68fd1e64";
  cats[13] = "b28479f6";
  CriteoExample example;
  const std::vector<CriteoFeature> features = {{.column = 13, .num_rows = 1000}, {.column = 0, .num_rows = 1000}};
  ASSERT_TRUE(ParseCriteoLine(Line("1", {"3", "", "-4"}, cats) + "\r", features, &example).ok());
  EXPECT_EQ(example.label, 1.0f);
  EXPECT_EQ(example.dense[0], static_cast<float>(std::log(4.0)));
  EXPECT_EQ(example.dense[1], 0.0f);
  EXPECT_EQ(example.dense[2], 0.0f);
  EXPECT_EQ(example.ids, (std::vector<int64_t>{64, 123}));  // REFERENCE.md's test vectors
  const Status bad = ParseCriteoLine(Line("1", {"x"}, cats), features, &example);
  EXPECT_EQ(bad.message(), "I1 is not an integer: \"x\"");
  EXPECT_FALSE(ParseCriteoLine("1\t2", features, &example).ok());
}

TEST_F(CriteoParseTest, FeatureOrderRowsAndBatchLayout) {
  std::vector<std::string> cats(26, "");
  cats[0] = "68fd1e64";
  cats[13] = "b28479f6";
  const std::string a = Line("1", {}, cats);
  cats[0] = "x";
  const std::string b = Line("0", {}, cats);
  // Features out of column order, different table sizes.
  auto source =
      Open(a + "\n" + b + "\n" + a,  // no final newline
           {{.column = 13, .num_rows = 1000}, {.column = 0, .num_rows = 1000}, {.column = 25, .num_rows = 7}});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->feature_names(), (std::vector<std::string>{"C14", "C1", "C26"}));
  ASSERT_EQ((*source)->num_examples(), 3);
  Batch batch;
  ASSERT_TRUE((*source)->Read(0, 3, &batch).ok());
  ASSERT_TRUE(batch.sparse.Validate().ok());
  EXPECT_EQ(batch.sparse.keys, (std::vector<std::string>{"C14", "C1", "C26"}));
  EXPECT_EQ(batch.sparse.batch_size, 3);
  EXPECT_EQ(batch.sparse.lengths, std::vector<int32_t>(9, 1));
  const int64_t x = CriteoRow(0, "x", 1000);
  const int64_t empty26 = static_cast<int64_t>(0xaf63d44c8601def4ULL % 7);
  // Feature-major: C14 of examples 0..2, then C1, then C26.
  EXPECT_EQ(batch.sparse.values, (std::vector<int64_t>{64, 64, 64, 123, x, 123, empty26, empty26, empty26}));
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(batch.dense.size(), 3u * 13);

  // A sub-range, reusing the batch.
  ASSERT_TRUE((*source)->Read(1, 2, &batch).ok());
  EXPECT_EQ(batch.first_example, 1);
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ(batch.sparse.values, (std::vector<int64_t>{64, 64, x, 123, empty26, empty26}));
  EXPECT_EQ(batch.labels, (std::vector<float>{0, 1}));
  // Empty reads are fine; reads past the end are errors.
  ASSERT_TRUE((*source)->Read(3, 0, &batch).ok());
  EXPECT_EQ(batch.size, 0);
  EXPECT_TRUE(batch.sparse.Validate().ok());
  EXPECT_EQ((*source)->Read(2, 2, &batch).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*source)->Read(-1, 1, &batch).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*source)->Read(0, -1, &batch).code(), StatusCode::kOutOfRange);
}

TEST_F(CriteoParseTest, NoFeaturesAndMaxExamples) {
  CriteoOptions options;
  options.path = Write(GoodLine("0") + "\n" + GoodLine("1") + "\n" + GoodLine("1") + "\n");
  options.max_examples = 2;
  auto source = OpenCriteoTsv(options);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->num_examples(), 2);
  EXPECT_TRUE((*source)->feature_names().empty());
  Batch batch;
  ASSERT_TRUE((*source)->Read(0, 2, &batch).ok());
  EXPECT_EQ(batch.labels, (std::vector<float>{0, 1}));
  EXPECT_EQ(batch.sparse.num_keys(), 0);
  EXPECT_TRUE(batch.sparse.Validate().ok());
}

TEST_F(CriteoParseTest, CrLfLineEndingsAreTolerated) {
  std::vector<std::string> cats(26, "ab");
  cats[25] = "";
  auto source = Open(Line("1", {"3"}, cats) + "\r\n");
  ASSERT_TRUE(source.ok()) << source.status();
  Batch batch;
  ASSERT_TRUE((*source)->Read(0, 1, &batch).ok());
  EXPECT_EQ(batch.sparse.values[25], 308);
}

TEST_F(CriteoParseTest, WrongFieldCount) {
  const std::string good = GoodLine();
  ExpectError(good + "\n" + good.substr(0, good.rfind('\t')) + "\n", ":2: expected 40 tab-separated fields, found 39");
  ExpectError(good + "\textra\n", ":1: expected 40 tab-separated fields, found 41");
  ExpectError(good + "\n\n" + good + "\n", ":2: expected 40 tab-separated fields, found 1");  // blank line
  ExpectError("0 1 2 3\n", "found 1");
}

TEST_F(CriteoParseTest, BadLabel) {
  for (const char* label : {"2", "", "0.0", "-1", "1 ", "yes"}) {
    ExpectError(GoodLine() + "\n" + GoodLine() + "\n" + GoodLine(label) + "\n", ":3: label must be 0 or 1");
  }
}

TEST_F(CriteoParseTest, NonIntegerIntegerField) {
  for (const char* bad : {"1.5", "abc", "+3", "-", "3x", " 3", "99999999999999999999"}) {
    std::vector<std::string> ints(13, "1");
    ints[4] = bad;
    ExpectError(GoodLine() + "\n" + Line("1", ints, {}) + "\n", ":2: I5 is not an integer");
  }
}

TEST_F(CriteoParseTest, EmptyFile) { ExpectError("", "is empty"); }

TEST_F(CriteoParseTest, MissingFile) {
  CriteoOptions options;
  options.path = (dir_ / "no_such_file.tsv").string();
  auto source = OpenCriteoTsv(options);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_NE(source.status().message().find("no_such_file.tsv"), std::string::npos) << source.status();
}

TEST_F(CriteoParseTest, BadOptions) {
  const std::string line = GoodLine() + "\n";
  for (auto features : std::vector<std::vector<CriteoFeature>>{
           {{.column = 26, .num_rows = 10}},
           {{.column = -1, .num_rows = 10}},
           {{.column = 3, .num_rows = 0}},
           {{.column = 3, .num_rows = 10}, {.column = 3, .num_rows = 20}},
       }) {
    auto source = Open(line, features);
    ASSERT_FALSE(source.ok());
    EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument) << source.status();
  }
  CriteoOptions options;
  options.path = Write(line);
  options.max_examples = -1;
  EXPECT_FALSE(OpenCriteoTsv(options).ok());
}

// The shared 8k sample, when the checkout has ../shared next to it.
class CriteoSampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::string(TESSERA_SHARED_DATA_DIR) + "/criteo_kaggle_8k/train.tsv";
    if (!fs::exists(path_)) GTEST_SKIP() << "Criteo sample not found at " << path_ << " (no ../shared checkout)";
  }
  std::string path_;
};

TEST_F(CriteoSampleTest, RowsCtrAndKnownRows) {
  CriteoOptions options;
  options.path = path_;
  options.features = AllCriteoFeatures(1000);
  auto opened = OpenCriteoTsv(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  DataSource& s = **opened;
  ASSERT_EQ(s.num_examples(), 7200);

  Batch all;
  ASSERT_TRUE(s.Read(0, 7200, &all).ok());
  ASSERT_TRUE(all.sparse.Validate().ok());
  double clicks = 0;
  for (float l : all.labels) clicks += l;
  EXPECT_EQ(clicks, 1549);  // SOURCE.md: CTR 0.2151
  EXPECT_NEAR(clicks / 7200, 0.2151, 5e-5);
  for (int64_t v : all.sparse.values) ASSERT_TRUE(v >= 0 && v < 1000);

  // Row 0, by hand (python: FNV over bytes([c]) + field, mod 1000):
  // 0 1 1 5 0 1382 4 15 2 181 1 2 <empty> 2 68fd1e64 80e26c9b ... <empty C22> ...
  Batch row;
  ASSERT_TRUE(s.Read(0, 1, &row).ok());
  EXPECT_EQ(row.labels[0], 0.0f);
  const double ints[13] = {1, 1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2};
  for (int j = 0; j < 13; ++j) EXPECT_EQ(row.dense[j], static_cast<float>(std::log(1.0 + ints[j]))) << j;
  EXPECT_FLOAT_EQ(row.dense[4], 7.232010331664759f);  // log(1383)
  const std::vector<int64_t> row0 = {123, 303, 665, 422, 166, 54,  586, 63,  644, 796, 249, 806, 37,
                                     891, 379, 378, 632, 175, 931, 230, 748, 776, 426, 94,  502, 560};
  EXPECT_EQ(row.sparse.values, row0);

  // Row 2 ends with a tab (C26 missing -> 308) and row 1 has REFERENCE.md's
  // C14 = b28479f6 -> 64.
  ASSERT_TRUE(s.Read(1, 2, &row).ok());
  EXPECT_EQ(row.sparse.values[2 * 13 + 0], 64);
  EXPECT_EQ(row.sparse.values[2 * 25 + 1], 308);
  EXPECT_EQ(row.sparse.values[2 * 0 + 1], 429);
}

TEST_F(CriteoSampleTest, ReorderedFeaturesAndLargeTable) {
  CriteoOptions options;
  options.path = path_;
  options.features = {{.column = 25, .num_rows = 1000}, {.column = 2, .num_rows = 1'000'000'007}};
  options.max_examples = 10;
  auto opened = OpenCriteoTsv(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->num_examples(), 10);
  Batch row;
  ASSERT_TRUE((*opened)->Read(2, 1, &row).ok());
  // Row 2: C26 empty, C3 = 02cf9876 (python: 433551795).
  EXPECT_EQ(row.sparse.keys, (std::vector<std::string>{"C26", "C3"}));
  EXPECT_EQ(row.sparse.values, (std::vector<int64_t>{308, 433551795}));
  EXPECT_EQ(row.sparse.values[1], CriteoRow(2, "02cf9876", 1'000'000'007));
}

}  // namespace
}  // namespace tessera
