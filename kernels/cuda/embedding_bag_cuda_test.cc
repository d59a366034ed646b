// EmbeddingBagForwardCuda / EmbeddingBagBackwardCuda against the CPU kernels
// on fresh random inputs: few rows (ids repeat; a few rows get thousands of
// ids, past kBackwardSegmentIds), empty bags first, last and between, a bag of
// 10,000 ids; dims 1, 4, 64, 129, 256; every pooling, weights on and off, both
// index types, rows strided (aligned for 16-byte loads or not) and through
// pointers (some rows misaligned). Outputs are NaN-poisoned with a poisoned
// guard after them, so an unwritten element or a write past the end fails.
//
// Held to what embedding_bag_cuda.h promises: the forward bit for bit (it
// sums each bag in the CPU's order), and the backward bit for bit in every
// row of at most kBackwardSegmentIds ids. A longer row is summed in chunks
// and so in another order than the CPU's: it is held to the error bound of
// two float sums of the same n terms in different orders, each off by at
// most (its dependent additions) * 2^-24 * (the sum of the terms'
// magnitudes): n for the CPU's sequential sum, kBackwardSegmentIds plus the
// number of chunks for the GPU's. The tests print how many elements matched
// bit for bit.
#include "kernels/cuda/embedding_bag_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "kernels/cuda/test_util_cuda.h"
#include "kernels/embedding_bag.h"

namespace tessera::kernels {
namespace {

constexpr int64_t kGuard = 64;
constexpr int kDims[] = {1, 4, 64, 129, 256};
constexpr Pooling kPoolings[] = {Pooling::kSum, Pooling::kMean, Pooling::kNone};
enum class RowMode { kStridedAligned, kStridedOdd, kPointers };

struct Bags {
  int64_t num_rows = 0;
  std::vector<int64_t> ids;
  std::vector<int64_t> offsets;
  std::vector<float> weights;
  int64_t num_bags() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t num_ids() const { return static_cast<int64_t>(ids.size()); }
};

// Ids in [0, used_rows) of num_rows: 30% on rows 0..2 (thousands of ids each,
// so the backward's long-row path runs), the rest uniform.
Bags MakeBags(std::mt19937_64& rng, int64_t num_rows, int64_t used_rows) {
  Bags b;
  b.num_rows = num_rows;
  std::vector<int64_t> lengths = {1, 10000, 0, 0, 3};
  std::uniform_int_distribution<int64_t> length(0, 40);
  for (int i = 0; i < 60; ++i) lengths.push_back(length(rng));
  std::shuffle(lengths.begin(), lengths.end(), rng);
  lengths.insert(lengths.begin(), 0);  // empty first and last bags
  lengths.push_back(0);
  std::uniform_int_distribution<int64_t> any(0, used_rows - 1), hot(0, 2);
  std::bernoulli_distribution is_hot(0.3);
  std::uniform_real_distribution<float> weight(-2.0f, 2.0f);
  b.offsets.push_back(0);
  for (int64_t len : lengths) {
    for (int64_t i = 0; i < len; ++i) {
      b.ids.push_back(is_hot(rng) ? hot(rng) : any(rng));
      b.weights.push_back(weight(rng));
    }
    b.offsets.push_back(b.num_ids());
  }
  return b;
}

std::vector<float> RandomFloats(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

template <typename Index>
std::vector<Index> Narrow(const std::vector<int64_t>& ids) {
  return std::vector<Index>(ids.begin(), ids.end());
}

double Scale(Pooling pooling, int64_t len) { return pooling == Pooling::kMean && len > 0 ? 1.0 / len : 1.0; }

// Compares got (with kGuard poisoned floats after it) against the CPU's want,
// element i within tolerance[i] (0: bit for bit). Returns the number of
// elements equal bit for bit.
int64_t ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                    const std::vector<double>& tolerance) {
  int64_t bitwise = 0, failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) {
      ++bitwise;
      continue;
    }
    const double tol = tolerance[i];
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol) && ++failures <= 5) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", CPU " << want[i] << ", tolerance " << tol;
    }
  }
  EXPECT_EQ(failures, 0) << "elements off";
  for (size_t i = want.size(); i < got.size(); ++i) {
    if (!std::isnan(got[i])) {
      ADD_FAILURE() << "write past the end at " << i - want.size();
      break;
    }
  }
  return bitwise;
}

