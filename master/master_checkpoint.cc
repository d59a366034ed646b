// The master's side of checkpoints: the step barrier, the snapshot of every
// server, the manifest, and finding where to resume.
//
// A checkpoint is taken at a step boundary s: every trainer waits before its
// lookups of step s (periodic checkpoints at multiples of every_steps; on
// demand at the step after the one where the trainers agreed, through their
// allreduce, that one of them had seen the request), so every server has
// applied exactly the gradients of steps < s. Each server then snapshots its
// shards, trainer 0's dense model and optimizer state go next to them, and
// the manifest is written last: until it exists the checkpoint does not.
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "common/checksum.h"
#include "common/messages.h"
#include "master/checkpoint_files.h"
#include "master/checkpoint_manifest.h"
#include "master/master.h"

namespace tessera {

using nlohmann::json;
using std::chrono::milliseconds;

Status Master::RequestCheckpoint(const std::string& why) {
  if (job_.checkpoint.dir.empty()) {
    return Status::FailedPrecondition("the job has no checkpoint.dir: nowhere to write a checkpoint");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    checkpoint_ordered_id_ = ++checkpoint_requested_id_;
  }
  LOG(INFO) << "checkpoint requested (" << why << ")";
  cv_.notify_all();
  return Status::OK();
}

Status Master::RequestRemoveServer(int member, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ps_.find(member);
    if (it == ps_.end()) return Status::NotFound("parameter server " + std::to_string(member) + " is not in the job");
    if (state_ != State::kRunning && state_ != State::kRecovering) {
      return Status::FailedPrecondition("the job is not running");
    }
    int staying = 0;
    for (const auto& [id, p] : ps_) staying += id != member && !p.leaving;
    if (staying == 0) {
      return Status::FailedPrecondition("parameter server " + std::to_string(member) +
                                        " is the job's last: nothing could hold its rows");
    }
    it->second.leaving = true;
  }
  LOG(INFO) << "parameter server " << member << " leaves the job at the next step boundary (" << why << ")";
  cv_.notify_all();
  return Status::OK();
}

Status Master::ServeBarrier(std::unique_lock<std::mutex>* lock) {
  int64_t step = -1;
  std::string why;
  auto training = [this](int r) { return trainers_[r].has_value() && !trainers_[r]->done; };
  switch (barrier_.Check(training, &step, &why)) {
    case StepBarrier<Responder>::Outcome::kWaiting: return Status::OK();
    // Arriving apart is a bug in the trainers' agreement; waiting would hang.
    case StepBarrier<Responder>::Outcome::kMismatch: return Status::Internal(why);
    case StepBarrier<Responder>::Outcome::kComplete: break;
  }
  // The trainers' pause runs from the first arrival to the replies below.
  const Clock::time_point paused_at = barrier_.first_arrival();
  const double barrier_wait_s = std::chrono::duration<double>(Clock::now() - paused_at).count();
  std::vector<Responder> waiting = barrier_.TakeAll();
  const std::string state = std::move(barrier_state_);
  barrier_state_.clear();
  const int64_t serving = checkpoint_requested_id_;
  const bool periodic = job_.checkpoint.every_steps > 0 && step % job_.checkpoint.every_steps == 0;
  const bool ordered = checkpoint_ordered_id_ > checkpoint_served_id_;
  const bool checkpoint = !job_.checkpoint.dir.empty() && (periodic || ordered);
  const bool change = ServerChangePending();
  const std::vector<int> next = NextServers();
  Status st;
  bool restarted = false, taken = false;
  if (serving > checkpoint_served_id_ || checkpoint || change) {
    lock->unlock();
    if (checkpoint) {
      std::string dir;
      json manifest;
      st = TakeCheckpoint(step, state, &dir, &manifest);
      taken = st.ok();
      if (!st.ok()) st = OutliveFailedCheckpoint(step, st);
    }
    if (st.ok() && change) {
      // The rows that change servers go there from their old owners;
      // nothing is rolled back.
      st = MigrateServers(next, step, state);
      restarted = st.ok();
      if (restarted) {
        const double pause_s = std::chrono::duration<double>(Clock::now() - paused_at).count();
        std::cout << "[master] the trainers paused " << pause_s << " s at step " << step
                  << " for the change of servers" << std::endl;
        std::lock_guard<std::mutex> relock(mu_);
        migration_stats_.back()["pause_s"] = pause_s;
      }
    }
    lock->lock();
    if (st.ok()) checkpoint_served_id_ = std::max(checkpoint_served_id_, serving);
  }
  for (Responder& r : waiting) {
    if (st.ok()) {
      r.Reply(EncodeJsonReply(r.request_header(), json{{"action", restarted ? "restart" : "continue"},
                                                       {"served", checkpoint_served_id_},
                                                       {"generation", generation_}}));
    } else {
      r.ReplyError(st);
    }
  }
  if (taken) {
    const double pause_s = std::chrono::duration<double>(Clock::now() - paused_at).count();
    if (!checkpoints_.empty() && checkpoints_.back().value("step", int64_t{-1}) == step) {
      checkpoints_.back()["pause_s"] = pause_s;
      checkpoints_.back()["barrier_wait_s"] = barrier_wait_s;
    }
    // Old checkpoints go once the trainers are on their way: deleting them
    // is no part of the new one.
    lock->unlock();
    Status pruned = PruneCheckpoints(job_.checkpoint.dir, job_.checkpoint.keep);
    lock->lock();
    if (!pruned.ok()) LOG(WARNING) << "checkpoint at step " << step << ": " << pruned;
  }
  if (!st.ok() && job_.runtime.recover_lost_servers) {
    int dead = -1;
    if (!FindDeadMember(Clock::now(), &dead).ok() && dead >= 0) {
      // The monitor recovers from the lost server next; the trainers were told.
      LOG(WARNING) << "checkpoint at step " << step << " failed: " << st;
      return Status::OK();
    }
  }
  return st;
}

