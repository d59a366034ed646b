// Writes the seed corpora of the binary and generated targets from the
// encoders themselves, so the seeds are what the code sends and writes:
//   tessera_fuzz_seeds tests/fuzz/corpus
// Run it again when a format changes. Seeds of text a person writes (job
// configs, Criteo lines) are kept as files in the corpus folders instead.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/job_config.h"
#include "common/messages.h"
#include "common/param_file.h"
#include "common/sharding_plan.h"
#include "master/checkpoint_files.h"
#include "master/checkpoint_manifest.h"
#include "tests/fuzz/fuzz_frames.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class SeedWriter {
 public:
  explicit SeedWriter(fs::path root) : root_(std::move(root)) {}

  void Write(const std::string& target, const std::string& name, const std::string& bytes) {
    fs::create_directories(root_ / target);
    std::ofstream(root_ / target / name, std::ios::binary) << bytes;
  }
  // Header Frame* as the transport receives it, for the wire target.
  void WriteWire(const std::string& name, Message m) {
    m.header.frame_count = static_cast<uint16_t>(m.frames.size());
    std::vector<zmq::message_t> parts;
    uint8_t header[kHeaderBytes];
    EncodeHeader(m.header, header);
    parts.emplace_back(header, kHeaderBytes);
    for (zmq::message_t& f : m.frames) parts.push_back(std::move(f));
    Write("fuzz_wire_message", name, JoinFrames(parts));
  }

 private:
  fs::path root_;
};

// Two tables, the second cut in two row ranges: what a small job's plan is.
ShardingPlan SamplePlan() {
  ShardingPlan plan;
  plan.version = 3;
  plan.num_ps = 2;
  plan.shards = {{0, 0, 0, 100, 0, 8, 0, -1}, {1, 1, 0, 50, 0, 4, 0, 1}, {2, 1, 50, 50, 0, 4, 1, 0}};
  plan.tables = {{0, ShardingType::kTableWise, {0}}, {1, ShardingType::kRowWise, {1, 2}}};
  return plan;
}

const char kSampleJob[] = R"({
  "name": "seed", "cluster": {"num_ps": 2, "num_trainers": 2, "replicas": 2},
  "tables": [
    {"name": "a", "num_embeddings": 100, "embedding_dim": 8, "feature_names": ["f0"]},
    {"name": "b", "num_embeddings": 100, "embedding_dim": 4, "feature_names": ["f1", "f2"], "pooling": "MEAN",
     "optimizer": {"type": "adagrad", "lr": 0.05}}],
  "model": {"num_dense_features": 4, "bottom_mlp": [8], "top_mlp": [4, 1]},
  "data": {"source": "synthetic", "num_examples": 1000, "ids_per_bag": 2},
  "training": {"batch_size": 16, "steps": 10}
})";

