// EmbeddingBagForwardCpu / EmbeddingBagBackwardCpu against a naive reference
// that accumulates in double. Outputs (and the rows' padding past `dim`) are
// NaN-poisoned, so an element left unwritten, or one read from the padding,
// fails; a NaN guard after each output catches writes past its end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/embedding_bag.h"

namespace tessera::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kGuard = 67;  // poisoned floats after every output
constexpr double kRoundingSlack = 2.0 / (1 << 24);

// Table, ids and bags of one test case. Bags: empty ones (first, last and in
// between), short random ones, and one of 3,000 ids; few rows, so ids repeat.
struct BagData {
  int64_t num_rows = 0;
  int dim = 0;
  int64_t row_stride = 0;
  std::vector<float> rows;  // padding past dim is NaN
  std::vector<int64_t> ids;
  std::vector<int64_t> offsets;
  std::vector<float> weights;
};

BagData MakeBagData(std::mt19937_64& rng, int64_t num_rows, int dim, int64_t row_stride) {
  BagData d;
  d.num_rows = num_rows;
  d.dim = dim;
  d.row_stride = row_stride;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  d.rows.assign(num_rows * row_stride, kNaN);
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int j = 0; j < dim; ++j) d.rows[r * row_stride + j] = value(rng);
  }
  std::vector<int64_t> lengths = {0, 1, 3000, 0};
  std::uniform_int_distribution<int64_t> length(0, 30);
  for (int i = 0; i < 40; ++i) lengths.push_back(length(rng));
  std::shuffle(lengths.begin() + 1, lengths.end(), rng);
  lengths.push_back(0);
  std::uniform_int_distribution<int64_t> id(0, num_rows - 1);
  d.offsets.push_back(0);
  for (int64_t len : lengths) {
    for (int64_t i = 0; i < len; ++i) d.ids.push_back(id(rng));
    d.offsets.push_back(static_cast<int64_t>(d.ids.size()));
  }
  d.ids[0] = 0;  // both ends of the table are used
  d.ids[1] = num_rows - 1;
  for (size_t i = 0; i < d.ids.size(); ++i) d.weights.push_back(value(rng) * 2.0f);
  return d;
}

int64_t NumBags(const BagData& d) { return static_cast<int64_t>(d.offsets.size()) - 1; }

double RefScale(Pooling pooling, int64_t len) { return pooling == Pooling::kMean && len > 0 ? 1.0 / len : 1.0; }

// Expected value and an error bound per element. The bound is the first-order
// one for a float sum, one rounding per id: 2^-24 * sum of |partial sums|, with
// a factor 2 of slack. Loose for the bag of 3,000 ids; the dyadic test below
// checks that bag exactly.
struct Expected {
  std::vector<double> value;
  std::vector<double> tolerance;
};

Expected ReferenceForward(const BagData& d, bool weighted, Pooling pooling) {
  const int64_t num_ids = static_cast<int64_t>(d.ids.size());
  const int64_t num_out = pooling == Pooling::kNone ? num_ids : NumBags(d);
  Expected e;
  e.value.assign(num_out * d.dim, 0.0);
  e.tolerance.assign(num_out * d.dim, 1e-7);
  for (int64_t b = 0; b < NumBags(d); ++b) {
    const int64_t len = d.offsets[b + 1] - d.offsets[b];
    for (int64_t i = d.offsets[b]; i < d.offsets[b + 1]; ++i) {
      const int64_t o = pooling == Pooling::kNone ? i : b;
      const double scale = pooling == Pooling::kNone ? 1.0 : RefScale(pooling, len);
      const double w = weighted ? d.weights[i] : 1.0;
      for (int j = 0; j < d.dim; ++j) {
        const double term = scale * w * d.rows[d.ids[i] * d.row_stride + j];
        e.value[o * d.dim + j] += term;
        e.tolerance[o * d.dim + j] += kRoundingSlack * std::fabs(e.value[o * d.dim + j]);
      }
    }
  }
  return e;
}