struct Tally {
  int64_t bitwise = 0;
  int64_t total = 0;
};

// Rows on the host and the device, in one of the three layouts.
struct Table {
  std::vector<float> host;  // strided table, or the pool rows are placed in
  DeviceBuffer device;
  int64_t stride = 0;                        // strided modes
  std::vector<int64_t> offset;               // kPointers: row k at pool + offset[k]
  std::vector<const float*> host_ptrs;       // kPointers
  DeviceBuffer device_ptrs;                  // kPointers
};

Table MakeTable(std::mt19937_64& rng, int64_t num_rows, int dim, RowMode mode) {
  Table t;
  const float nan = std::nanf("");
  if (mode != RowMode::kPointers) {
    t.stride = mode == RowMode::kStridedAligned ? (dim + 3) / 4 * 4 + 4 : dim + 1;
    t.host.assign(num_rows * t.stride, nan);
    for (int64_t r = 0; r < num_rows; ++r) {
      const std::vector<float> row = RandomFloats(rng, dim);
      std::copy(row.begin(), row.end(), t.host.begin() + r * t.stride);
    }
    t.device = ToDevice(t.host);
    return t;
  }
  // Rows in reverse order in a pool, every fourth 16-byte aligned, the others
  // 1 to 3 floats off.
  const int64_t slot = (dim + 3) / 4 * 4 + 4;
  t.host.assign(num_rows * slot, nan);
  for (int64_t r = 0; r < num_rows; ++r) {
    t.offset.push_back((num_rows - 1 - r) * slot + r % 4);
    const std::vector<float> row = RandomFloats(rng, dim);
    std::copy(row.begin(), row.end(), t.host.begin() + t.offset.back());
  }
  t.device = ToDevice(t.host);
  std::vector<const float*> device_ptrs;
  for (int64_t off : t.offset) {
    t.host_ptrs.push_back(t.host.data() + off);
    device_ptrs.push_back(t.device.as<float>() + off);
  }
  t.device_ptrs = ToDevice(device_ptrs);
  return t;
}

class EmbeddingBagCudaTest : public CudaTest {
 protected:
  template <typename Index>
  void CheckForward(const Bags& b, const Table& t, int dim, Pooling pooling, bool weighted, Tally* tally) {
    const int64_t num_out = pooling == Pooling::kNone ? b.num_ids() : b.num_bags();
    const std::vector<Index> ids = Narrow<Index>(b.ids);
    EmbeddingBagForwardArgs<Index> cpu;
    cpu.rows = t.stride > 0 ? t.host.data() : nullptr;
    cpu.row_ptrs = t.stride > 0 ? nullptr : t.host_ptrs.data();
    cpu.num_rows = b.num_rows;
    cpu.row_stride = t.stride;
    cpu.dim = dim;
    cpu.indices = ids.data();
    cpu.offsets = b.offsets.data();
    cpu.num_bags = b.num_bags();
    cpu.weights = weighted ? b.weights.data() : nullptr;
    cpu.pooling = pooling;
    std::vector<float> want(num_out * dim);
    cpu.out = want.data();
    EmbeddingBagForwardCpu(cpu);

    DeviceBuffer d_ids = ToDevice(ids), d_offsets = ToDevice(b.offsets), d_weights = ToDevice(b.weights);
    DeviceBuffer d_out = PoisonedDevice<float>(num_out * dim + kGuard);
    EmbeddingBagForwardArgs<Index> gpu = cpu;
    gpu.rows = t.stride > 0 ? t.device.as<float>() : nullptr;
    gpu.row_ptrs = t.stride > 0 ? nullptr : t.device_ptrs.as<const float*>();
    gpu.indices = d_ids.as<Index>();
    gpu.offsets = d_offsets.as<int64_t>();
    gpu.weights = weighted ? d_weights.as<float>() : nullptr;
    gpu.out = d_out.as<float>();
    const Status s = EmbeddingBagForwardCuda(gpu, stream_);
    ASSERT_TRUE(s.ok()) << s;
    Sync();

    // Magnitudes: sum over the bag of |scale * weight * x|.
    tally->bitwise += ExpectClose(ToHost<float>(d_out, num_out * dim + kGuard), want,
                                  std::vector<double>(want.size(), 0.0));
    tally->total += static_cast<int64_t>(want.size());
  }

