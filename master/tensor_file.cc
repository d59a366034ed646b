#include "master/tensor_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

namespace tessera {
namespace {

int64_t ElementBytes(TensorDtype dtype) { return dtype == TensorDtype::kI64 ? 8 : 4; }

void AppendLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

Status WriteAll(int fd, const std::string& path, const void* data, int64_t bytes, int64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t k = pwrite(fd, p, static_cast<size_t>(bytes), offset);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      return ErrnoStatus("cannot write " + path);
    }
    p += k;
    bytes -= k;
    offset += k;
  }
  return Status::OK();
}

}  // namespace

Status ParseTensorFormat(const std::string& name, TensorFormat* out) {
  if (name == "safetensors") {
    *out = TensorFormat::kSafetensors;
  } else if (name == "npy") {
    *out = TensorFormat::kNpy;
  } else {
    return Status::InvalidArgument("unknown format '" + name + "': use safetensors or npy");
  }
  return Status::OK();
}

int64_t TensorSpec::Elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorSpec::Bytes() const { return Elements() * ElementBytes(dtype); }

std::string SafetensorsHeader(const std::vector<TensorSpec>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // ordered_json: the tensors appear in file order, for people reading it.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    header[t.name] = {{"dtype", t.dtype == TensorDtype::kI64 ? "I64" : "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.Bytes()}}};
    offset += t.Bytes();
  }
  std::string text = header.dump();
  // The data starts 8-byte aligned, as safetensors' own writer leaves it.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  AppendLe(&out, text.size(), 8);
  return out + text;
}

std::string NpyHeader(const TensorSpec& tensor) {
  std::string shape = "(";
  for (int64_t d : tensor.shape) shape += std::to_string(d) + ", ";
  if (tensor.shape.size() == 1) {
    shape.pop_back();  // "(5,)": a one-tuple keeps its comma
  } else if (!tensor.shape.empty()) {
    shape.resize(shape.size() - 2);
  }
  shape += ")";
  std::string dict = std::string("{'descr': '") + (tensor.dtype == TensorDtype::kI64 ? "<i8" : "<f4") +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2 in v1, 4 in v2), then the dict and
  // its '\n', padded so the data starts at a multiple of 64.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  AppendLe(&out, dict.size(), v2 ? 4 : 2);
  return out + dict;
}

StatusOr<std::unique_ptr<TensorWriter>> TensorWriter::Create(TensorFormat format, const std::string& dir,
                                                              const std::string& stem, std::vector<TensorSpec> tensors,
                                                              const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<TensorWriter> w(new TensorWriter());
  w->format_ = format;
  w->stem_ = stem;
  w->tensors_ = std::move(tensors);
  // One file and its header, sized to hold `data_bytes` after the header.
  auto create_file = [&](const std::string& name, const std::string& header, int64_t data_bytes) -> StatusOr<int> {
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("cannot create " + path);
    w->fds_.push_back(fd);
    w->paths_.push_back(path);
    TESSERA_RETURN_IF_ERROR(WriteAll(fd, path, header.data(), static_cast<int64_t>(header.size()), 0));
    // Sized up front: a file the disk cannot hold fails here, not half-way.
    if (ftruncate(fd, static_cast<off_t>(header.size()) + data_bytes) != 0) {
      return Status::ResourceExhausted("cannot size " + path + ": " + std::strerror(errno));
    }
    return fd;
  };
  if (format == TensorFormat::kSafetensors) {
    const std::string header = SafetensorsHeader(w->tensors_, metadata);
    int64_t data = 0;
    for (const TensorSpec& t : w->tensors_) data += t.Bytes();
    TESSERA_RETURN_IF_ERROR(create_file(stem + ".safetensors", header, data).status());
    int64_t offset = static_cast<int64_t>(header.size());
    for (const TensorSpec& t : w->tensors_) {
      w->places_.push_back({0, offset, 0});
      offset += t.Bytes();
    }
  } else {
    for (const TensorSpec& t : w->tensors_) {
      if (t.name.find('/') != std::string::npos) return Status::InvalidArgument("tensor name with '/': " + t.name);
      const std::string header = NpyHeader(t);
      TESSERA_RETURN_IF_ERROR(create_file(t.name + ".npy", header, t.Bytes()).status());
      w->places_.push_back({w->fds_.size() - 1, static_cast<int64_t>(header.size()), 0});
    }
  }
  return w;
}

TensorWriter::~TensorWriter() {
  for (int fd : fds_) close(fd);
}

std::string TensorWriter::FileOf(size_t index) const {
  return format_ == TensorFormat::kSafetensors ? stem_ + ".safetensors" : tensors_[index].name + ".npy";
}

Status TensorWriter::Write(size_t index, int64_t first, const void* data, int64_t count) {
  CHECK_LT(index, tensors_.size());
  const TensorSpec& t = tensors_[index];
  CHECK(first >= 0 && count >= 0 && first + count <= t.Elements()) << t.name << ": [" << first << ", "
                                                                     << first + count << ") out of range";
  Place& p = places_[index];
  const int64_t unit = ElementBytes(t.dtype);
  TESSERA_RETURN_IF_ERROR(WriteAll(fds_[p.file], paths_[p.file], data, count * unit, p.offset + first * unit));
  p.written += count;
  return Status::OK();
}

Status TensorWriter::Finish() {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (places_[i].written != tensors_[i].Elements()) {
      return Status::Internal("tensor " + tensors_[i].name + ": " + std::to_string(places_[i].written) + " of " +
                              std::to_string(tensors_[i].Elements()) + " elements written");
    }
  }
  Status st;
  for (size_t f = 0; f < fds_.size(); ++f) {
    if (fsync(fds_[f]) != 0 && st.ok()) st = ErrnoStatus("cannot flush " + paths_[f] + " to disk");
    if (close(fds_[f]) != 0 && st.ok()) st = ErrnoStatus("cannot close " + paths_[f]);
  }
  fds_.clear();
  return st;
}

}  // namespace tessera
