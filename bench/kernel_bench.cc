// Single-threaded throughput of the CPU embedding kernels, on the workload of
// /work/shared/peers/torch_embeddingbag_kernel.py so the two compare directly:
// a --num_rows x --dim float table, --batch bags x --pooling ids per call, ids
// ~ Zipf(--zipf) by inverse-CDF sampling (P(k) ∝ (k+1)^-s, hottest id 0; 0 =
// uniform), --distinct_batches pre-generated batches cycled.
//
// Modes (one JSON line each, per id distribution in --zipf):
//   fwd               sum-pooled forward, int64 ids straight into the table
//   fwd_bwd_sgd       what a parameter server does per step, the headline:
//                     dedup the ids; one pointer per unique row into the table
//                     (as the row store hands them out: no copy); forward over
//                     the row pointers with the int32 inverse; backward to
//                     [unique x dim] row gradients (d loss / d pooled = 1, as
//                     the peer); SGD through the row pointers, in place
//   fwd_bwd_sgd_copy  the same, but the unique rows are first copied out of
//                     the table and the forward reads the copy
// All phases are in the timed call, the pointer table included. lookups_per_s
// counts every id of a batch (repeats included), as the peer does, per
// wall-clock second (median of --repeats; _min/_max the worst/best repeat);
// phase_cpu_ms splits a step's thread CPU time between its phases.
// The table is on 4 KiB pages, as the peer's tensors are; --huge_pages puts it
// (and the buffers) on 2 MiB pages, as a row store might, labelled "pages".
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/thread_cpu_time.h"
#include "kernels/dedup.h"
#include "kernels/embedding_bag.h"
#include "kernels/sparse_optimizer.h"

DEFINE_int64(num_rows, 1000000, "rows of the table");
DEFINE_int32(dim, 64, "floats per row");
DEFINE_int64(batch, 4096, "bags per call");
DEFINE_int64(pooling, 20, "ids per bag");
DEFINE_string(zipf, "1.05,0", "comma list of id distribution exponents; 0 = uniform");
DEFINE_string(modes, "fwd,fwd_bwd_sgd,fwd_bwd_sgd_copy", "comma list of modes to run");
DEFINE_uint64(seed, 1234, "id sampling seed");
DEFINE_double(lr, 0.05, "SGD learning rate");
DEFINE_int32(distinct_batches, 32, "pre-generated batches, cycled");
DEFINE_int32(iters, 50, "calls per repeat");
DEFINE_int32(repeats, 5, "repeats; the median is reported");
DEFINE_int32(warmup, 10, "calls before timing");
DEFINE_bool(huge_pages, false,
            "madvise(MADV_HUGEPAGE) the table and buffers (2 MiB pages: no TLB miss per row), as a row store "
            "might; false: 4 KiB pages, as the torch peer's tensors get");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::EmbeddingBagBackwardArgs;
using kernels::EmbeddingBagForwardArgs;
using kernels::Pooling;

// ids of `batches` batches of `per_batch` ids, P(k) ∝ (k+1)^-s over [0, n).
std::vector<std::vector<int64_t>> SampleBatches(int64_t n, double s, int batches, int64_t per_batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> out(batches, std::vector<int64_t>(per_batch));
  if (s == 0.0) {
    std::uniform_int_distribution<int64_t> id(0, n - 1);
    for (auto& b : out) {
      for (int64_t& x : b) x = id(rng);
    }
    return out;
  }
  std::vector<double> cdf(n);
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) cdf[k] = sum += std::pow(static_cast<double>(k + 1), -s);
  for (double& c : cdf) c /= sum;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& b : out) {
    for (int64_t& x : b) {
      x = std::min<int64_t>(std::upper_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin(), n - 1);
    }
  }
  return out;
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using FloatBuffer = std::unique_ptr<float[], FreeDeleter>;