  template <typename Index>
  void CheckBackward(const Bags& b, int dim, Pooling pooling, bool weighted, Tally* tally) {
    const int64_t num_out = pooling == Pooling::kNone ? b.num_ids() : b.num_bags();
    const std::vector<float> grad_out = RandomFloats(rng_, num_out * dim);
    const std::vector<Index> ids = Narrow<Index>(b.ids);
    EmbeddingBagBackwardArgs<Index> cpu;
    cpu.grad_out = grad_out.data();
    cpu.dim = dim;
    cpu.indices = ids.data();
    cpu.offsets = b.offsets.data();
    cpu.num_bags = b.num_bags();
    cpu.weights = weighted ? b.weights.data() : nullptr;
    cpu.pooling = pooling;
    cpu.num_rows = b.num_rows;
    std::vector<float> want(b.num_rows * dim);
    cpu.grad_rows = want.data();
    EmbeddingBagBackwardCpu(cpu);

    DeviceBuffer d_ids = ToDevice(ids), d_offsets = ToDevice(b.offsets), d_weights = ToDevice(b.weights);
    DeviceBuffer d_grad_out = ToDevice(grad_out);
    DeviceBuffer d_rows = PoisonedDevice<float>(b.num_rows * dim + kGuard);
    EmbeddingBagBackwardArgs<Index> gpu = cpu;
    gpu.grad_out = d_grad_out.as<float>();
    gpu.indices = d_ids.as<Index>();
    gpu.offsets = d_offsets.as<int64_t>();
    gpu.weights = weighted ? d_weights.as<float>() : nullptr;
    gpu.grad_rows = d_rows.as<float>();
    const Status s = EmbeddingBagBackwardCuda(gpu, b.num_ids(), &scratch_, stream_);
    ASSERT_TRUE(s.ok()) << s;
    Sync();

    std::vector<double> magnitude(want.size(), 0.0);
    std::vector<int64_t> count(b.num_rows, 0);
    for (int64_t bag = 0; bag < b.num_bags(); ++bag) {
      const int64_t len = b.offsets[bag + 1] - b.offsets[bag];
      for (int64_t i = b.offsets[bag]; i < b.offsets[bag + 1]; ++i) {
        const int64_t o = pooling == Pooling::kNone ? i : bag;
        const double f = (pooling == Pooling::kNone ? 1.0 : Scale(pooling, len)) * (weighted ? b.weights[i] : 1.0);
        for (int j = 0; j < dim; ++j) magnitude[b.ids[i] * dim + j] += std::fabs(f * grad_out[o * dim + j]);
        ++count[b.ids[i]];
      }
    }
    std::vector<double> tolerance(want.size(), 0.0);
    for (int64_t r = 0; r < b.num_rows; ++r) {
      if (count[r] <= kBackwardSegmentIds) continue;
      const double additions = count[r] + kBackwardSegmentIds + (count[r] + kBackwardSegmentIds - 1) / kBackwardSegmentIds;
      for (int j = 0; j < dim; ++j) tolerance[r * dim + j] = additions * std::ldexp(1.0, -24) * magnitude[r * dim + j];
    }
    tally->bitwise += ExpectClose(ToHost<float>(d_rows, b.num_rows * dim + kGuard), want, tolerance);
    tally->total += static_cast<int64_t>(want.size());
  }

  DeviceBuffer scratch_;  // reused across backward calls, as a server would
  // Fresh inputs every run; the seed is in every failure message.
  const uint64_t seed_ = std::random_device{}();
  std::mt19937_64 rng_{seed_};
};

const char* Name(Pooling p) { return p == Pooling::kSum ? "sum" : p == Pooling::kMean ? "mean" : "none"; }
const char* Name(RowMode m) {
  return m == RowMode::kStridedAligned ? "strided-aligned" : m == RowMode::kStridedOdd ? "strided-odd" : "pointers";
}

