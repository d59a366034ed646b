#include "common/param_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tessera_param_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

TEST(ParamFileTest, RoundTrip) {
  const std::string path = TempPath("a.params");
  std::vector<ParamArray> arrays = {ParamArray::Text("meta", R"({"k":1})"),
                                    ParamArray::Ints("ids", 3, 1, {5, -1, 1LL << 40}),
                                    ParamArray::Floats("rows", 3, 2, {1, 2, 3, 4, 5, 6.5f})};
  ASSERT_TRUE(WriteParamFile(path, arrays).ok());
  auto back = ReadParamFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ(FindParam(*back, "meta")->bytes, R"({"k":1})");
  EXPECT_EQ(FindParam(*back, "ids")->i64[2], 1LL << 40);
  EXPECT_EQ(FindParam(*back, "rows")->f32[5], 6.5f);
  EXPECT_EQ(FindParam(*back, "rows")->cols, 2);
  EXPECT_EQ(FindParam(*back, "nope"), nullptr);
}

TEST(ParamFileTest, DamageIsDetected) {
  const std::string path = TempPath("b.params");
  ASSERT_TRUE(WriteParamFile(path, {ParamArray::Floats("w", 1, 4, {1, 2, 3, 4})}).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Truncated.
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size() - 5);
  EXPECT_EQ(ReadParamFile(path).status().code(), StatusCode::kDataLoss);
  // One flipped bit.
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  EXPECT_EQ(ReadParamFile(path).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ReadParamFile(TempPath("missing.params")).status().code(), StatusCode::kNotFound);
}

TEST(ParamFileTest, ShapeMismatchIsAnError) {
  EXPECT_FALSE(WriteParamFile(TempPath("c.params"), {ParamArray::Floats("w", 2, 2, {1, 2, 3})}).ok());
}

}  // namespace
}  // namespace tessera