Expected ReferenceBackward(const BagData& d, const std::vector<float>& grad_out, bool weighted, Pooling pooling) {
  Expected e;
  e.value.assign(d.num_rows * d.dim, 0.0);
  e.tolerance.assign(d.num_rows * d.dim, 1e-7);
  for (int64_t b = 0; b < NumBags(d); ++b) {
    const int64_t len = d.offsets[b + 1] - d.offsets[b];
    for (int64_t i = d.offsets[b]; i < d.offsets[b + 1]; ++i) {
      const int64_t o = pooling == Pooling::kNone ? i : b;
      const double scale = pooling == Pooling::kNone ? 1.0 : RefScale(pooling, len);
      const double w = weighted ? d.weights[i] : 1.0;
      for (int j = 0; j < d.dim; ++j) {
        const double term = scale * w * grad_out[o * d.dim + j];
        e.value[d.ids[i] * d.dim + j] += term;
        e.tolerance[d.ids[i] * d.dim + j] += kRoundingSlack * std::fabs(e.value[d.ids[i] * d.dim + j]);
      }
    }
  }
  return e;
}

// Checks got[0, n) against e and that the guard after it is still NaN.
void ExpectMatches(const std::vector<float>& got, const Expected& e) {
  const size_t n = e.value.size();
  ASSERT_EQ(got.size(), n + kGuard);
  int failures = 0;
  for (size_t k = 0; k < n && failures < 5; ++k) {
    if (!(std::fabs(got[k] - e.value[k]) <= e.tolerance[k])) {
      ADD_FAILURE() << "element " << k << ": got " << got[k] << ", want " << e.value[k] << " +- " << e.tolerance[k];
      ++failures;
    }
  }
  for (int64_t k = 0; k < kGuard; ++k) ASSERT_TRUE(std::isnan(got[n + k])) << "wrote past the end, at +" << k;
}

template <typename Index>
std::vector<Index> Cast(const std::vector<int64_t>& ids) {
  return std::vector<Index>(ids.begin(), ids.end());
}

// With row_ptrs, the forward reads row k at row_ptrs[k] and is given neither
// d.rows nor a stride.
template <typename Index>
std::vector<float> RunForward(const BagData& d, const std::vector<Index>& ids, bool weighted, Pooling pooling,
                              const float* const* row_ptrs = nullptr) {
  const int64_t num_out = pooling == Pooling::kNone ? static_cast<int64_t>(ids.size()) : NumBags(d);
  std::vector<float> out(num_out * d.dim + kGuard, kNaN);
  EmbeddingBagForwardArgs<Index> a;
  a.rows = row_ptrs == nullptr ? d.rows.data() : nullptr;
  a.row_ptrs = row_ptrs;
  a.num_rows = d.num_rows;
  a.row_stride = row_ptrs == nullptr ? d.row_stride : 0;
  a.dim = d.dim;
  a.indices = ids.data();
  a.offsets = d.offsets.data();
  a.num_bags = NumBags(d);
  a.weights = weighted ? d.weights.data() : nullptr;
  a.pooling = pooling;
  a.out = out.data();
  EmbeddingBagForwardCpu(a);
  return out;
}

template <typename Index>
std::vector<float> RunBackward(const BagData& d, const std::vector<Index>& ids, const std::vector<float>& grad_out,
                               bool weighted, Pooling pooling) {
  std::vector<float> grad_rows(d.num_rows * d.dim + kGuard, kNaN);
  EmbeddingBagBackwardArgs<Index> a;
  a.grad_out = grad_out.data();
  a.dim = d.dim;
  a.indices = ids.data();
  a.offsets = d.offsets.data();
  a.num_bags = NumBags(d);
  a.weights = weighted ? d.weights.data() : nullptr;
  a.pooling = pooling;
  a.num_rows = d.num_rows;
  a.grad_rows = grad_rows.data();
  EmbeddingBagBackwardCpu(a);
  return grad_rows;
}

const int kDims[] = {1, 4, 16, 32, 64, 128, 129};
const Pooling kPoolings[] = {Pooling::kSum, Pooling::kMean, Pooling::kNone};

template <typename Index>
class EmbeddingBagTest : public ::testing::Test {};
using IndexTypes = ::testing::Types<int32_t, int64_t>;
TYPED_TEST_SUITE(EmbeddingBagTest, IndexTypes);

