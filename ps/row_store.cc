#include "ps/row_store.h"

#include <cstring>

namespace tessera {

Status RowStore::Gather(std::span<const int64_t> ids, float* out) {
  const int cols = gather_cols();
  return Read(ids, [&](const float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * cols, rows[i], sizeof(float) * cols);
  });
}

}  // namespace tessera
