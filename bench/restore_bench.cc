// Restore rate against the disk's (issue 12's goal: a restore reads a
// checkpoint at >= 50% of the rate `cat` reads the same files, cold).
//
// Writes --shards snapshots (ps/row_snapshot.h, rows.bin) of a table of --rows
// rows x --dim with --optimizer state, each holding --fill of its rows in a
// random order (the order a store's rows are touched in), then, with the
// page cache of those files dropped (POSIX_FADV_DONTNEED after a sync; no
// root needed) before each measurement:
//   cat:     reads every file front to back in 1 MiB pieces, one thread per
//            file, side by side (what the disk and the kernel give);
//   restore: fills --shards new shards from them side by side, through the
//            parameter server's own path (RestoreSnapshotSlice), as a server
//            restoring its shards after a failure does.
// --repeats times each; prints one JSON line per repeat with MB/s of both and
// restore / cat, and a last line with the medians.
#include <fcntl.h>
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_stats.h"
#include "common/job_config.h"
#include "common/sharding_plan.h"
#include "ps/embedding_shard.h"
#include "ps/row_snapshot.h"
#include "ps/shard_rows.h"

DEFINE_int64(rows, 800000, "rows of each shard's table slice");
DEFINE_int32(dim, 64, "embedding columns");
DEFINE_string(optimizer, "sgd", "the table's optimizer (its state is stored with each row)");
DEFINE_double(fill, 0.6, "fraction of the rows materialized (in the snapshot)");
DEFINE_int32(shards, 2, "shards restored side by side (one thread each)");
DEFINE_int32(repeats, 3, "measurements of each");
DEFINE_string(dir, "", "directory for the snapshots (default: a fresh temp dir, removed after)");
DEFINE_uint64(seed, 42, "row order seed");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Drops the cached pages of every file under dir (they are clean: synced).
void DropCache(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int64_t CatFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CHECK_GE(fd, 0) << path;
  std::vector<char> buf(1 << 20);
  int64_t total = 0;
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += n;
  ::close(fd);
  return total;
}

TableConfig Table() {
  TableConfig t;
  t.name = "t";
  t.num_embeddings = FLAGS_rows;
  t.embedding_dim = FLAGS_dim;
  t.optimizer.type = FLAGS_optimizer;
  t.optimizer.lr = 0.05;
  t.optimizer.initial_accumulator = 0.1;
  t.seed = 7;
  return t;
}

ShardSpec Spec(uint32_t id) {
  ShardSpec spec;
  spec.shard_id = id;
  spec.num_rows = FLAGS_rows;
  spec.num_cols = FLAGS_dim;
  return spec;
}

using bench::Median;

int Main() {
  const std::string dir = FLAGS_dir.empty() ? (std::filesystem::temp_directory_path() /
                                               ("tessera_restore_bench." + std::to_string(::getpid())))
                                                  .string()
                                            : FLAGS_dir;
  std::filesystem::create_directories(dir);
  const TableConfig table = Table();
  std::vector<std::string> snapshots;
  int64_t bytes = 0, rows_each = 0;
  for (int s = 0; s < FLAGS_shards; ++s) {
    auto shard = EmbeddingShard::Create(Spec(s), table);
    CHECK(shard.ok()) << shard.status();
    std::vector<int64_t> ids(static_cast<size_t>(FLAGS_rows));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937_64 rng(FLAGS_seed + s);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(static_cast<size_t>(FLAGS_fill * FLAGS_rows));
    rows_each = static_cast<int64_t>(ids.size());
    const int width = (*shard)->store()->row_width();
    std::vector<float> rows(ids.size() * width);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& x : rows) x = u(rng);
    CHECK((*shard)->store()->Put(ids, rows.data()).ok());
    snapshots.push_back(dir + "/shard" + std::to_string(s));
    SnapshotStats stats;
    CHECK(WriteSnapshot(*(*shard)->store(), snapshots.back(), nlohmann::json{{"shard", s}}, &stats).ok());
    bytes += stats.bytes;
  }
  std::vector<double> cat_rates, restore_rates, ratios;
  for (int r = 0; r < FLAGS_repeats; ++r) {
    DropCache(dir);
    auto start = Clock::now();
    {
      std::vector<std::thread> threads;
      for (const std::string& s : snapshots) threads.emplace_back([&s] { CatFile(s + "/rows.bin"); });
      for (auto& t : threads) t.join();
    }
    const double cat_s = Since(start);
    DropCache(dir);
    std::vector<std::unique_ptr<EmbeddingShard>> shards;
    for (int s = 0; s < FLAGS_shards; ++s) {
      auto shard = EmbeddingShard::Create(Spec(s), table);
      CHECK(shard.ok()) << shard.status();
      shards.push_back(std::move(*shard));
    }
    start = Clock::now();
    {
      std::vector<std::thread> threads;
      for (int s = 0; s < FLAGS_shards; ++s) {
        threads.emplace_back([&, s] {
          int64_t restored = 0;
          Status st = RestoreSnapshotSlice(snapshots[s], 0, FLAGS_rows, 0, FLAGS_dim, shards[s].get(), &restored);
          CHECK(st.ok()) << st;
          CHECK_EQ(restored, rows_each);
        });
      }
      for (auto& t : threads) t.join();
    }
    const double restore_s = Since(start);
    const double mb = static_cast<double>(bytes) / 1e6;
    cat_rates.push_back(mb / cat_s);
    restore_rates.push_back(mb / restore_s);
    ratios.push_back(cat_s / restore_s);
    std::printf("%s\n", nlohmann::json{{"repeat", r},
                                       {"mb", mb},
                                       {"cat_mb_per_s", cat_rates.back()},
                                       {"restore_mb_per_s", restore_rates.back()},
                                       {"restore_over_cat", ratios.back()}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
  }
  std::printf("%s\n", nlohmann::json{{"median", true},
                                     {"shards", FLAGS_shards},
                                     {"rows_per_shard", rows_each},
                                     {"cat_mb_per_s", Median(cat_rates)},
                                     {"restore_mb_per_s", Median(restore_rates)},
                                     {"restore_over_cat", Median(ratios)}}
                          .dump()
                          .c_str());
  if (FLAGS_dir.empty()) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return tessera::Main();
}