TYPED_TEST(EmbeddingBagTest, ForwardMatchesReference) {
  std::mt19937_64 rng(1);
  for (int dim : kDims) {
    for (int64_t pad : {0, 3}) {
      const BagData d = MakeBagData(rng, 97, dim, dim + pad);
      const auto ids = Cast<TypeParam>(d.ids);
      for (bool weighted : {false, true}) {
        for (Pooling pooling : kPoolings) {
          SCOPED_TRACE(::testing::Message() << "dim " << dim << " stride " << dim + pad << " weighted " << weighted
                                            << " pooling " << static_cast<int>(pooling));
          ExpectMatches(RunForward(d, ids, weighted, pooling), ReferenceForward(d, weighted, pooling));
        }
      }
    }
  }
}

TYPED_TEST(EmbeddingBagTest, BackwardMatchesReference) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int dim : kDims) {
    const BagData d = MakeBagData(rng, 97, dim, dim);
    const auto ids = Cast<TypeParam>(d.ids);
    for (bool weighted : {false, true}) {
      for (Pooling pooling : kPoolings) {
        SCOPED_TRACE(::testing::Message()
                     << "dim " << dim << " weighted " << weighted << " pooling " << static_cast<int>(pooling));
        const int64_t num_out = pooling == Pooling::kNone ? static_cast<int64_t>(ids.size()) : NumBags(d);
        std::vector<float> grad_out(num_out * dim);
        for (float& g : grad_out) g = value(rng);
        ExpectMatches(RunBackward(d, ids, grad_out, weighted, pooling),
                      ReferenceBackward(d, grad_out, weighted, pooling));
      }
    }
  }
}

// Values that are multiples of 2^-9 in [-1, 1] and weights in {-2, ..., 2}:
// every partial sum of the 3,000-id bag fits in a float's 24 bits, so sum
// pooling is exact whatever the order, and one id too many or too few shows.
TYPED_TEST(EmbeddingBagTest, ExactOnDyadicValues) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> k(-512, 512);
  std::uniform_int_distribution<int> w(-2, 2);
  for (int dim : {4, 64, 129}) {
    BagData d = MakeBagData(rng, 97, dim, dim + 1);
    for (int64_t r = 0; r < d.num_rows; ++r) {
      for (int j = 0; j < dim; ++j) d.rows[r * d.row_stride + j] = k(rng) / 512.0f;
    }
    for (float& x : d.weights) x = static_cast<float>(w(rng));
    const auto ids = Cast<TypeParam>(d.ids);
    for (bool weighted : {false, true}) {
      for (Pooling pooling : {Pooling::kSum, Pooling::kNone}) {
        SCOPED_TRACE(::testing::Message()
                     << "dim " << dim << " weighted " << weighted << " pooling " << static_cast<int>(pooling));
        Expected fwd = ReferenceForward(d, weighted, pooling);
        std::fill(fwd.tolerance.begin(), fwd.tolerance.end(), 0.0);
        ExpectMatches(RunForward(d, ids, weighted, pooling), fwd);
        const int64_t num_out = pooling == Pooling::kNone ? static_cast<int64_t>(ids.size()) : NumBags(d);
        std::vector<float> grad_out(num_out * dim);
        for (float& g : grad_out) g = k(rng) / 512.0f;
        Expected bwd = ReferenceBackward(d, grad_out, weighted, pooling);
        std::fill(bwd.tolerance.begin(), bwd.tolerance.end(), 0.0);
        ExpectMatches(RunBackward(d, ids, grad_out, weighted, pooling), bwd);
      }
    }
  }
}