Status Master::OutliveFailedCheckpoint(int64_t step, const Status& failure) {
  // A lost member is recovered from by the monitor (the trainers are told
  // the error); a bug is not to be trained past.
  if (failure.code() == StatusCode::kInternal) return failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int dead_ps = -1, dead_trainer = -1;
    if (!FindDeadMember(Clock::now(), &dead_ps, &dead_trainer).ok()) return failure;
    failed_checkpoints_.push_back({{"step", step}, {"error", failure.ToString()}});
  }
  // Every member lives: the checkpoint's storage failed (a full disk, a
  // lost mount, a permission). Days of training are worth more than one
  // checkpoint: the job goes on, the incomplete folder goes (it holds no
  // manifest, so nothing would load it, and it may be what fills the disk),
  // and the next interval tries again.
  const std::string dir = CheckpointDir(job_.checkpoint.dir, step);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  const std::vector<std::string> complete = CompleteCheckpoints(job_.checkpoint.dir);
  std::cout << "[master] CHECKPOINT FAILED at step " << step << ": " << failure.ToString()
            << "; the job goes on, and a lost member now rolls it back to "
            << (complete.empty() ? std::string("step 0 (no complete checkpoint)") : complete.front())
            << (ec ? "; the incomplete folder " + dir + " could not be removed: " + ec.message() : std::string())
            << std::endl;
  return Status::OK();
}

