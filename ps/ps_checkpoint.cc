// The parameter server's side of checkpoints: snapshot its shards at a step
// boundary, and fill new shards from a checkpoint taken under another plan.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "ps/page_memory.h"
#include "ps/ps_service.h"
#include "ps/row_layout.h"
#include "ps/row_snapshot.h"
#include "ps/shard_parallel.h"
#include "ps/shard_rows.h"

namespace tessera {

using nlohmann::json;

namespace {

// Each file of a snapshot and its size, for the manifest: the master checks
// them all before a restore loads anything, so a file lost or cut short is
// found up front (the rows' own checksum is checked as they load).
json SnapshotFiles(const std::string& dir) {
  json files = json::object();
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    std::error_code size_ec;
    const auto size = it->is_regular_file(size_ec) ? it->file_size(size_ec) : 0;
    if (!size_ec && it->is_regular_file()) files[it->path().filename().string()] = static_cast<int64_t>(size);
  }
  return files;
}

}  // namespace

StatusOr<json> PsService::Snapshot(const std::string& dir, int64_t step) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // Sync mode: the step's last push may still be being applied.
  TESSERA_RETURN_IF_ERROR(gate_.WaitApplied(static_cast<uint64_t>(step), std::chrono::minutes(10)));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  auto shards = Shards();
  std::set<uint32_t> backups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    backups = backups_;
  }
  std::vector<std::pair<uint32_t, EmbeddingShard*>> todo;
  for (const auto& [id, shard] : *shards) {
    // A backup equals its primary, which the checkpoint has already.
    if (backups.count(id) == 0) todo.emplace_back(id, shard.get());
  }
  std::sort(todo.begin(), todo.end());
  // Shards are written side by side: one shard's copy is bound by one core's
  // memory bandwidth and write calls, and the trainers wait for the last.
  std::vector<SnapshotStats> stats(todo.size());
  TESSERA_RETURN_IF_ERROR(ForEachShardInParallel(todo.size(), [&](size_t i) {
    const auto [id, shard] = todo[i];
    const ShardSpec& s = shard->spec();
    json meta = {{"table", shard->table().name},   {"shard_id", id},          {"row_offset", s.row_offset},
                 {"num_rows", s.num_rows},         {"col_offset", s.col_offset}, {"num_cols", s.num_cols},
                 {"optimizer", shard->table().optimizer.type}, {"row_width", shard->store()->row_width()},
                 {"step", step}};
    return WriteSnapshot(*shard->store(), dir + "/shard" + std::to_string(id), meta, &stats[i])
        .WithContext("snapshot of shard " + std::to_string(id));
  }));
  // The shards' names in dir; the master syncs dir's own name with the manifest.
  TESSERA_RETURN_IF_ERROR(SyncDirectory(dir));
  json out = json::array();
  int64_t rows = 0, bytes = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    out.push_back({{"shard_id", todo[i].first},
                   {"path", dir + "/shard" + std::to_string(todo[i].first)},
                   {"rows", stats[i].rows},
                   {"bytes", stats[i].bytes},
                   {"files", SnapshotFiles(dir + "/shard" + std::to_string(todo[i].first))},
                   {"write_s", stats[i].write_s},
                   {"sync_s", stats[i].sync_s}});
    rows += stats[i].rows;
    bytes += stats[i].bytes;
  }
  LOG(INFO) << "ps " << ps_rank_.load() << ": snapshot of " << todo.size() << " shard(s) at step " << step << " in "
            << dir << ": " << rows << " rows, " << bytes << " bytes in "
            << std::chrono::duration<double>(Clock::now() - start).count() << " s";
  ReturnFreedHeapMemory();  // the write buffers
  return out;
}

Status PsService::Restore(const json& restore, const ShardMap& shards) {
  // Shards restore side by side, as they snapshot: each is bound by one
  // core's parsing and copying, and the job waits for the last.
  std::vector<std::pair<uint32_t, EmbeddingShard*>> todo;
  for (const auto& [id, shard] : shards) todo.emplace_back(id, shard.get());
  return ForEachShardInParallel(todo.size(), [&](size_t i) {
    try {
      return RestoreShard(restore, todo[i].first, todo[i].second);
    } catch (const json::exception& e) {
      // A manifest whose fields have the wrong types: on this thread, no
      // handler above catches it.
      return Status::DataLoss("checkpoint manifest: " + std::string(e.what()));
    }
  });
}

Status PsService::RestoreShard(const json& restore, uint32_t id, EmbeddingShard* shard) {
  const ShardSpec& mine = shard->spec();
  int64_t restored = 0;
  for (const json& old : restore.at("shards")) {
    if (old.at("table").get<std::string>() != shard->table().name) continue;
    const int64_t lo = std::max(mine.row_offset, old.at("row_offset").get<int64_t>());
    const int64_t hi = std::min(mine.row_offset + mine.num_rows,
                                old.at("row_offset").get<int64_t>() + old.at("num_rows").get<int64_t>());
    const int old_col = old.at("col_offset").get<int>(), old_cols = old.at("num_cols").get<int>();
    if (lo >= hi || old_col >= mine.col_offset + mine.num_cols || old_col + old_cols <= mine.col_offset) continue;
    TESSERA_RETURN_IF_ERROR(RestoreSnapshotSlice(old.at("path").get<std::string>(), lo, hi, old_col, old_cols, shard,
                                                 &restored)
                                .WithContext("restoring shard " + std::to_string(id) + " from " +
                                             old.at("path").get<std::string>()));
  }
  LOG(INFO) << "ps " << ps_rank_.load() << ": shard " << id << " of table " << shard->table().name << " restored "
            << restored << " row slices";
  return Status::OK();
}

}  // namespace tessera