// The dims with a specialized (register-blocked, AVX2) path give the same bits
// as the generic per-element path: run dim D (specialized) and D + 1 (generic)
// on the same rows and compare the first D columns.
TYPED_TEST(EmbeddingBagTest, SpecializedDimsMatchGenericPathBitwise) {
  std::mt19937_64 rng(6);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int dim : {16, 32, 64, 128}) {
    BagData wide = MakeBagData(rng, 97, dim + 1, dim + 5);
    BagData narrow = wide;
    narrow.dim = dim;
    const auto ids = Cast<TypeParam>(wide.ids);
    for (bool weighted : {false, true}) {
      for (Pooling pooling : kPoolings) {
        SCOPED_TRACE(::testing::Message()
                     << "dim " << dim << " weighted " << weighted << " pooling " << static_cast<int>(pooling));
        const int64_t num_out = pooling == Pooling::kNone ? static_cast<int64_t>(ids.size()) : NumBags(wide);
        const auto fwd_wide = RunForward(wide, ids, weighted, pooling);
        const auto fwd_narrow = RunForward(narrow, ids, weighted, pooling);
        std::vector<float> grad_wide(num_out * (dim + 1)), grad_narrow(num_out * dim);
        for (int64_t o = 0; o < num_out; ++o) {
          for (int j = 0; j <= dim; ++j) grad_wide[o * (dim + 1) + j] = value(rng);
          for (int j = 0; j < dim; ++j) grad_narrow[o * dim + j] = grad_wide[o * (dim + 1) + j];
        }
        const auto bwd_wide = RunBackward(wide, ids, grad_wide, weighted, pooling);
        const auto bwd_narrow = RunBackward(narrow, ids, grad_narrow, weighted, pooling);
        for (int64_t o = 0; o < num_out; ++o) {
          ASSERT_EQ(0, std::memcmp(&fwd_wide[o * (dim + 1)], &fwd_narrow[o * dim], dim * sizeof(float))) << o;
        }
        for (int64_t r = 0; r < wide.num_rows; ++r) {
          ASSERT_EQ(0, std::memcmp(&bwd_wide[r * (dim + 1)], &bwd_narrow[r * dim], dim * sizeof(float))) << r;
        }
      }
    }
  }
}

// Rows given by pointers pool to the same bits as the same rows in an array:
// pointers into the array itself; to copies of the rows scattered over a
// buffer in shuffled order, at odd float offsets (not 32-byte aligned) with NaN
// between them, so a read past a row's `dim` floats shows; and to copies in
// allocations of exactly `dim` floats each (an overread fails under ASan).
TYPED_TEST(EmbeddingBagTest, RowPointersMatchArrayPathBitwise) {
  std::mt19937_64 rng(8);
  for (int dim : kDims) {
    const BagData d = MakeBagData(rng, 97, dim, dim + 3);  // the array path reads padded rows
    const auto ids = Cast<TypeParam>(d.ids);
    std::vector<const float*> in_place(d.num_rows);
    for (int64_t r = 0; r < d.num_rows; ++r) in_place[r] = d.rows.data() + r * d.row_stride;

    std::vector<int64_t> slot(d.num_rows);
    std::iota(slot.begin(), slot.end(), 0);
    std::shuffle(slot.begin(), slot.end(), rng);
    const int64_t spacing = dim + 5;  // 5 NaNs after every row, and an odd start
    std::vector<float> scattered(d.num_rows * spacing + 1, kNaN);
    std::vector<const float*> elsewhere(d.num_rows);
    for (int64_t r = 0; r < d.num_rows; ++r) {
      float* copy = scattered.data() + 1 + slot[r] * spacing;
      std::memcpy(copy, d.rows.data() + r * d.row_stride, dim * sizeof(float));
      elsewhere[r] = copy;
    }

    std::vector<std::vector<float>> own(d.num_rows);
    std::vector<const float*> separate(d.num_rows);
    for (int64_t r = 0; r < d.num_rows; ++r) {
      own[r].assign(d.rows.begin() + r * d.row_stride, d.rows.begin() + r * d.row_stride + dim);
      separate[r] = own[r].data();
    }

    for (bool weighted : {false, true}) {
      for (Pooling pooling : kPoolings) {
        SCOPED_TRACE(::testing::Message()
                     << "dim " << dim << " weighted " << weighted << " pooling " << static_cast<int>(pooling));
        const auto want = RunForward(d, ids, weighted, pooling);
        for (const auto* ptrs : {&in_place, &elsewhere, &separate}) {
          const auto got = RunForward(d, ids, weighted, pooling, ptrs->data());
          ASSERT_EQ(got.size(), want.size());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), (got.size() - kGuard) * sizeof(float)));
          for (int64_t k = 0; k < kGuard; ++k) ASSERT_TRUE(std::isnan(got[got.size() - kGuard + k]));
        }
      }
    }
  }
}

