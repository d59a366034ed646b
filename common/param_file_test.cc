#include "common/param_file.h"

#include <sys/stat.h>

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

// A write that fails says why, in errno's words (ErrnoStatus), as every
// other file the job writes does.
TEST(ParamFileTest, AFailedWriteNamesTheCause) {
  const std::string path = TempPath("no_such_folder/a.params");
  Status st = WriteParamFile(path, {ParamArray::Floats("w", 1, 2, {1, 2})});
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("No such file or directory"), std::string::npos) << st;
}

// Written by a rename over the path: a link or a device there is refused,
// not replaced by a regular file (as root, write_params("/dev/stdout")
// would have replaced the link for every later process). A FIFO stands in
// for a device: were the check gone, only this test's folder would change.
TEST(ParamFileTest, ALinkOrADeviceIsNotReplaced) {
  const std::string target = TempPath("target.params"), link = TempPath("link.params"), fifo = TempPath("fifo");
  ASSERT_TRUE(WriteParamFile(target, {ParamArray::Floats("w", 1, 1, {1})}).ok());
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {link, fifo}) {
    Status st = WriteParamFile(path, {ParamArray::Floats("w", 1, 2, {1, 2})});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << path << ": " << st;
    EXPECT_NE(st.message().find("is not a regular file"), std::string::npos) << st;
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
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

// Arrays of no elements (a fuzzer's find: reading one passed memcpy a null
// pointer, undefined behaviour that UBSan reports).
TEST(ParamFileTest, EmptyArraysRoundTrip) {
  auto bytes = EncodeParams({ParamArray::Floats("f", 0, 4, {}), ParamArray::Ints("i", 3, 0, {}),
                             ParamArray::Text("t", "")});
  ASSERT_TRUE(bytes.ok());
  auto back = DecodeParams(*bytes, "state");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].cols, 4);
  EXPECT_TRUE((*back)[1].i64.empty());
  EXPECT_EQ((*back)[2].bytes, "");
}

// A count that leaves entries out is damage even under a valid checksum (a
// fuzzer's find: the extra entry used to be dropped without a word).
TEST(ParamFileTest, BytesAfterTheLastEntryAreAnError) {
  auto bytes = EncodeParams({ParamArray::Floats("a", 1, 1, {1}), ParamArray::Floats("b", 1, 1, {2})});
  ASSERT_TRUE(bytes.ok());
  std::string data = *bytes;
  data[8] = 1;  // count := 1 (little-endian, after the 8-byte magic)
  const uint32_t crc = Crc32(data.data(), data.size() - 4);
  for (int i = 0; i < 4; ++i) data[data.size() - 4 + i] = static_cast<char>(crc >> (8 * i));
  auto decoded = DecodeParams(data, "state");
  EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(decoded.status().message().find("after its 1 entries"), std::string::npos) << decoded.status();
  EXPECT_TRUE(DecodeParams(*bytes, "state").ok());
}

TEST(ParamFileTest, ShapeMismatchIsAnError) {
  EXPECT_FALSE(WriteParamFile(TempPath("c.params"), {ParamArray::Floats("w", 2, 2, {1, 2, 3})}).ok());
}

}  // namespace
}  // namespace tessera