TEST_F(EmbeddingBagCudaTest, ForwardMatchesCpu) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  Tally pooled, copies;
  for (int dim : kDims) {
    for (RowMode mode : {RowMode::kStridedAligned, RowMode::kStridedOdd, RowMode::kPointers}) {
      const Bags b = MakeBags(rng_, 97, 97);
      const Table t = MakeTable(rng_, b.num_rows, dim, mode);
      for (Pooling pooling : kPoolings) {
        for (bool weighted : {false, true}) {
          SCOPED_TRACE(testing::Message() << "dim " << dim << ", " << Name(mode) << ", pooling " << Name(pooling)
                                          << (weighted ? ", weighted" : ""));
          Tally& tally = pooling == Pooling::kNone ? copies : pooled;
          CheckForward<int32_t>(b, t, dim, pooling, weighted, &tally);
          CheckForward<int64_t>(b, t, dim, pooling, weighted, &tally);
        }
      }
    }
  }
  std::cout << "[ bitwise  ] forward sum/mean: " << pooled.bitwise << " of " << pooled.total
            << " elements equal the CPU's bits; none (copies): " << copies.bitwise << " of " << copies.total << "\n";
}

TEST_F(EmbeddingBagCudaTest, BackwardMatchesCpu) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  Tally tally;
  for (int dim : kDims) {
    // Rows 80..96 are never reached: their gradients must come back zero.
    const Bags b = MakeBags(rng_, 97, 80);
    for (Pooling pooling : kPoolings) {
      for (bool weighted : {false, true}) {
        SCOPED_TRACE(testing::Message() << "dim " << dim << ", pooling " << Name(pooling)
                                        << (weighted ? ", weighted" : ""));
        CheckBackward<int32_t>(b, dim, pooling, weighted, &tally);
        CheckBackward<int64_t>(b, dim, pooling, weighted, &tally);
      }
    }
  }
  std::cout << "[ bitwise  ] backward: " << tally.bitwise << " of " << tally.total
            << " elements equal the CPU's bits (every row of at most " << kBackwardSegmentIds
            << " ids must; longer rows are summed in another order)\n";
}

TEST_F(EmbeddingBagCudaTest, AllBagsEmpty) {
  Bags b;
  b.num_rows = 5;
  b.offsets = {0, 0, 0, 0};
  const Table t = MakeTable(rng_, b.num_rows, 8, RowMode::kStridedAligned);
  Tally tally;
  CheckForward<int64_t>(b, t, 8, Pooling::kMean, false, &tally);
  CheckBackward<int64_t>(b, 8, Pooling::kSum, true, &tally);
  EXPECT_EQ(tally.bitwise, tally.total);
}

TEST_F(EmbeddingBagCudaTest, ManyIdsOnFewRowsIsDeterministic) {
  // Three rows reached by 100,000 ids: summed in chunks; two runs, same bits.
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  Bags b;
  b.num_rows = 3;
  b.offsets = {0};
  std::uniform_int_distribution<int64_t> row(0, 2);
  for (int bag = 0; bag < 1000; ++bag) {
    for (int i = 0; i < 100; ++i) b.ids.push_back(row(rng_));
    b.offsets.push_back(b.num_ids());
  }
  const int dim = 64;
  const std::vector<float> grad_out = RandomFloats(rng_, b.num_bags() * dim);
  DeviceBuffer d_ids = ToDevice(b.ids), d_offsets = ToDevice(b.offsets), d_grad = ToDevice(grad_out);
  std::vector<float> runs[2];
  for (auto& run : runs) {
    DeviceBuffer d_rows = PoisonedDevice<float>(b.num_rows * dim);
    EmbeddingBagBackwardArgs<int64_t> a;
    a.grad_out = d_grad.as<float>();
    a.dim = dim;
    a.indices = d_ids.as<int64_t>();
    a.offsets = d_offsets.as<int64_t>();
    a.num_bags = b.num_bags();
    a.num_rows = b.num_rows;
    a.grad_rows = d_rows.as<float>();
    const Status s = EmbeddingBagBackwardCuda(a, b.num_ids(), &scratch_, stream_);
    ASSERT_TRUE(s.ok()) << s;
    Sync();
    run = ToHost<float>(d_rows, b.num_rows * dim);
  }
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0);
  Tally tally;
  CheckBackward<int64_t>(b, dim, Pooling::kMean, false, &tally);
}

}  // namespace
}  // namespace tessera::kernels