// The backward's usual input, an inverse index after deduplication: rows are
// first reached in increasing order (each row's first id writes it without
// reading it), and the last rows are never reached (still zeroed).
TYPED_TEST(EmbeddingBagTest, BackwardOnFirstSeenOrderMatchesReference) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int dim : {4, 64, 129}) {
    BagData d = MakeBagData(rng, 97, dim, dim);
    std::vector<int64_t> position(d.num_rows, -1);
    int64_t next = 0;
    for (int64_t& id : d.ids) {
      if (position[id] < 0) position[id] = next++;
      id = position[id];
    }
    d.num_rows = next + 3;
    const auto ids = Cast<TypeParam>(d.ids);
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " weighted " << weighted);
      std::vector<float> grad_out(NumBags(d) * dim);
      for (float& g : grad_out) g = value(rng);
      ExpectMatches(RunBackward(d, ids, grad_out, weighted, Pooling::kMean),
                    ReferenceBackward(d, grad_out, weighted, Pooling::kMean));
    }
  }
}

// Rows no id points at get exact zeros (grad_rows is fully overwritten).
TYPED_TEST(EmbeddingBagTest, BackwardZeroesUntouchedRows) {
  std::mt19937_64 rng(3);
  BagData d = MakeBagData(rng, 50, 8, 8);
  d.num_rows = 200;  // rows 50..199 are never referenced
  const auto ids = Cast<TypeParam>(d.ids);
  const std::vector<float> grad_out(NumBags(d) * d.dim, 1.0f);
  const std::vector<float> grad_rows = RunBackward(d, ids, grad_out, true, Pooling::kSum);
  for (int64_t k = 50 * d.dim; k < 200 * d.dim; ++k) ASSERT_EQ(grad_rows[k], 0.0f) << k;
}

// Same inputs, same bits; and weights of 1 give the unweighted bits exactly
// (the GPU kernels are held to the same).
TYPED_TEST(EmbeddingBagTest, DeterministicAndUnitWeightsExact) {
  std::mt19937_64 rng(4);
  for (int dim : {16, 129}) {
    BagData d = MakeBagData(rng, 97, dim, dim);
    const auto ids = Cast<TypeParam>(d.ids);
    std::vector<float> grad_out(NumBags(d) * dim);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (float& g : grad_out) g = value(rng);
    const auto fwd = RunForward(d, ids, false, Pooling::kMean);
    const auto bwd = RunBackward(d, ids, grad_out, false, Pooling::kMean);
    EXPECT_EQ(0, std::memcmp(bwd.data(), RunBackward(d, ids, grad_out, false, Pooling::kMean).data(),
                             (bwd.size() - kGuard) * sizeof(float)));
    std::fill(d.weights.begin(), d.weights.end(), 1.0f);
    EXPECT_EQ(0, std::memcmp(fwd.data(), RunForward(d, ids, true, Pooling::kMean).data(),
                             (fwd.size() - kGuard) * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(bwd.data(), RunBackward(d, ids, grad_out, true, Pooling::kMean).data(),
                             (bwd.size() - kGuard) * sizeof(float)));
  }
}

TYPED_TEST(EmbeddingBagTest, NoBags) {
  BagData d;
  d.num_rows = 3;
  d.dim = 4;
  d.row_stride = 4;
  d.rows.assign(12, 1.0f);
  d.offsets = {0};
  const std::vector<TypeParam> ids;
  for (Pooling pooling : kPoolings) {
    const auto out = RunForward(d, ids, false, pooling);
    for (int64_t k = 0; k < kGuard; ++k) ASSERT_TRUE(std::isnan(out[k]));
    const auto grad_rows = RunBackward(d, ids, {}, false, pooling);
    for (int k = 0; k < 12; ++k) ASSERT_EQ(grad_rows[k], 0.0f);
  }
}

}  // namespace
}  // namespace tessera::kernels
