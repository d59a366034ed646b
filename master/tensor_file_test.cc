// The safetensors and npy writers: header bytes as the formats define them,
// alignment, and a round trip through a small reader written from the specs
// (not from the writer), with data written out of order.
#include "master/tensor_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t Le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

class TensorFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_tensor_file_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST(TensorFormat, ParsesBothNamesAndRefusesOthers) {
  TensorFormat f;
  EXPECT_TRUE(ParseTensorFormat("npy", &f).ok());
  EXPECT_EQ(f, TensorFormat::kNpy);
  EXPECT_TRUE(ParseTensorFormat("safetensors", &f).ok());
  EXPECT_EQ(f, TensorFormat::kSafetensors);
  const Status st = ParseTensorFormat("pickle", &f);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("safetensors or npy"), std::string::npos);
}

TEST(SafetensorsHeader, LengthPrefixedSpacePaddedJsonWithBackToBackOffsets) {
  const std::vector<TensorSpec> specs = {{"a", TensorDtype::kF32, {3}}, {"b.ids", TensorDtype::kI64, {2, 1}}};
  const std::string h = SafetensorsHeader(specs, {{"format", "pt"}});
  ASSERT_GE(h.size(), 8u);
  const uint64_t n = Le(h, 0, 8);
  EXPECT_EQ(h.size(), 8 + n);
  EXPECT_EQ(h.size() % 8, 0u);
  const std::string text = h.substr(8);
  EXPECT_EQ(text.front(), '{');
  EXPECT_EQ(text.find_last_not_of(' '), text.rfind('}'));  // only spaces after the JSON
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(j["b.ids"]["dtype"], "I64");
  EXPECT_EQ(j["b.ids"]["data_offsets"], nlohmann::json::array({12, 28}));
}

TEST(NpyHeader, VersionOneDictPaddedTo64WithNewline) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{}, {5}, {4, 3}}) {
    const std::string h = NpyHeader({"x", TensorDtype::kF32, shape});
    EXPECT_EQ(h.substr(0, 6), std::string("\x93NUMPY", 6));
    EXPECT_EQ(h[6], 1);
    EXPECT_EQ(h[7], 0);
    EXPECT_EQ(h.size() % 64, 0u);
    EXPECT_EQ(Le(h, 8, 2), h.size() - 10);
    EXPECT_EQ(h.back(), '\n');
    const std::string want_shape = shape.empty() ? "()" : shape.size() == 1 ? "(5,)" : "(4, 3)";
    EXPECT_NE(h.find("{'descr': '<f4', 'fortran_order': False, 'shape': " + want_shape + ", }"), std::string::npos)
        << h;
  }
  EXPECT_NE(NpyHeader({"i", TensorDtype::kI64, {2}}).find("'<i8'"), std::string::npos);
}

TEST(NpyHeader, VersionTwoWhenTheDictOutgrowsAU16) {
  const std::string h = NpyHeader({"x", TensorDtype::kF32, std::vector<int64_t>(30000, 1)});
  EXPECT_EQ(h[6], 2);
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(Le(h, 8, 4), h.size() - 12);
}

TEST_F(TensorFileTest, SafetensorsRoundTripWithWritesOutOfOrder) {
  const std::vector<TensorSpec> specs = {{"w", TensorDtype::kF32, {3, 2}}, {"ids", TensorDtype::kI64, {3}}};
  auto w = TensorWriter::Create(TensorFormat::kSafetensors, dir_, "model", specs, {});
  ASSERT_TRUE(w.ok()) << w.status();
  const float rows[6] = {1, 2, 3, 4, 5, 6};
  const int64_t ids[3] = {7, -1, 1LL << 40};
  ASSERT_TRUE((*w)->Write(0, 4, rows + 4, 2).ok());  // last row first
  ASSERT_TRUE((*w)->Write(1, 0, ids, 3).ok());
  ASSERT_TRUE((*w)->Write(0, 0, rows, 4).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_EQ((*w)->FileOf(1), "model.safetensors");

  const std::string f = ReadFile(dir_ + "/model.safetensors");
  const uint64_t n = Le(f, 0, 8);
  const auto j = nlohmann::json::parse(f.substr(8, n));
  const size_t data = 8 + n;
  EXPECT_EQ(data % 8, 0u);
  EXPECT_EQ(f.size(), data + 24 + 24);
  const auto wo = j["w"]["data_offsets"], io = j["ids"]["data_offsets"];
  EXPECT_EQ(std::memcmp(f.data() + data + wo[0].get<size_t>(), rows, sizeof(rows)), 0);
  EXPECT_EQ(std::memcmp(f.data() + data + io[0].get<size_t>(), ids, sizeof(ids)), 0);
}

TEST_F(TensorFileTest, NpyOneFilePerTensorRoundTrip) {
  const std::vector<TensorSpec> specs = {{"tables.t.weight", TensorDtype::kF32, {2, 2}},
                                         {"dense.step", TensorDtype::kI64, {}}};
  auto w = TensorWriter::Create(TensorFormat::kNpy, dir_, "ignored", specs, {});
  ASSERT_TRUE(w.ok()) << w.status();
  const float v[4] = {0.5f, -1, 3, 1e-30f};
  const int64_t step = 42;
  ASSERT_TRUE((*w)->Write(0, 2, v + 2, 2).ok());
  ASSERT_TRUE((*w)->Write(0, 0, v, 2).ok());
  ASSERT_TRUE((*w)->Write(1, 0, &step, 1).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_EQ((*w)->FileOf(0), "tables.t.weight.npy");
  const std::string f = ReadFile(dir_ + "/tables.t.weight.npy");
  const size_t data = 10 + Le(f, 8, 2);
  ASSERT_EQ(f.size(), data + sizeof(v));
  EXPECT_EQ(std::memcmp(f.data() + data, v, sizeof(v)), 0);
  const std::string s = ReadFile(dir_ + "/dense.step.npy");
  EXPECT_EQ(Le(s, 10 + Le(s, 8, 2), 8), 42u);
}

TEST_F(TensorFileTest, UnfinishedTensorAndExistingFileAreErrors) {
  auto w = TensorWriter::Create(TensorFormat::kNpy, dir_, "", {{"x", TensorDtype::kF32, {4}}}, {});
  ASSERT_TRUE(w.ok()) << w.status();
  const float v[2] = {1, 2};
  ASSERT_TRUE((*w)->Write(0, 0, v, 2).ok());
  const Status st = (*w)->Finish();
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("2 of 4"), std::string::npos) << st;
  // The file is there now: a second writer must not clobber it.
  auto again = TensorWriter::Create(TensorFormat::kNpy, dir_, "", {{"x", TensorDtype::kF32, {4}}}, {});
  EXPECT_FALSE(again.ok());
}

}  // namespace
}  // namespace tessera