Status Master::TakeCheckpoint(int64_t step, const std::string& trainer_state, std::string* dir_out,
                              json* manifest_out) {
  const auto start = Clock::now();
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  if (trainer_state.empty()) return Status::Internal("trainer 0 sent no state to the checkpoint barrier");
  const std::string root = job_.checkpoint.dir;
  const std::string dir = CheckpointDir(root, step);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // an earlier attempt at this step, never completed
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create checkpoint folder " + dir + ": " + ec.message());
  std::vector<int> members;
  json plan_json;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = generation_ps_;
    plan_json = plan_->ToJson();
  }

  // Every server snapshots at once; the trainers wait for the slowest, not
  // for the sum. A server that dies mid-snapshot ends the checkpoint at once.
  std::vector<json> bodies;
  for (size_t rank = 0; rank < members.size(); ++rank) {
    bodies.push_back(SnapshotRequest{dir + "/ps" + std::to_string(rank), step}.ToJson());
  }
  const ServerCalls calls = StartServerCalls(members, Opcode::kSnapshot, bodies, milliseconds(600000));

  // Trainer 0's state goes to disk while the servers write theirs.
  const auto state_start = Clock::now();
  Status state_st = WriteFileDurably(dir + "/trainer.params", trainer_state);
  const double trainer_state_s = since(state_start);

  const std::vector<ServerReply> replies = AwaitServerCalls(calls);
  const double snapshot_s = since(start);

  json shards = json::array(), servers = json::array();
  int64_t rows = 0, bytes = static_cast<int64_t>(trainer_state.size());
  for (size_t rank = 0; rank < members.size(); ++rank) {
    const StatusOr<json>& reply = replies[rank].body;
    if (!reply.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      return reply.status().WithContext("checkpoint of " + DescribeServer(members[rank]));
    }
    json server = {{"member", members[rank]}, {"seconds", replies[rank].seconds}, {"rows", 0}, {"bytes", 0},
                   {"write_s", 0.0}, {"sync_s", 0.0}};
    const json listed = reply->value("shards", json::array());
    for (const json& s : listed.is_array() ? listed : json::array()) {
      if (!s.is_object()) continue;
      // Shards are written side by side: these are sums, not wall time.
      for (const char* k : {"rows", "bytes", "write_s", "sync_s"}) {
        auto v = s.find(k);
        if (v != s.end() && v->is_number()) server[k] = server[k].get<double>() + v->get<double>();
      }
      // The manifest keeps what the server says of the shard, less its
      // timings, with its path relative to the checkpoint's folder (so that
      // the folder loads wherever it is moved).
      json entry = s;
      entry.erase("write_s");
      entry.erase("sync_s");
      if (entry.contains("path") && entry["path"].is_string()) {
        const auto relative = std::filesystem::path(entry["path"].get<std::string>()).lexically_relative(dir);
        if (!relative.empty() && relative.begin()->string() != "..") entry["path"] = relative.string();
      }
      shards.push_back(std::move(entry));
    }
    for (const char* k : {"rows", "bytes"}) server[k] = static_cast<int64_t>(server[k].get<double>());
    rows += server["rows"].get<int64_t>();
    bytes += server["bytes"].get<int64_t>();
    servers.push_back(std::move(server));
  }
  if (!state_st.ok()) return state_st.WithContext("checkpoint at step " + std::to_string(step));
  if (options_.crash_in_checkpoint > 0 && ++checkpoints_attempted_ == options_.crash_in_checkpoint &&
      options_.crash_hook) {
    LOG(ERROR) << "crashing in the middle of checkpoint " << checkpoints_attempted_ << " (test fault injection)";
    options_.crash_hook();
  }
  json manifest = MakeManifest(step, job_.ToJson(), plan_json, std::move(shards));
  // What the trainer state must be when read back.
  Checksum64 state_sum;
  state_sum.Update(trainer_state.data(), trainer_state.size());
  manifest["trainer_state_bytes"] = static_cast<int64_t>(trainer_state.size());
  manifest["trainer_state_checksum"] = state_sum.Final();
  const auto manifest_start = Clock::now();
  int64_t manifest_bytes = 0;
  TESSERA_RETURN_IF_ERROR(WriteManifest(dir, manifest, &manifest_bytes));
  const double manifest_s = since(manifest_start);
  bytes += manifest_bytes;
  const double seconds = since(start);
  std::cout << "[master] checkpoint at step " << step << " complete in " << dir << " (" << seconds << " s); "
            << rows << " rows, " << bytes / 1e6 << " MB" << std::endl;
  *dir_out = dir;
  *manifest_out = std::move(manifest);
  std::lock_guard<std::mutex> lock(mu_);
  checkpoints_.push_back({{"step", step},
                          {"dir", dir},
                          {"seconds", seconds},
                          {"rows", rows},
                          {"bytes", bytes},
                          {"snapshot_s", snapshot_s},
                          {"trainer_state_s", trainer_state_s},
                          {"manifest_s", manifest_s},
                          {"servers", servers}});
  return Status::OK();
}