// n floats, zeroed, 2 MiB aligned; on 2 MiB pages with --huge_pages, else on
// 4 KiB pages whatever the host's transparent huge page default.
FloatBuffer AllocFloats(size_t n) {
  const size_t kHugePage = size_t{2} << 20;
  const size_t bytes = (n * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
  float* p = static_cast<float*>(std::aligned_alloc(kHugePage, bytes));
  CHECK(p != nullptr) << "out of memory for " << bytes << " bytes";
  madvise(p, bytes, FLAGS_huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(p, 0, bytes);
  return FloatBuffer(p);
}

struct Timing {
  double median = 0, min = 0, max = 0;  // wall seconds per call
  double cpu_median = 0;                // thread CPU seconds per call
};

// Median / min / max seconds per call over FLAGS_repeats runs of FLAGS_iters calls.
Timing Time(const std::function<void(int)>& call) {
  for (int i = 0; i < FLAGS_warmup; ++i) call(i);
  std::vector<double> per_call, cpu_per_call;
  for (int r = 0; r < FLAGS_repeats; ++r) {
    const double c0 = ThreadCpuSeconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < FLAGS_iters; ++i) call(r * FLAGS_iters + i);
    per_call.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / FLAGS_iters);
    cpu_per_call.push_back((ThreadCpuSeconds() - c0) / FLAGS_iters);
  }
  std::sort(per_call.begin(), per_call.end());
  std::sort(cpu_per_call.begin(), cpu_per_call.end());
  return {per_call[per_call.size() / 2], per_call.front(), per_call.back(), cpu_per_call[cpu_per_call.size() / 2]};
}

bool ModeSelected(const std::string& mode) {
  std::stringstream list(FLAGS_modes);
  for (std::string m; std::getline(list, m, ',');) {
    if (m == mode) return true;
  }
  return false;
}

