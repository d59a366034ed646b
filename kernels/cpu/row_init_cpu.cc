// A row's initial values: the loop over InitValue (kernels/row_init.h), with
// a normal row's Box-Muller pairs drawn from one RowKey per row. In the
// kernels library for its flags: -O3 and no errno, under which the pairs'
// loop vectorizes (128 against 830 ns for a row of 64 normal floats with
// libm's logf and sincosf, on the dev host).
#include "kernels/row_init.h"

namespace tessera::kernels {

void InitRow(const RowInitializer& init, int64_t row, int64_t col_begin, int dim, float* out) {
  if (init.kind != InitKind::kNormal) {
    for (int j = 0; j < dim; ++j) out[j] = InitValue(init, row, col_begin + j);
    return;
  }
  int j = 0;
  if (col_begin & 1) {  // a column slice that starts on an odd column
    out[j] = InitValue(init, row, col_begin);
    ++j;
  }
  const uint64_t key = RowKey(init.seed, row);
  for (; j + 1 < dim; j += 2) NormalPairOfKey(init.a, init.b, key, (col_begin + j) >> 1, &out[j], &out[j + 1]);
  if (j < dim) out[j] = InitValue(init, row, col_begin + j);
}

}  // namespace tessera::kernels
