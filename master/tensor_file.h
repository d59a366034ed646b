// Tensor files that PyTorch and NumPy read, written by hand and streamed:
// every header is computed from the tensors' shapes before any data, the
// file is sized once, and the data is then written piece by piece at its
// place (pwrite), so a tensor larger than memory is never held whole.
//
// safetensors (https://huggingface.co/docs/safetensors), one file for all:
//   File   := n:u64 LE | header: n bytes of JSON | data
//   header := {"__metadata__": {str: str}, name: {"dtype": "F32"|"I64",
//              "shape": [int], "data_offsets": [begin, end]}, ...}
//             padded with spaces so that 8 + n is a multiple of 8; offsets
//             are relative to the start of data; the tensors lie back to
//             back in the order given, covering data exactly.
// npy (numpy.lib.format), one file per tensor:
//   File   := "\x93NUMPY" major:u8 minor:u8 len:(u16 v1 | u32 v2) LE |
//             dict "{'descr': '<f4'|'<i8', 'fortran_order': False,
//             'shape': (...), }" padded with spaces and ended by '\n' so that
//             the data starts at a multiple of 64 | data, row-major, LE
//   v2 only when the dict does not fit a u16 length.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

enum class TensorDtype : uint8_t { kF32 = 0, kI64 = 1 };
enum class TensorFormat : uint8_t { kSafetensors = 0, kNpy = 1 };

// "safetensors" or "npy"; InvalidArgument naming both otherwise.
Status ParseTensorFormat(const std::string& name, TensorFormat* out);

struct TensorSpec {
  std::string name;
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<int64_t> shape;  // empty: a scalar

  int64_t Elements() const;
  int64_t Bytes() const;
};

// The bytes before the data, exactly as written (tests read them back).
std::string SafetensorsHeader(const std::vector<TensorSpec>& tensors,
                              const std::map<std::string, std::string>& metadata);
std::string NpyHeader(const TensorSpec& tensor);

// Writes a group of tensors into `dir`: safetensors as dir/<stem>.safetensors,
// npy as dir/<tensor name>.npy each. Not thread-safe.
class TensorWriter {
 public:
  // Creates the files (which must not exist), writes the headers and sizes
  // the files. Tensor names must be unique and, for npy, usable as file names
  // (no '/'). metadata: safetensors' "__metadata__" (npy has none).
  static StatusOr<std::unique_ptr<TensorWriter>> Create(TensorFormat format, const std::string& dir,
                                                        const std::string& stem, std::vector<TensorSpec> tensors,
                                                        const std::map<std::string, std::string>& metadata);
  ~TensorWriter();
  TensorWriter(const TensorWriter&) = delete;
  TensorWriter& operator=(const TensorWriter&) = delete;

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // The file (name in dir) that holds tensor `index`.
  std::string FileOf(size_t index) const;

  // Writes `count` elements of tensor `index`, from element `first` on
  // (row-major). REQUIRES: the range lies inside the tensor (else a CHECK:
  // the caller sized it). Writes are not ordered; each element once.
  Status Write(size_t index, int64_t first, const void* data, int64_t count);

  // Flushes every file to disk and closes them. Internal when some tensor
  // did not get all its elements (a caller's mistake, reported not crashed:
  // the files would silently hold zeros).
  Status Finish();

 private:
  TensorWriter() = default;

  struct Place {
    size_t file = 0;      // index into fds_ and paths_
    int64_t offset = 0;   // of the tensor's first byte in its file
    int64_t written = 0;  // elements written so far
  };
  TensorFormat format_ = TensorFormat::kSafetensors;
  std::string stem_;
  std::vector<TensorSpec> tensors_;
  std::vector<Place> places_;
  std::vector<int> fds_;
  std::vector<std::string> paths_;  // by fd index, for messages
};

}  // namespace tessera
