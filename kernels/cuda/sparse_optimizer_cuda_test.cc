// ApplySparseOptimizerCuda / ApplySparseOptimizerToTableCuda against
// ApplySparseOptimizerCpu: every kind, dims 1, 4, 64, 129, 256, weight decay
// off and on, three steps with fresh gradients on rows with random state, rows
// reached through pointers (some misaligned) and by id into a table. The
// padding after each row's state is NaN and must stay so, rows not updated
// must not change. Tolerance 1e-5 relative (sparse_optimizer_cuda.h says
// where the device may round differently); the number of elements equal bit
// for bit is printed.
#include "kernels/cuda/sparse_optimizer_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/test_util_cuda.h"
#include "kernels/sparse_optimizer.h"

namespace tessera::kernels {
namespace {

constexpr int kDims[] = {1, 4, 64, 129, 256};
constexpr SparseOptimizerKind kKinds[] = {SparseOptimizerKind::kSgd, SparseOptimizerKind::kAdagrad,
                                          SparseOptimizerKind::kRowWiseAdagrad, SparseOptimizerKind::kAdam};
constexpr int64_t kTableRows = 300;
constexpr int64_t kUpdatedRows = 200;
constexpr int kSteps = 3;

struct Tally {
  int64_t bitwise = 0;
  int64_t total = 0;
};

// A table of kTableRows rows of `stride` floats: dim weights, the kind's state
// (random but valid: accumulators > 0, Adam's step a small count), NaN after.
std::vector<float> MakeTable(std::mt19937_64& rng, const SparseOptimizerConfig& c, int dim, int64_t stride) {
  std::uniform_real_distribution<float> weight(-1.0f, 1.0f), positive(0.01f, 2.0f);
  std::uniform_int_distribution<int> step(0, 5);
  const int state = SparseOptimizerStateFloats(c.kind, dim);
  std::vector<float> t(kTableRows * stride, std::nanf(""));
  for (int64_t r = 0; r < kTableRows; ++r) {
    float* row = t.data() + r * stride;
    for (int j = 0; j < dim; ++j) row[j] = weight(rng);
    for (int k = 0; k < state; ++k) {
      // Adam: m may be negative, v and the accumulators not; the step counts.
      const bool is_m = c.kind == SparseOptimizerKind::kAdam && k < dim;
      row[dim + k] = is_m ? weight(rng) * 0.1f : positive(rng);
    }
    if (c.kind == SparseOptimizerKind::kAdam) row[3 * dim] = static_cast<float>(step(rng));
  }
  return t;
}

class SparseOptimizerCudaTest : public CudaTest {
 protected:
  // Runs kSteps steps on the CPU and the GPU over the same rows, then compares
  // the whole table (updated rows, untouched rows, padding).
  void Check(const SparseOptimizerConfig& c, int dim, bool by_pointer, Tally* tally) {
    const int state = SparseOptimizerStateFloats(c.kind, dim);
    // By pointer: a stride of dim + state + 1 leaves most rows misaligned.
    // By id: a stride rounded to 4 floats plus 4, so 16-byte loads are used.
    const int64_t stride = by_pointer ? dim + state + 1 : (dim + state + 3) / 4 * 4 + 4;
    std::vector<float> cpu_table = MakeTable(rng_, c, dim, stride);
    DeviceBuffer d_table = ToDevice(cpu_table);
    std::vector<int64_t> ids(kTableRows);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(kUpdatedRows);
    std::vector<float*> cpu_rows, gpu_rows;
    for (int64_t id : ids) {
      cpu_rows.push_back(cpu_table.data() + id * stride);
      gpu_rows.push_back(d_table.as<float>() + id * stride);
    }
    DeviceBuffer d_rows = ToDevice(gpu_rows), d_ids = ToDevice(ids);
    std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> grads(kUpdatedRows * dim);
      for (float& g : grads) g = grad(rng_);
      ApplySparseOptimizerCpu(c, dim, cpu_rows.data(), grads.data(), kUpdatedRows);
      DeviceBuffer d_grads = ToDevice(grads);
      const Status s = by_pointer ? ApplySparseOptimizerCuda(c, dim, d_rows.as<float*>(), d_grads.as<float>(),
                                                             kUpdatedRows, stream_)
                                  : ApplySparseOptimizerToTableCuda(c, dim, d_table.as<float>(), stride,
                                                                    d_ids.as<int64_t>(), d_grads.as<float>(),
                                                                    kUpdatedRows, stream_);
      ASSERT_TRUE(s.ok()) << s;
      Sync();
    }
    const std::vector<float> got = ToHost<float>(d_table, cpu_table.size());
    int64_t failures = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const bool padding = static_cast<int64_t>(i % stride) >= dim + state;
      if (padding) {
        if (!std::isnan(got[i]) && ++failures <= 5) ADD_FAILURE() << "padding written at " << i;
        continue;
      }
      ++tally->total;
      if (std::memcmp(&got[i], &cpu_table[i], sizeof(float)) == 0) {
        ++tally->bitwise;
        continue;
      }
      const double tol = 1e-5 * std::max(1.0, std::fabs(static_cast<double>(cpu_table[i])));
      if (!(std::fabs(static_cast<double>(got[i]) - cpu_table[i]) <= tol) && ++failures <= 5) {
        ADD_FAILURE() << "row " << i / stride << " float " << i % stride << ": got " << got[i] << ", CPU "
                      << cpu_table[i];
      }
    }
    EXPECT_EQ(failures, 0);
  }

  const uint64_t seed_ = std::random_device{}();
  std::mt19937_64 rng_{seed_};
};

TEST_F(SparseOptimizerCudaTest, MatchesCpu) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  for (SparseOptimizerKind kind : kKinds) {
    Tally tally;
    for (int dim : kDims) {
      for (float weight_decay : {0.0f, 0.01f}) {
        for (bool by_pointer : {true, false}) {
          SCOPED_TRACE(testing::Message() << SparseOptimizerName(kind) << ", dim " << dim << ", weight_decay "
                                          << weight_decay << (by_pointer ? ", by pointer" : ", by id"));
          SparseOptimizerConfig c;
          c.kind = kind;
          c.lr = 0.05f;
          c.weight_decay = weight_decay;
          c.initial_accumulator = 0.1f;
          Check(c, dim, by_pointer, &tally);
        }
      }
    }
    std::cout << "[ bitwise  ] " << SparseOptimizerName(kind) << ": " << tally.bitwise << " of " << tally.total
              << " floats equal the CPU's bits\n";
  }
}

TEST_F(SparseOptimizerCudaTest, NoRowsIsANoOp) {
  SparseOptimizerConfig c;
  c.kind = SparseOptimizerKind::kAdam;
  const Status s = ApplySparseOptimizerCuda(c, 16, nullptr, nullptr, 0, stream_);
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace tessera::kernels
