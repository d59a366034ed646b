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
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <glog/logging.h>

#include "common/messages.h"
#include "master/checkpoint_files.h"
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
    ++checkpoint_requested_id_;
  }
  LOG(INFO) << "checkpoint requested (" << why << ")";
  cv_.notify_all();
  return Status::OK();
}

Status Master::ServeBarrier(std::unique_lock<std::mutex>* lock) {
  int64_t lo = INT64_MAX, hi = -1;
  for (size_t r = 0; r < trainers_.size(); ++r) {
    if (trainers_[r]->done) continue;
    if (!barrier_[r]) return Status::OK();  // someone is still training
    lo = std::min(lo, barrier_[r]->step);
    hi = std::max(hi, barrier_[r]->step);
  }
  if (hi < 0) return Status::OK();
  if (lo < hi) {
    // Trainers decide where to stop together; arriving apart is a bug in
    // that agreement, and waiting would hang the job.
    return Status::Internal("trainers reached the checkpoint barrier at different steps (" + std::to_string(lo) +
                            " and " + std::to_string(hi) + ")");
  }
  std::vector<Responder> waiting;
  for (auto& a : barrier_) {
    if (a) waiting.push_back(std::move(a->responder));
    a.reset();
  }
  const std::string state = std::move(barrier_state_);
  barrier_state_.clear();
  const int64_t serving = checkpoint_requested_id_;
  const bool periodic = job_.checkpoint.every_steps > 0 && hi % job_.checkpoint.every_steps == 0;
  Status st;
  if (serving > checkpoint_served_id_ || periodic) {
    lock->unlock();
    st = TakeCheckpoint(hi, state);
    lock->lock();
    if (st.ok()) checkpoint_served_id_ = std::max(checkpoint_served_id_, serving);
  }
  for (Responder& r : waiting) {
    if (st.ok()) {
      r.Reply(EncodeJsonReply(r.request_header(), json{{"action", "continue"}, {"served", checkpoint_served_id_}}));
    } else {
      r.ReplyError(st);
    }
  }
  return st;
}

Status Master::TakeCheckpoint(int64_t step, const std::string& trainer_state) {
  const auto start = Clock::now();
  if (trainer_state.empty()) return Status::Internal("trainer 0 sent no state to the checkpoint barrier");
  const std::string root = job_.checkpoint.dir;
  const std::string dir = CheckpointDir(root, step);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // an earlier attempt at this step, never completed
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create checkpoint folder " + dir + ": " + ec.message());
  json shards = json::array();
  for (int ps = 0; ps < static_cast<int>(ps_peers_.size()); ++ps) {
    Status st;
    json reply = CallServer(ps, Opcode::kSnapshot, json{{"dir", dir + "/ps" + std::to_string(ps)}, {"step", step}},
                            milliseconds(600000), &st);
    if (!st.ok()) return st.WithContext("checkpoint of parameter server " + std::to_string(ps));
    for (const json& s : reply.value("shards", json::array())) shards.push_back(s);
  }
  {
    std::ofstream out(dir + "/trainer.params", std::ios::binary | std::ios::trunc);
    out.write(trainer_state.data(), static_cast<std::streamsize>(trainer_state.size()));
    out.flush();
    if (!out) return Status::ResourceExhausted("cannot write " + dir + "/trainer.params (disk full?)");
  }
  if (options_.crash_in_checkpoint > 0 && ++checkpoints_attempted_ == options_.crash_in_checkpoint) {
    LOG(ERROR) << "crashing in the middle of checkpoint " << checkpoints_attempted_ << " (test fault injection)";
    std::_Exit(9);
  }
  json manifest = {{"format", 1},
                   {"step", step},
                   {"job", job_.ToJson()},
                   {"plan", plan_->ToJson()},
                   {"shards", shards},
                   {"trainer_state", "trainer.params"}};
  TESSERA_RETURN_IF_ERROR(WriteManifest(dir, manifest));
  TESSERA_RETURN_IF_ERROR(PruneCheckpoints(root, job_.checkpoint.keep));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "[master] checkpoint at step " << step << " complete in " << dir << " (" << seconds << " s)"
            << std::endl;
  std::lock_guard<std::mutex> lock(mu_);
  checkpoints_.push_back({{"step", step}, {"dir", dir}, {"seconds", seconds}});
  return Status::OK();
}

Status Master::LoadResumePoint() {
  if (job_.checkpoint.dir.empty()) return Status::InvalidArgument("--resume needs checkpoint.dir in the job config");
  std::string dir;
  TESSERA_ASSIGN_OR_RETURN(json manifest, FindNewestCheckpoint(job_.checkpoint.dir, &dir));
  auto old_job = ParseJobConfigJson(manifest.at("job"), "");
  if (!old_job.ok()) return old_job.status().WithContext("checkpoint " + dir);
  auto old_plan = ShardingPlan::FromJson(manifest.at("plan"));
  if (!old_plan.ok()) return old_plan.status().WithContext("checkpoint " + dir);
  // The tables must be the same tables; their placement may change.
  if (old_job->tables.size() != job_.tables.size()) {
    return Status::FailedPrecondition("checkpoint " + dir + " has " + std::to_string(old_job->tables.size()) +
                                      " tables, the job " + std::to_string(job_.tables.size()));
  }
  for (size_t t = 0; t < job_.tables.size(); ++t) {
    const TableConfig &a = old_job->tables[t], &b = job_.tables[t];
    if (a.name != b.name || a.num_embeddings != b.num_embeddings || a.embedding_dim != b.embedding_dim ||
        a.optimizer.type != b.optimizer.type) {
      return Status::FailedPrecondition("table " + b.name + " differs from the checkpoint's table " + a.name +
                                        " (name, rows, dim and optimizer must match)");
    }
  }
  json restore = json::array();
  for (const json& s : manifest.at("shards")) {
    const uint32_t id = s.at("shard_id").get<uint32_t>();
    if (id >= old_plan->shards.size()) return Status::DataLoss("checkpoint " + dir + ": unknown shard in manifest");
    const ShardSpec& spec = old_plan->shards[id];
    restore.push_back({{"table", job_.tables[spec.table].name},
                       {"row_offset", spec.row_offset},
                       {"num_rows", spec.num_rows},
                       {"col_offset", spec.col_offset},
                       {"num_cols", spec.num_cols},
                       {"path", s.at("path")}});
  }
  std::ifstream in(dir + "/" + manifest.value("trainer_state", std::string("trainer.params")), std::ios::binary);
  if (!in) return Status::DataLoss("checkpoint " + dir + " has no trainer state");
  std::stringstream ss;
  ss << in.rdbuf();
  resume_state_ = ss.str();
  resume_step_ = manifest.at("step").get<int64_t>();
  resume_restore_ = {{"step", resume_step_}, {"shards", restore}};
  std::cout << "[master] resuming from " << dir << " at step " << resume_step_ << std::endl;
  return Status::OK();
}

}  // namespace tessera
