// tessera_gpu_bench: the CUDA kernels on the workload of a recommendation
// model's sparse step, one JSON line per measurement on stdout.
//
//   d2d_copy           cudaMemcpyAsync device to device of --copy_bytes; the
//                      bandwidth counts bytes read plus bytes written (the
//                      ceiling a memory-bound kernel is held against)
//   forward            embedding-bag forward, sum pooling, over a --rows x --dim
//                      float table (rows padded to a stride of 4 floats, the
//                      row-wise Adagrad state after the weights): --batch bags
//                      of --bag Zipf(--zipf) ids. Bytes counted: every id's
//                      row read once plus the outputs written; as a fraction
//                      of d2d_copy's bandwidth ("frac_of_copy", target >= 0.7).
//                      Zipf ids repeat, so many rows come from L2, not HBM.
//   backward_rowwise_adagrad
//                      the sparse backward and update on the same batch:
//                      dedup the ids, segment-sum the pooled gradient into one
//                      gradient per unique row, row-wise Adagrad on the table.
//                      Includes the copy of the unique count to the host (a
//                      server needs it). Stage times and unique rows per second.
//
// Each figure is the median of --iters timed runs after --warmup runs, timed
// with CUDA events. --ids_out writes the ids (int64, batch * bag of them) for
// bench/gpu_bench_torch.py, so both programs run the same batch.
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/dedup_cuda.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/embedding_bag_cuda.h"
#include "kernels/cuda/sparse_optimizer_cuda.h"
#include "kernels/row_init.h"

DEFINE_int64(rows, 10'000'000, "table rows");
DEFINE_int32(dim, 128, "embedding dim");
DEFINE_int64(batch, 65536, "bags per batch");
DEFINE_int32(bag, 32, "ids per bag");
DEFINE_double(zipf, 1.05, "Zipf exponent of the ids");
DEFINE_int32(warmup, 3, "untimed runs before timing");
DEFINE_int32(iters, 20, "timed runs; the median is reported");
DEFINE_int64(copy_bytes, int64_t{1} << 30, "bytes of the device-to-device copy");
DEFINE_uint64(seed, 1, "seed of the ids and the table");
DEFINE_string(ids_out, "", "if set, write the batch's ids here (raw int64) for gpu_bench_torch.py");

namespace tessera::kernels {
namespace {

void Check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::printf("{\"bench\":\"error\",\"what\":\"%s\",\"status\":\"%s\"}\n", what, s.ToString().c_str());
  std::fflush(stdout);
  std::exit(1);
}
void CheckCuda(cudaError_t e, const char* what) { Check(FromCuda(e, what), what); }

DeviceBuffer Alloc(size_t bytes, const char* what) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes);
  Check(b.status(), what);
  return std::move(b).value();
}

// Median of `iters` timings (ms) of `run` on `stream`, after `warmup` runs.
template <typename Run>
double MedianMs(cudaStream_t stream, Run run) {
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < FLAGS_warmup; ++i) run();
  CheckCuda(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> ms;
  for (int i = 0; i < FLAGS_iters; ++i) {
    CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord");
    run();
    CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(stop), "timed run");
    float t = 0;
    CheckCuda(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  CheckCuda(cudaEventDestroy(start), "cudaEventDestroy");
  CheckCuda(cudaEventDestroy(stop), "cudaEventDestroy");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Rows of the table from the shared initializer; state (and padding) zero.
__global__ void InitTableKernel(float* table, int64_t rows, int dim, int64_t stride, RowInitializer init) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * stride) return;
  const int64_t r = i / stride;
  const int64_t c = i % stride;
  table[i] = c < dim ? InitValue(init, r, c) : 0.0f;
}

__global__ void FillGradKernel(float* g, int64_t n, uint64_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g[i] = UnitFloat(SplitMix64(seed ^ static_cast<uint64_t>(i))) * 2.0f - 1.0f;
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

// Zipf(s) ranks over [0, n) by inverse CDF, scattered over the table by a
// bijection (rank * odd multiplier not divisible by 5, mod n) so hot rows are
// not neighbours.
std::vector<int64_t> ZipfIds(int64_t n, double s, int64_t count, uint64_t seed) {
  std::vector<double> cdf(n);
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) cdf[k] = (sum += std::pow(static_cast<double>(k + 1), -s));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<int64_t> ids(count);
  for (int64_t& id : ids) {
    const int64_t rank = std::upper_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
    id = static_cast<int64_t>((static_cast<unsigned __int128>(std::min(rank, n - 1)) * 2654435761u) % n);
  }
  return ids;
}

double Gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

