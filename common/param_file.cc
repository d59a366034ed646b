#include "common/param_file.h"

#include <cstring>
#include <fstream>

#include "common/replace_file.h"

namespace tessera {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'P', 'A', 'R', 'A', 'M', '1'};

class Writer {
 public:
  void Bytes(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  template <typename T>
  void Fixed(T v) {
    uint8_t b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    Bytes(b, sizeof(T));
  }
  std::string& buf() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  Reader(const std::string& data, size_t end) : data_(data), end_(end) {}
  bool Bytes(void* out, size_t n) {
    if (end_ - pos_ < n) return false;
    if (n == 0) return true;  // an empty array's data() may be null, which memcpy must not get
    std::memcpy(out, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Fixed(T* v) {
    uint8_t b[sizeof(T)];
    if (!Bytes(b, sizeof(T))) return false;
    uint64_t x = 0;
    for (size_t i = sizeof(T); i-- > 0;) x = (x << 8) | b[i];
    *v = static_cast<T>(x);
    return true;
  }
  size_t remaining() const { return end_ - pos_; }
  size_t pos() const { return pos_; }

 private:
  const std::string& data_;
  size_t end_;
  size_t pos_ = 0;
};

}  // namespace

uint32_t Crc32(const void* data, size_t n, uint32_t crc) {
  static uint32_t table[256];
  static bool init = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)init;
  crc = ~crc;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

ParamArray ParamArray::Floats(std::string name, int64_t rows, int64_t cols, std::vector<float> v) {
  ParamArray a;
  a.name = std::move(name);
  a.type = Type::kFloat32;
  a.rows = rows;
  a.cols = cols;
  a.f32 = std::move(v);
  return a;
}

ParamArray ParamArray::Ints(std::string name, int64_t rows, int64_t cols, std::vector<int64_t> v) {
  ParamArray a;
  a.name = std::move(name);
  a.type = Type::kInt64;
  a.rows = rows;
  a.cols = cols;
  a.i64 = std::move(v);
  return a;
}

ParamArray ParamArray::Text(std::string name, std::string text) {
  ParamArray a;
  a.name = std::move(name);
  a.type = Type::kBytes;
  a.rows = static_cast<int64_t>(text.size());
  a.cols = 1;
  a.bytes = std::move(text);
  return a;
}

StatusOr<std::string> EncodeParams(const std::vector<ParamArray>& arrays) {
  Writer w;
  w.Bytes(kMagic, sizeof(kMagic));
  w.Fixed<uint32_t>(static_cast<uint32_t>(arrays.size()));
  for (const ParamArray& a : arrays) {
    const size_t n = static_cast<size_t>(a.rows * a.cols);
    const size_t have = a.type == ParamArray::Type::kFloat32 ? a.f32.size()
                        : a.type == ParamArray::Type::kInt64 ? a.i64.size()
                                                             : a.bytes.size();
    if (have != n) return Status::InvalidArgument("param array " + a.name + ": size disagrees with its shape");
    w.Fixed<uint32_t>(static_cast<uint32_t>(a.name.size()));
    w.Bytes(a.name.data(), a.name.size());
    w.Fixed<uint8_t>(static_cast<uint8_t>(a.type));
    w.Fixed<uint64_t>(static_cast<uint64_t>(a.rows));
    w.Fixed<uint64_t>(static_cast<uint64_t>(a.cols));
    // x86 and Arm are little-endian, which is the format's order.
    if (a.type == ParamArray::Type::kFloat32) w.Bytes(a.f32.data(), n * 4);
    if (a.type == ParamArray::Type::kInt64) w.Bytes(a.i64.data(), n * 8);
    if (a.type == ParamArray::Type::kBytes) w.Bytes(a.bytes.data(), n);
  }
  w.Fixed<uint32_t>(Crc32(w.buf().data(), w.buf().size()));
  return std::move(w.buf());
}

Status WriteParamFile(const std::string& path, const std::vector<ParamArray>& arrays) {
  TESSERA_ASSIGN_OR_RETURN(std::string bytes, EncodeParams(arrays));
  return ReplaceFile(path, bytes);
}

StatusOr<std::vector<ParamArray>> ReadParamFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return DecodeParams(data, path);
}

bool HasParamsMagic(const std::string& data) {
  return data.size() >= sizeof(kMagic) && std::memcmp(data.data(), kMagic, sizeof(kMagic)) == 0;
}

StatusOr<std::vector<ParamArray>> DecodeParams(const std::string& data, const std::string& path) {
  if (data.size() < sizeof(kMagic) + 8 || !HasParamsMagic(data)) {
    return Status::DataLoss(path + ": not a Tessera parameter file");
  }
  const size_t body = data.size() - 4;
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(data[body + i]);
  if (Crc32(data.data(), body) != stored) return Status::DataLoss(path + ": checksum mismatch (truncated or damaged)");
  Reader r(data, body);
  char magic[8];
  (void)r.Bytes(magic, 8);
  uint32_t count = 0;
  if (!r.Fixed(&count)) return Status::DataLoss(path + ": truncated");
  std::vector<ParamArray> out;
  for (uint32_t i = 0; i < count; ++i) {
    ParamArray a;
    uint32_t name_len = 0;
    uint8_t type = 0;
    uint64_t rows = 0, cols = 0;
    if (!r.Fixed(&name_len) || name_len > r.remaining()) return Status::DataLoss(path + ": truncated entry");
    a.name.resize(name_len);
    if (!r.Bytes(a.name.data(), name_len) || !r.Fixed(&type) || !r.Fixed(&rows) || !r.Fixed(&cols) || type > 2) {
      return Status::DataLoss(path + ": bad entry header");
    }
    a.type = static_cast<ParamArray::Type>(type);
    const size_t esize = type == 0 ? 4 : type == 1 ? 8 : 1;
    if (cols != 0 && rows > r.remaining() / esize / cols) return Status::DataLoss(path + ": entry larger than the file");
    a.rows = static_cast<int64_t>(rows);
    a.cols = static_cast<int64_t>(cols);
    const size_t n = rows * cols;
    if (type == 0) {
      a.f32.resize(n);
      (void)r.Bytes(a.f32.data(), n * 4);
    } else if (type == 1) {
      a.i64.resize(n);
      (void)r.Bytes(a.i64.data(), n * 8);
    } else {
      a.bytes.resize(n);
      (void)r.Bytes(a.bytes.data(), n);
    }
    out.push_back(std::move(a));
  }
  // The count covers every entry: bytes beyond them would be entries the
  // reader silently dropped.
  if (r.remaining() != 0) {
    return Status::DataLoss(path + ": " + std::to_string(r.remaining()) + " bytes after its " + std::to_string(count) +
                            " entries");
  }
  return out;
}

const ParamArray* FindParam(const std::vector<ParamArray>& arrays, const std::string& name) {
  for (const ParamArray& a : arrays) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

}  // namespace tessera