StatusOr<Master::RestorePoint> Master::NewestRestorePoint(bool required) const {
  if (job_.checkpoint.dir.empty()) {
    if (required) return Status::InvalidArgument("--resume needs checkpoint.dir in the job config");
    return RestorePoint{};
  }
  // The newest checkpoint that is whole; a damaged one is named, never
  // taken for missing rows (they would be re-initialised silently).
  Status first_damage;
  for (const std::string& dir : CompleteCheckpoints(job_.checkpoint.dir)) {
    auto manifest = ReadManifest(dir);
    auto point = manifest.ok() ? ReadRestorePoint(dir, *manifest) : StatusOr<RestorePoint>(manifest.status());
    if (point.ok()) return point;
    if (point.status().code() != StatusCode::kDataLoss) return point.status();  // not this job's: no fallback
    std::cout << "[master] checkpoint " << dir << " is damaged (" << point.status().message()
              << "); trying an older one" << std::endl;
    if (first_damage.ok()) first_damage = point.status();
  }
  if (!first_damage.ok()) {
    return Status::DataLoss("no usable checkpoint under " + job_.checkpoint.dir + ": the newest: " +
                            first_damage.message());
  }
  if (!required) return RestorePoint{};
  return Status::NotFound("no complete checkpoint under " + job_.checkpoint.dir);
}

StatusOr<Master::RestorePoint> Master::ReadRestorePoint(const std::string& dir, const json& manifest) const {
  auto checked = CheckManifest(manifest, job_);
  if (!checked.ok()) return checked.status().WithContext("checkpoint " + dir);
  // Every shard on disk: a missing one would leave its rows at their
  // initial values without a word.
  json restore = json::array();
  for (size_t id = 0; id < checked->shards.size(); ++id) {
    const ManifestShard& s = checked->shards[id];
    const std::string path = ResolveShardPath(dir, s.path);
    if (!std::filesystem::is_directory(path)) {
      return Status::DataLoss("checkpoint " + dir + ": the snapshot of shard " + std::to_string(id) + " (" + path +
                              ") is missing");
    }
    // Every file the server wrote, at the size it wrote.
    for (const auto& [name, want] : s.files) {
      const std::string file = path + "/" + name;
      std::error_code ec;
      const auto size = std::filesystem::file_size(file, ec);
      if (ec || static_cast<int64_t>(size) != want) {
        return Status::DataLoss("checkpoint " + dir + ": " + file + " " +
                                (ec ? "is missing"
                                    : "has " + std::to_string(size) + " bytes, the manifest says " +
                                          std::to_string(want)));
      }
    }
    restore.push_back({{"table", s.table},
                       {"row_offset", s.spec.row_offset},
                       {"num_rows", s.spec.num_rows},
                       {"col_offset", s.spec.col_offset},
                       {"num_cols", s.spec.num_cols},
                       {"path", path}});
  }
  std::ifstream in(dir + "/" + checked->trainer_state, std::ios::binary);
  if (!in) return Status::DataLoss("checkpoint " + dir + " has no trainer state");
  std::stringstream ss;
  ss << in.rdbuf();
  RestorePoint point;
  point.dir = dir;
  point.trainer_state = ss.str();
  if (checked->trainer_state_summed) {
    Checksum64 sum;
    sum.Update(point.trainer_state.data(), point.trainer_state.size());
    if (static_cast<int64_t>(point.trainer_state.size()) != checked->trainer_state_bytes ||
        sum.Final() != checked->trainer_state_checksum) {
      return Status::DataLoss("checkpoint " + dir + ": its trainer state (" +
                              std::to_string(point.trainer_state.size()) +
                              " bytes) is not what was written: size or checksum differ from the manifest's");
    }
  }
  point.step = checked->step;
  point.restore = {{"step", point.step}, {"shards", restore}};
  return point;
}

}  // namespace tessera
