// A file of named arrays: how parameters leave a process (a parameter
// server's shard dump, a trainer's dense model) for tests, tools and resumes.
//
//   File   := magic:"TSPARAM1" count:fixed32 Entry{count} crc:fixed32
//   Entry  := name_len:fixed32 name:bytes dtype:fixed8 rows:fixed64 cols:fixed64 data
//   dtype  := 0 float32 | 1 int64 | 2 bytes (UTF-8/JSON text; rows = length, cols = 1)
//   data   := rows * cols elements, little-endian
// crc is a CRC-32 over everything before it, so a truncated or damaged file
// is an error on read, never silently loaded. Written to a temporary name and
// renamed, so a reader never sees half a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

struct ParamArray {
  enum class Type : uint8_t { kFloat32 = 0, kInt64 = 1, kBytes = 2 };
  std::string name;
  Type type = Type::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  std::string bytes;

  static ParamArray Floats(std::string name, int64_t rows, int64_t cols, std::vector<float> v);
  static ParamArray Ints(std::string name, int64_t rows, int64_t cols, std::vector<int64_t> v);
  static ParamArray Text(std::string name, std::string text);
};

Status WriteParamFile(const std::string& path, const std::vector<ParamArray>& arrays);
StatusOr<std::vector<ParamArray>> ReadParamFile(const std::string& path);
// The same format in memory (what travels in a checkpoint message).
StatusOr<std::string> EncodeParams(const std::vector<ParamArray>& arrays);
StatusOr<std::vector<ParamArray>> DecodeParams(const std::string& bytes, const std::string& what);
// Whether `bytes` begin as EncodeParams' do (whole or damaged: DecodeParams says).
bool HasParamsMagic(const std::string& bytes);
// The array called `name`, or null.
const ParamArray* FindParam(const std::vector<ParamArray>& arrays, const std::string& name);

uint32_t Crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace tessera