void WriteMessages(SeedWriter* w) {
  auto lookup = [] {
    return EncodeLookupRequest(LookupMeta{1, 0, 7}, {{0, 2, 3, kEntrySumPartial}, {2, 1, 2, kEntryWeighted}},
                               {1, 2, 2}, {4, 5, 6, 60, 99}, {0.5f, 2.0f});
  };
  w->Write("fuzz_lookup_request", "two_entries", JoinFrames(lookup().frames));
  w->Write("fuzz_lookup_request", "empty",
           JoinFrames(EncodeLookupRequest(LookupMeta{0, kLookupNoContext, 0}, {}, {}, {}, {}).frames));
  w->Write("fuzz_lookup_request", "ids32",
           JoinFrames(EncodeLookupRequest(LookupMeta{1, kLookupIds32, 7}, {{0, 2, 3, 0}}, {1, 2}, {4, 5, 4294967295},
                                          {})
                          .frames));
  w->Write("fuzz_lookup_request", "context_only",
           JoinFrames(EncodeLookupRequest(LookupMeta{2, 0, 9}, {{1, 1, 1, kEntryContextOnly}}, {1}, {3}, {}).frames));
  Message bad = lookup();
  bad.frames.pop_back();
  w->Write("fuzz_lookup_request", "missing_frame", JoinFrames(bad.frames));

  auto push = [] {
    return EncodePushRequest(PushMeta{1, 0, 7}, {{0, 2, 8, 0}, {2, 1, 4, 0}}, std::vector<float>(20, 0.25f));
  };
  w->Write("fuzz_push_request", "two_entries", JoinFrames(push().frames));
  w->Write("fuzz_push_request", "empty", JoinFrames(EncodePushRequest(PushMeta{}, {}, {}).frames));
  w->Write("fuzz_push_request", "short_grads",
           JoinFrames(EncodePushRequest(PushMeta{}, {{0, 2, 2, 0}}, {1, 2, 3}).frames));
  w->Write("fuzz_push_request", "bf16_grads",
           JoinFrames(EncodePushRequest(PushMeta{1, kPushBf16Grads, 7}, {{0, 2, 3, 0}}, {1, -2, 0.1f, 3, 1e-3f, 5})
                          .frames));

  Header request;
  request.op = Opcode::kLookup;
  request.request_id = 11;
  auto response = [&](uint8_t status, uint16_t expected, const Message& m) {
    const char prefix[] = {static_cast<char>(status), static_cast<char>(expected & 0xff),
                           static_cast<char>(expected >> 8)};
    return std::string(prefix, sizeof(prefix)) + JoinFrames(m.frames);
  };
  w->Write("fuzz_lookup_response", "four_values", response(0, 4, EncodeLookupResponse(request, {1, 2, 3, 4})));
  w->Write("fuzz_lookup_response", "bf16_values",
           response(0x80, 4, EncodeLookupResponse(request, {1, 0.1f, -3, 7}, /*bf16=*/true)));
  w->Write("fuzz_lookup_response", "plan_changed",
           response(static_cast<uint8_t>(StatusCode::kPlanChanged), 0,
                    MakeErrorReply(request, Status::PlanChanged("plan version 2 is gone"))));

  const json heartbeat = HeartbeatReply{"running", 3, "", 0, false}.ToJson();
  auto json_frames = [](uint8_t status, uint8_t index, const Message& m) {
    return std::string{static_cast<char>(status), static_cast<char>(index)} + JoinFrames(m.frames);
  };
  w->Write("fuzz_json_frames", "heartbeat_reply", json_frames(0, 0, EncodeJson(Opcode::kHeartbeat, heartbeat)));
  Message barrier = EncodeJson(Opcode::kCheckpointBarrier, BarrierRequest{{0, 1}, 16, 2}.ToJson());
  barrier.AddString("trainer state bytes");
  w->Write("fuzz_json_frames", "barrier_with_state", json_frames(0, 1, barrier));
  w->Write("fuzz_json_frames", "error_reply",
           json_frames(static_cast<uint8_t>(StatusCode::kNotFound), 0,
                       MakeErrorReply(request, Status::NotFound("no such member"))));

  w->WriteWire("lookup", lookup());
  w->WriteWire("push", push());
  Message reply = EncodeJsonReply(request, heartbeat);
  w->WriteWire("json_reply", std::move(reply));
  w->WriteWire("error_reply", MakeErrorReply(request, Status::PlanChanged("plan version 2 is gone")));
  w->WriteWire("no_frames", Message(Opcode::kShutdown));
}