void Report(const std::string& mode, double zipf, const Timing& t, double unique_mean, nlohmann::json extra) {
  const double ids = static_cast<double>(FLAGS_batch * FLAGS_pooling);
  const double row_bytes = FLAGS_dim * 4.0;
  nlohmann::json j = {
      {"system", "tessera-kernels"},
      {"mode", mode},
      {"threads", 1},
      {"zipf", zipf},
      {"pages", FLAGS_huge_pages ? "2MiB" : "4KiB"},
      {"lookups_per_s", ids / t.median},
      {"lookups_per_s_min", ids / t.max},
      {"lookups_per_s_max", ids / t.min},
      {"bags_per_s", FLAGS_batch / t.median},
      {"row_GBps", ids * row_bytes / t.median / 1e9},
      {"unique_row_GBps", unique_mean * row_bytes / t.median / 1e9},
      {"ms_per_call", t.median * 1e3},
      {"cpu_ms_per_call", t.cpu_median * 1e3},
      {"lookups_per_cpu_s", ids / t.cpu_median},
      {"config",
       {{"num_embeddings", FLAGS_num_rows},
        {"dim", FLAGS_dim},
        {"batch", FLAGS_batch},
        {"pooling", FLAGS_pooling},
        {"unique_ids_per_batch", unique_mean},
        {"iters", FLAGS_iters},
        {"repeats", FLAGS_repeats}}},
  };
  if (!extra.is_null()) j["phase_cpu_ms"] = extra;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void BenchDistribution(double zipf, float* table, const std::vector<int64_t>& offsets) {
  const int dim = FLAGS_dim;
  const int64_t per_batch = FLAGS_batch * FLAGS_pooling;
  const auto batches = SampleBatches(FLAGS_num_rows, zipf, FLAGS_distinct_batches, per_batch, FLAGS_seed);
  const int nb = static_cast<int>(batches.size());
  FloatBuffer pooled = AllocFloats(FLAGS_batch * dim);
  FloatBuffer grad_pooled = AllocFloats(FLAGS_batch * dim);
  std::fill_n(grad_pooled.get(), FLAGS_batch * dim, 1.0f);

  kernels::IdDeduper deduper;
  std::vector<int64_t> unique;
  std::vector<int32_t> inverse;
  double unique_mean = 0;
  for (const auto& b : batches) {
    deduper.Run(b, &unique, &inverse);
    unique_mean += static_cast<double>(unique.size()) / nb;
  }

  // (a) forward alone.
  EmbeddingBagForwardArgs<int64_t> fwd;
  fwd.rows = table;
  fwd.num_rows = FLAGS_num_rows;
  fwd.row_stride = dim;
  fwd.dim = dim;
  fwd.offsets = offsets.data();
  fwd.num_bags = FLAGS_batch;
  fwd.pooling = Pooling::kSum;
  fwd.out = pooled.get();
  if (ModeSelected("fwd")) {
    Report("fwd", zipf, Time([&](int i) {
             fwd.indices = batches[i % nb].data();
             kernels::EmbeddingBagForwardCpu(fwd);
           }),
           unique_mean, nullptr);
  }

  // (b) dedup, row pointers, [copy,] forward, backward, SGD; per-phase thread
  // CPU times summed.
  kernels::SparseOptimizerConfig sgd;
  sgd.kind = kernels::SparseOptimizerKind::kSgd;
  sgd.lr = static_cast<float>(FLAGS_lr);
  FloatBuffer copied = AllocFloats(per_batch * dim);
  FloatBuffer grad_rows = AllocFloats(per_batch * dim);
  std::vector<float*> row_ptrs(per_batch);
  for (bool copy : {false, true}) {
    const std::string mode = copy ? "fwd_bwd_sgd_copy" : "fwd_bwd_sgd";
    if (!ModeSelected(mode)) continue;
    double phase[6] = {};  // dedup, row_ptrs, copy, forward, backward, sgd
    int64_t calls = 0;
    const Timing t = Time([&](int i) {
      const auto& ids = batches[i % nb];
      double t0 = ThreadCpuSeconds();
      auto lap = [&](int k) {
        const double now = ThreadCpuSeconds();
        phase[k] += now - t0;
        t0 = now;
      };
      deduper.Run(ids, &unique, &inverse);
      const int64_t num_unique = static_cast<int64_t>(unique.size());
      lap(0);
      // The row store's part: one pointer per unique row, no copy.
      for (int64_t k = 0; k < num_unique; ++k) row_ptrs[k] = table + unique[k] * dim;
      lap(1);
      EmbeddingBagForwardArgs<int32_t> f;
      f.num_rows = num_unique;
      f.dim = dim;
      f.indices = inverse.data();
      f.offsets = offsets.data();
      f.num_bags = FLAGS_batch;
      f.out = pooled.get();
      if (copy) {
        for (int64_t k = 0; k < num_unique; ++k) {
          if (k + 8 < num_unique) {
            for (int j = 0; j < dim; j += 16) __builtin_prefetch(row_ptrs[k + 8] + j);
          }
          std::memcpy(copied.get() + k * dim, row_ptrs[k], dim * sizeof(float));
        }
        f.rows = copied.get();
        f.row_stride = dim;
      } else {
        f.row_ptrs = row_ptrs.data();
      }
      lap(2);
      kernels::EmbeddingBagForwardCpu(f);
      lap(3);
      EmbeddingBagBackwardArgs<int32_t> bwd;
      bwd.grad_out = grad_pooled.get();
      bwd.dim = dim;
      bwd.indices = inverse.data();
      bwd.offsets = offsets.data();
      bwd.num_bags = FLAGS_batch;
      bwd.num_rows = num_unique;
      bwd.grad_rows = grad_rows.get();
      kernels::EmbeddingBagBackwardCpu(bwd);
      lap(4);
      kernels::ApplySparseOptimizerCpu(sgd, dim, row_ptrs.data(), grad_rows.get(), num_unique);
      lap(5);
      ++calls;
    });
    nlohmann::json ms = {{"dedup", phase[0] * 1e3 / calls},    {"row_ptrs", phase[1] * 1e3 / calls},
                         {"copy", phase[2] * 1e3 / calls},     {"forward", phase[3] * 1e3 / calls},
                         {"backward", phase[4] * 1e3 / calls}, {"sgd", phase[5] * 1e3 / calls}};
    if (!copy) ms.erase("copy");
    Report(mode, zipf, t, unique_mean, ms);
  }
}

int Main() {
  const int dim = FLAGS_dim;
  // Rows aligned as the row store's are: dim 64 is four whole cache lines.
  const size_t table_bytes = static_cast<size_t>(FLAGS_num_rows) * dim * sizeof(float);
  FloatBuffer table_buffer = AllocFloats(table_bytes / sizeof(float));
  float* table = table_buffer.get();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-0.05f, 0.05f);
  for (size_t k = 0; k < table_bytes / sizeof(float); ++k) table[k] = value(rng);
  std::vector<int64_t> offsets(FLAGS_batch + 1);
  for (int64_t b = 0; b <= FLAGS_batch; ++b) offsets[b] = b * FLAGS_pooling;

  std::stringstream list(FLAGS_zipf);
  for (std::string s; std::getline(list, s, ',');) {
    if (!s.empty()) BenchDistribution(std::stod(s), table, offsets);
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return tessera::Main();
}