int Main() {
  const std::string reason = NoCudaDeviceReason();
  if (!reason.empty()) {
    std::printf("{\"bench\":\"skipped\",\"reason\":\"no CUDA device: %s\"}\n", reason.c_str());
    return 0;
  }
  cudaDeviceProp prop;
  CheckCuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("{\"bench\":\"device\",\"name\":\"%s\",\"sms\":%d,\"l2_bytes\":%d,\"mem_bytes\":%zu}\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize, prop.totalGlobalMem);
  cudaStream_t stream;
  CheckCuda(cudaStreamCreate(&stream), "cudaStreamCreate");

  // Copy bandwidth, bytes read + written.
  double copy_gbps = 0;
  {
    const size_t bytes = static_cast<size_t>(FLAGS_copy_bytes);
    DeviceBuffer src = Alloc(bytes, "copy src"), dst = Alloc(bytes, "copy dst");
    CheckCuda(cudaMemsetAsync(src.data(), 1, bytes, stream), "memset");
    const double ms = MedianMs(stream, [&] {
      CheckCuda(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream), "copy");
    });
    copy_gbps = Gbps(2.0 * bytes, ms);
    std::printf("{\"bench\":\"d2d_copy\",\"bytes\":%zu,\"median_ms\":%.4f,\"gbps_read_plus_write\":%.1f}\n", bytes, ms,
                copy_gbps);
  }

  const int dim = FLAGS_dim;
  const int64_t stride = (dim + 1 + 3) / 4 * 4;  // weights, row-wise state, padding
  const int64_t num_ids = FLAGS_batch * FLAGS_bag;
  DeviceBuffer table = Alloc(static_cast<size_t>(FLAGS_rows) * stride * sizeof(float), "table");
  RowInitializer init;
  init.seed = FLAGS_seed;
  InitTableKernel<<<Blocks(FLAGS_rows * stride), 256, 0, stream>>>(table.as<float>(), FLAGS_rows, dim, stride, init);
  CheckCuda(cudaGetLastError(), "init table");

  const std::vector<int64_t> ids = ZipfIds(FLAGS_rows, FLAGS_zipf, num_ids, FLAGS_seed);
  std::vector<int64_t> offsets(FLAGS_batch + 1);
  for (int64_t b = 0; b <= FLAGS_batch; ++b) offsets[b] = b * FLAGS_bag;
  if (!FLAGS_ids_out.empty()) {
    std::ofstream f(FLAGS_ids_out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(int64_t)));
    if (!f) Check(Status::Internal("cannot write " + FLAGS_ids_out), "ids_out");
  }
  DeviceBuffer d_ids = Alloc(ids.size() * sizeof(int64_t), "ids");
  DeviceBuffer d_offsets = Alloc(offsets.size() * sizeof(int64_t), "offsets");
  CheckCuda(cudaMemcpy(d_ids.data(), ids.data(), d_ids.size(), cudaMemcpyHostToDevice), "copy ids");
  CheckCuda(cudaMemcpy(d_offsets.data(), offsets.data(), d_offsets.size(), cudaMemcpyHostToDevice), "copy offsets");
  DeviceBuffer out = Alloc(static_cast<size_t>(FLAGS_batch) * dim * sizeof(float), "out");

  // Forward.
  EmbeddingBagForwardArgs<int64_t> fwd;
  fwd.rows = table.as<float>();
  fwd.num_rows = FLAGS_rows;
  fwd.row_stride = stride;
  fwd.dim = dim;
  fwd.indices = d_ids.as<int64_t>();
  fwd.offsets = d_offsets.as<int64_t>();
  fwd.num_bags = FLAGS_batch;
  fwd.pooling = Pooling::kSum;
  fwd.out = out.as<float>();
  const double fwd_ms = MedianMs(stream, [&] { Check(EmbeddingBagForwardCuda(fwd, stream), "forward"); });
  const double row_bytes = static_cast<double>(num_ids) * dim * sizeof(float);
  const double out_bytes = static_cast<double>(FLAGS_batch) * dim * sizeof(float);
  const double index_bytes = static_cast<double>(num_ids + FLAGS_batch + 1) * sizeof(int64_t);
  const double fwd_gbps = Gbps(row_bytes + out_bytes, fwd_ms);
  std::printf(
      "{\"bench\":\"forward\",\"rows\":%ld,\"dim\":%d,\"batch\":%ld,\"bag\":%d,\"zipf\":%.2f,\"median_ms\":%.4f,"
      "\"gbps_rows_plus_out\":%.1f,\"gbps_incl_indices\":%.1f,\"frac_of_copy\":%.3f,\"ids_per_s\":%.4g}\n",
      static_cast<long>(FLAGS_rows), dim, static_cast<long>(FLAGS_batch), FLAGS_bag, FLAGS_zipf, fwd_ms, fwd_gbps,
      Gbps(row_bytes + out_bytes + index_bytes, fwd_ms), fwd_gbps / copy_gbps, num_ids / (fwd_ms * 1e-3));

  // Backward + row-wise Adagrad.
  DeviceBuffer grad_out = Alloc(static_cast<size_t>(FLAGS_batch) * dim * sizeof(float), "grad_out");
  FillGradKernel<<<Blocks(FLAGS_batch * dim), 256, 0, stream>>>(grad_out.as<float>(), FLAGS_batch * dim, FLAGS_seed);
  CheckCuda(cudaGetLastError(), "fill grad");
  DeviceBuffer unique = Alloc(num_ids * sizeof(int64_t), "unique");
  DeviceBuffer inverse = Alloc(num_ids * sizeof(int32_t), "inverse");
  DeviceBuffer d_count = Alloc(sizeof(int32_t), "count");
  DeviceBuffer grad_rows = Alloc(static_cast<size_t>(num_ids) * dim * sizeof(float), "grad_rows");
  DeviceBuffer dedup_scratch, backward_scratch;
  StatusOr<PinnedBuffer> pinned = PinnedBuffer::Allocate(sizeof(int32_t));
  Check(pinned.status(), "pinned");
  SparseOptimizerConfig opt;
  opt.kind = SparseOptimizerKind::kRowWiseAdagrad;
  opt.lr = 0.01f;
  cudaEvent_t ev[4];
  for (cudaEvent_t& e : ev) CheckCuda(cudaEventCreate(&e), "cudaEventCreate");
  std::vector<double> dedup_ms, sum_ms, update_ms;
  int32_t num_unique = 0;
  const double step_ms = MedianMs(stream, [&] {
    CheckCuda(cudaEventRecord(ev[0], stream), "record");
    Check(DedupIdsCuda(d_ids.as<int64_t>(), num_ids, unique.as<int64_t>(), inverse.as<int32_t>(),
                       d_count.as<int32_t>(), &dedup_scratch, stream),
          "dedup");
    CheckCuda(cudaMemcpyAsync(pinned->data(), d_count.data(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream), "count");
    CheckCuda(cudaEventRecord(ev[1], stream), "record");
    CheckCuda(cudaStreamSynchronize(stream), "count");
    num_unique = *pinned->as<int32_t>();
    EmbeddingBagBackwardArgs<int32_t> bwd;
    bwd.grad_out = grad_out.as<float>();
    bwd.dim = dim;
    bwd.indices = inverse.as<int32_t>();
    bwd.offsets = d_offsets.as<int64_t>();
    bwd.num_bags = FLAGS_batch;
    bwd.pooling = Pooling::kSum;
    bwd.num_rows = num_unique;
    bwd.grad_rows = grad_rows.as<float>();
    Check(EmbeddingBagBackwardCuda(bwd, num_ids, &backward_scratch, stream), "backward");
    CheckCuda(cudaEventRecord(ev[2], stream), "record");
    Check(ApplySparseOptimizerToTableCuda(opt, dim, table.as<float>(), stride, unique.as<int64_t>(),
                                          grad_rows.as<float>(), num_unique, stream),
          "rowwise adagrad");
    CheckCuda(cudaEventRecord(ev[3], stream), "record");
    CheckCuda(cudaEventSynchronize(ev[3]), "step");
    float a = 0, b = 0, c = 0;
    CheckCuda(cudaEventElapsedTime(&a, ev[0], ev[1]), "elapsed");
    CheckCuda(cudaEventElapsedTime(&b, ev[1], ev[2]), "elapsed");
    CheckCuda(cudaEventElapsedTime(&c, ev[2], ev[3]), "elapsed");
    dedup_ms.push_back(a);
    sum_ms.push_back(b);
    update_ms.push_back(c);
  });
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "{\"bench\":\"backward_rowwise_adagrad\",\"ids\":%ld,\"unique_rows\":%d,\"median_ms\":%.4f,"
      "\"dedup_ms\":%.4f,\"segment_sum_ms\":%.4f,\"update_ms\":%.4f,\"unique_rows_per_s\":%.4g,"
      "\"ids_per_s\":%.4g}\n",
      static_cast<long>(num_ids), num_unique, step_ms, median(dedup_ms), median(sum_ms), median(update_ms),
      num_unique / (step_ms * 1e-3), num_ids / (step_ms * 1e-3));
  for (cudaEvent_t& e : ev) CheckCuda(cudaEventDestroy(e), "cudaEventDestroy");
  CheckCuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return 0;
}

}  // namespace
}  // namespace tessera::kernels

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return tessera::kernels::Main();
}
