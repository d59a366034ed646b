// Row-store throughput on a table ten times larger than host memory (DESIGN.md
// §6): the tiered store (LRU and LFU-with-ageing) against the all-in-memory
// store, on a parameter server's access pattern.
//
// Table: --rows rows of --dim weights + Adagrad state (dim floats), all rows
// written before timing (--prefill; so every host miss is a RocksDB read).
// Budget: --budget_fraction of the table's rows (host_bytes =
// fraction * rows * HostTierBytesPerRow). A batch: --lookups ids ~ Zipf(--zipf)
// over the rows (rank k drawn with P ∝ (k+1)^-s, then scattered over the id
// space as hashed ids are), deduplicated, then Read (the gather of a lookup)
// and Update (Adagrad on random gradients: the push) of the unique rows, as
// ps_service does for one request. --threads run batches concurrently.
// After --warmup_batches, --batches are timed. One JSON line per store:
// unique_rows_per_s (rows read and updated per second), lookups_per_s,
// host_hit_rate (of unique rows looked up, the fraction already resident),
// evictions, write-backs, RocksDB traffic, and ratio_to_memory.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_stats.h"
#include "kernels/dedup.h"
#include "kernels/sparse_optimizer.h"
#include "ps/device_row_store.h"
#include "ps/rocks_row_store.h"
#include "ps/row_store.h"
#include "ps/row_store_stats.h"
#include "ps/slot_table.h"
#include "ps/tiered_row_store.h"

DEFINE_int64(rows, 2000000, "rows of the table");
DEFINE_int32(dim, 64, "embedding floats per row (Adagrad adds as many state floats)");
DEFINE_double(budget_fraction, 0.1, "host budget as a fraction of the table's rows");
DEFINE_double(zipf, 1.05, "Zipf exponent of the ids");
DEFINE_int64(lookups, 16384, "ids per batch before dedup");
DEFINE_int32(warmup_batches, 300, "batches before timing (the host tier fills)");
DEFINE_int32(batches, 600, "timed batches (over all threads)");
DEFINE_int32(threads, 1, "threads running batches");
DEFINE_bool(prefill, true, "write every row to RocksDB before timing");
DEFINE_string(stores, "memory,lru,lfu_aging",
              "comma list: memory, lru, lfu_aging (host memory over RocksDB), gpu_host, gpu_cuda (the GPU tier, "
              "CLOCK, with its slots in host memory or on cuda:0, over the memory store)");
DEFINE_string(dir, "", "directory for the RocksDB files (default: a fresh temp dir, removed after)");
DEFINE_uint64(seed, 42, "id sampling seed");
DEFINE_bool(known_ids, true,
            "tell the tiered stores the table's id range, as a server does, so rows never written are "
            "not looked up in RocksDB (false: every miss asks RocksDB)");
DEFINE_int64(lfu_halving_accesses, 0,
             "lfu_aging: row accesses between halvings of the counts (0: the store's default)");
DEFINE_int64(write_back_bytes, int64_t{32} << 20,
             "tiered stores: write-back buffer bytes (ps/write_back_buffer.h); 0: victims written at eviction");

namespace tessera {
namespace {

constexpr uint64_t kScramble = 0x9E3779B97F4A7C15ULL;  // odd: rank -> id is a bijection mod 2^64

// Inverse-CDF Zipf sampler over ranks [0, n).
class Zipf {
 public:
  Zipf(int64_t n, double s) : cdf_(static_cast<size_t>(n)) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) cdf_[k] = (sum += std::pow(static_cast<double>(k + 1), -s));
    for (double& c : cdf_) c /= sum;
  }
  int64_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return std::min<int64_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(),
                             static_cast<int64_t>(cdf_.size()) - 1);
  }

 private:
  std::vector<double> cdf_;
};

// Hot ranks scattered over the rows, as hashed ids are (no locality for RocksDB to exploit).
int64_t RankToId(int64_t rank, int64_t rows) {
  return static_cast<int64_t>((static_cast<uint64_t>(rank) * kScramble) % static_cast<uint64_t>(rows));
}

void InitRow(int64_t id, float* row) {
  for (int c = 0; c < FLAGS_dim; ++c) row[c] = static_cast<float>((id * 31 + c) % 97) * 1e-3f;
  std::fill(row + FLAGS_dim, row + 2 * FLAGS_dim, 0.0f);
}

RowStoreOptions Rows() {
  RowStoreOptions o;
  o.row_width = 2 * FLAGS_dim;
  o.gather_cols = FLAGS_dim;
  o.init = InitRow;
  return o;
}