void WriteControl(SeedWriter* w) {
  auto body = [](int kind, const json& j) { return std::string(1, static_cast<char>(kind)) + j.dump(); };
  RegisterRequest ps{"ps", "host-a", 4242, 0, "tcp://10.0.0.2:4000", 1 << 30};
  RegisterRequest trainer{"trainer", "host-b", 4243, 2, "", 0, 1, 2};
  w->Write("fuzz_control_messages", "register_ps", body(0, ps.ToJson()));
  w->Write("fuzz_control_messages", "register_trainer", body(0, trainer.ToJson()));
  w->Write("fuzz_control_messages", "register_reply", body(1, RegisterReply{1, 500, 10000, 60000, 77, 3}.ToJson()));
  HeartbeatRequest hb;
  hb.role = "trainer";
  hb.rank = 1;
  hb.incarnation = 3;
  hb.master_id = 77;
  hb.steps_done = 40;
  hb.progress = TrainerProgress{40, 0.52, 5120, 900.5, 2};
  w->Write("fuzz_control_messages", "heartbeat_trainer", body(2, hb.ToJson()));
  HeartbeatRequest server;
  server.role = "ps";
  server.master_id = 77;
  server.stats = {{"lookups", 12}, {"shards", json::array({{{"rows", 100}}})}};
  w->Write("fuzz_control_messages", "heartbeat_ps", body(2, server.ToJson()));
  w->Write("fuzz_control_messages", "heartbeat_reply", body(3, HeartbeatReply{"aborted", 2, "lost", 5, true}.ToJson()));
  w->Write("fuzz_control_messages", "wait_start", body(4, WaitStartRequest{{1, 3}, 2}.ToJson()));
  auto job = ParseJobConfig(kSampleJob, "");
  StartInfo start{job->ToJson(), SamplePlan().ToJson(), {"tcp://a:1", "tcp://b:2"}, "/tmp/dump", 20, 3, false};
  w->Write("fuzz_control_messages", "start_info", body(5, start.ToJson()));
  w->Write("fuzz_control_messages", "barrier", body(6, BarrierRequest{{0, 1}, 16, 2}.ToJson()));
  w->Write("fuzz_control_messages", "barrier_reply", body(7, BarrierReply{"restart", 4, 3}.ToJson()));
  w->Write("fuzz_control_messages", "report_done",
           body(8, json{{"rank", 0}, {"incarnation", 1}, {"ok", true}, {"steps", 10}, {"losses", {0.7, 0.6}}}));
  w->Write("fuzz_control_messages", "command_remove_ps", body(9, Command{"remove_ps", 1, "drain"}.ToJson()));
  w->Write("fuzz_control_messages", "command_checkpoint", body(9, Command{"checkpoint", -1, ""}.ToJson()));
  w->Write("fuzz_control_messages", "plan", body(10, SamplePlan().ToJson()));
  w->Write("fuzz_control_messages", "not_an_object", body(2, json::array({1, 2})));
  MigrateRequest migrate;
  migrate.job = job->ToJson();
  migrate.plan = SamplePlan().ToJson();
  migrate.rank = 1;
  migrate.step = 300;
  migrate.from_version = 1;
  migrate.from_plan = SamplePlan().ToJson();
  migrate.sources = {"tcp://10.0.0.2:4000", "tcp://10.0.0.3:4000"};
  migrate.fetchers = {std::string("\x11routing-id-of-a"), std::string("\x22routing-id-of-b")};
  w->Write("fuzz_control_messages", "migrate", body(11, migrate.ToJson()));
  FetchRowsRequest fetch;
  fetch.version = 1;
  fetch.shard = 2;
  fetch.row_begin = 100;
  fetch.row_end = 200;
  fetch.after = 150;
  fetch.max_rows = 4096;
  w->Write("fuzz_control_messages", "fetch_rows", body(12, fetch.ToJson()));
}

void WriteManifests(SeedWriter* w, const fs::path& scratch) {
  auto job = ParseJobConfig(kSampleJob, "");
  const json shards = json::array({{{"shard_id", 0}, {"path", "ps0/shard0"}, {"rows", 100}, {"bytes", 3200}},
                                   {{"shard_id", 1}, {"path", "ps0/shard1"}, {"rows", 50}, {"bytes", 1600}},
                                   {{"shard_id", 2}, {"path", "ps1/shard2"}, {"rows", 50}, {"bytes", 1600}}});
  auto write = [&](const std::string& name, const json& manifest) {
    if (!WriteManifest(scratch.string(), manifest).ok()) {
      std::cerr << "cannot write a manifest in " << scratch << "\n";
      std::exit(1);
    }
    std::ifstream in(scratch / "manifest.json", std::ios::binary);
    w->Write("fuzz_manifest", name, std::string(std::istreambuf_iterator<char>(in), {}));
  };
  write("complete", MakeManifest(1000, job->ToJson(), SamplePlan().ToJson(), shards));
  json lacking = shards;
  lacking.erase(1);
  write("lacking_shard", MakeManifest(1000, job->ToJson(), SamplePlan().ToJson(), lacking));
}

void WriteParams(SeedWriter* w) {
  auto state = EncodeParams({ParamArray::Floats("dense/w0", 2, 3, {1, 2, 3, 4, 5, 6}),
                             ParamArray::Ints("data_parallel/ids", 1, 2, {7, 8}),
                             ParamArray::Text("optimizer", R"({"type":"adam","step":3})")});
  w->Write("fuzz_param_file", "trainer_state", *state);
  w->Write("fuzz_param_file", "empty", *EncodeParams({}));
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tessera_fuzz_seeds CORPUS_DIR (tests/fuzz/corpus)\n";
    return 2;
  }
  tessera::SeedWriter w(argv[1]);
  tessera::WriteMessages(&w);
  tessera::WriteControl(&w);
  // WriteManifest writes into a checkpoint folder: a fresh one, removed after.
  std::string scratch = (std::filesystem::temp_directory_path() / "tessera_fuzz_seeds_XXXXXX").string();
  if (mkdtemp(scratch.data()) == nullptr) {
    std::cerr << "cannot create a temporary folder\n";
    return 1;
  }
  tessera::WriteManifests(&w, scratch);
  std::filesystem::remove_all(scratch);
  tessera::WriteParams(&w);
  return 0;
}