Status Prefill(const std::string& path) {
  RowDbOptions o;
  o.path = path;
  o.mode = RowDbOpenMode::kOverwrite;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowDb> db, RowDb::Open(o, 2 * FLAGS_dim));
  constexpr int64_t kBatch = 8192;
  std::vector<float> rows(kBatch * 2 * FLAGS_dim);
  std::vector<const float*> ptrs(kBatch);
  std::vector<int64_t> ids(kBatch);
  for (int64_t begin = 0; begin < FLAGS_rows; begin += kBatch) {
    const int64_t n = std::min(kBatch, FLAGS_rows - begin);
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = begin + i;
      ptrs[i] = &rows[i * 2 * FLAGS_dim];
      InitRow(ids[i], &rows[i * 2 * FLAGS_dim]);
    }
    TESSERA_RETURN_IF_ERROR(db->Put(std::span<const int64_t>(ids.data(), n), ptrs.data()));
  }
  return db->Flush();
}

// One thread's share of the timed (or warm-up) batches: dedup, Read, Update.
Status RunBatches(RowStore* store, const Zipf& zipf, int batches, uint64_t seed, int64_t* unique_rows) {
  std::mt19937_64 rng(seed);
  kernels::IdDeduper dedup;
  kernels::SparseOptimizerConfig adagrad;
  adagrad.kind = kernels::SparseOptimizerKind::kAdagrad;
  std::vector<int64_t> ids(FLAGS_lookups), unique, offsets;
  std::vector<int32_t> inverse, each;
  std::vector<float> gathered, grads;
  DeviceRowStore* tier = store->device_tier();
  for (int b = 0; b < batches; ++b) {
    for (int64_t& id : ids) id = RankToId(zipf(rng), FLAGS_rows);
    dedup.Run(ids, &unique, &inverse);
    gathered.resize(unique.size() * FLAGS_dim);
    if (tier != nullptr) {
      // What a shard on the GPU tier runs: a lookup of each distinct row where
      // it lives, then the optimizer there.
      each.resize(unique.size());
      offsets.resize(unique.size() + 1);
      for (size_t i = 0; i < unique.size(); ++i) each[i] = static_cast<int32_t>(i), offsets[i + 1] = i + 1;
      TESSERA_RETURN_IF_ERROR(
          tier->Forward(unique, each, offsets, nullptr, kernels::Pooling::kNone, FLAGS_dim, gathered.data()));
    } else {
      TESSERA_RETURN_IF_ERROR(store->Gather(unique, gathered.data()));
    }
    grads.resize(unique.size() * FLAGS_dim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = gathered[i] * 0.1f - 1e-3f;  // some function of the rows
    if (tier != nullptr) {
      TESSERA_RETURN_IF_ERROR(tier->Apply(adagrad, FLAGS_dim, unique, grads.data()));
    } else {
      TESSERA_RETURN_IF_ERROR(store->Update(unique, [&](float* const* rows, int64_t n) {
        kernels::ApplySparseOptimizerCpu(adagrad, FLAGS_dim, rows, grads.data(), n);
      }));
    }
    *unique_rows += static_cast<int64_t>(unique.size());
  }
  return Status::OK();
}

Status RunAll(RowStore* store, const Zipf& zipf, int batches, uint64_t seed, int64_t* unique_rows) {
  std::vector<std::thread> threads;
  std::vector<Status> status(FLAGS_threads);
  std::vector<int64_t> counts(FLAGS_threads, 0);
  for (int t = 0; t < FLAGS_threads; ++t) {
    const int mine = batches / FLAGS_threads + (t < batches % FLAGS_threads ? 1 : 0);
    threads.emplace_back([&, t, mine] { status[t] = RunBatches(store, zipf, mine, seed + 1000 * t, &counts[t]); });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < FLAGS_threads; ++t) {
    TESSERA_RETURN_IF_ERROR(status[t]);
    *unique_rows += counts[t];
  }
  return Status::OK();
}

using bench::ProcessCpuSeconds;

StatusOr<std::unique_ptr<RowStore>> OpenStore(const std::string& name, const std::string& dir) {
  if (name == "memory") return NewMemoryRowStore(Rows());
  if (name == "gpu_host" || name == "gpu_cuda") {
    const int64_t slots = static_cast<int64_t>(FLAGS_budget_fraction * static_cast<double>(FLAGS_rows));
    std::unique_ptr<SlotTable> table;
    if (name == "gpu_host") {
      table = NewHostSlotTable(slots, 2 * FLAGS_dim);
    } else {
      TESSERA_ASSIGN_OR_RETURN(table, NewCudaSlotTable(0, slots, 2 * FLAGS_dim));
    }
    TESSERA_ASSIGN_OR_RETURN(auto tier, DeviceRowStore::Create(Rows(), std::move(table), NewMemoryRowStore(Rows()),
                                                               0, FLAGS_rows));
    return std::unique_ptr<RowStore>(std::move(tier));
  }
  TieredRowStoreOptions o;
  o.rows = Rows();
  if (FLAGS_known_ids) o.rows.id_end = FLAGS_rows;
  o.db.path = dir + "/" + name;
  o.host_bytes = static_cast<int64_t>(FLAGS_budget_fraction * static_cast<double>(FLAGS_rows)) *
                 HostTierBytesPerRow(2 * FLAGS_dim);
  o.write_back_buffer_bytes = FLAGS_write_back_bytes;
  o.lfu_halving_accesses = FLAGS_lfu_halving_accesses;
  if (name == "lru") {
    o.policy = EvictionPolicy::kLru;
  } else if (name == "lfu_aging") {
    o.policy = EvictionPolicy::kLfuAging;
  } else {
    return Status::InvalidArgument("unknown store " + name);
  }
  if (FLAGS_prefill) {
    // A hard-linked copy of the prefilled database, so each store starts alike.
    std::unique_ptr<RowDb> base;
    TESSERA_ASSIGN_OR_RETURN(base, RowDb::Open(RowDbOptions{dir + "/prefill", RowDbOpenMode::kOpenExisting}, o.rows.row_width));
    TESSERA_RETURN_IF_ERROR(base->Checkpoint(o.db.path));
    o.db.mode = RowDbOpenMode::kOpenExisting;
  } else {
    o.db.mode = RowDbOpenMode::kOverwrite;
  }
  return OpenTieredRowStore(o);
}

int Main() {
  std::string dir = FLAGS_dir;
  const bool temp_dir = dir.empty();
  if (temp_dir) {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/tier_bench.XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
  }
  const Zipf zipf(FLAGS_rows, FLAGS_zipf);
  const bool rocksdb = FLAGS_stores.find("lru") != std::string::npos || FLAGS_stores.find("lfu") != std::string::npos;
  if (FLAGS_prefill && rocksdb) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = Prefill(dir + "/prefill");
    CHECK(st.ok()) << st;
    fprintf(stderr, "prefilled %lld rows in %.1f s\n", static_cast<long long>(FLAGS_rows),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double memory_rate = 0, memory_cpu_rate = 0;
  std::stringstream names(FLAGS_stores);
  for (std::string name; std::getline(names, name, ',');) {
    auto store = OpenStore(name, dir);
    CHECK(store.ok()) << store.status();
    int64_t warm_rows = 0, rows = 0;
    Status st = RunAll(store->get(), zipf, FLAGS_warmup_batches, FLAGS_seed, &warm_rows);
    CHECK(st.ok()) << st;
    const RowStoreStats before = (*store)->Stats();
    const double cpu0 = ProcessCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    st = RunAll(store->get(), zipf, FLAGS_batches, FLAGS_seed + 7, &rows);
    CHECK(st.ok()) << st;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_secs = ProcessCpuSeconds() - cpu0;
    const double rate = static_cast<double>(rows) / secs;
    const double cpu_rate = static_cast<double>(rows) / cpu_secs;
    if (name == "memory") memory_rate = rate, memory_cpu_rate = cpu_rate;
    nlohmann::json j = {{"store", name},
                        {"rows", FLAGS_rows},
                        {"row_floats", 2 * FLAGS_dim},
                        {"budget_fraction", name == "memory" ? 1.0 : FLAGS_budget_fraction},
                        {"zipf", FLAGS_zipf},
                        {"threads", FLAGS_threads},
                        {"batches", FLAGS_batches},
                        {"unique_rows_per_batch", static_cast<double>(rows) / FLAGS_batches},
                        {"seconds", secs},
                        {"cpu_seconds", cpu_secs},
                        {"unique_rows_per_s", rate},
                        {"lookups_per_s", static_cast<double>(FLAGS_lookups) * FLAGS_batches / secs}};
    if (memory_rate > 0) {
      j["ratio_to_memory"] = rate / memory_rate;
      j["cpu_ratio_to_memory"] = cpu_rate / memory_cpu_rate;  // per CPU second
    }
    // The upper tier's hits, evictions and write-backs over the timed batches.
    const RowStoreStats after = (*store)->Stats();
    for (const char* name : {"gpu", "host"}) {
      if (before.tier(name) == nullptr) continue;
      const TierStats& t0 = *before.tier(name);
      const TierStats& t1 = *after.tier(name);
      const int64_t hits = t1.hits - t0.hits, misses = t1.misses - t0.misses;
      j[std::string(name) + "_hit_rate"] =
          static_cast<double>(hits) / static_cast<double>(std::max<int64_t>(1, hits + misses));
      j["evictions"] = t1.evictions - t0.evictions;
      j["writebacks"] = t1.writebacks - t0.writebacks;
      break;
    }
    if (before.tier("host") != nullptr) {
      const TierStats& h1 = *after.tier("host");
      j["host_rows_resident"] = h1.rows_resident;
      j["host_mib_resident"] = static_cast<double>(h1.bytes_resident) / (1 << 20);
      j["rocksdb_rows_read"] = after.rocksdb_rows_read - before.rocksdb_rows_read;
      j["rocksdb_mib_read"] = static_cast<double>(after.rocksdb_bytes_read - before.rocksdb_bytes_read) / (1 << 20);
      j["rocksdb_rows_written"] = after.rocksdb_rows_written - before.rocksdb_rows_written;
      j["rocksdb_mib_written"] =
          static_cast<double>(after.rocksdb_bytes_written - before.rocksdb_bytes_written) / (1 << 20);
    }
    printf("%s\n", j.dump().c_str());
    fflush(stdout);
  }
  if (temp_dir) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return tessera::Main();
}
