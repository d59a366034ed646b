// PsService over a real RpcServer on loopback: lookups, pushes, sync-mode
// step barrier, exactly-once, and every validation error (each answered with
// an error while the server keeps serving and nothing is applied).
#include "ps/ps_service.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "common/bfloat16.h"
#include "common/control_messages.h"
#include "common/messages.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "kernels/row_init.h"
#include "ps/store_factory.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

JobConfig MakeJob(const std::string& consistency, int trainers) {
  const std::string text = R"({
    "cluster": {"num_ps": 1, "num_trainers": )" + std::to_string(trainers) + R"(},
    "tables": [
      {"name": "a", "num_embeddings": 100, "embedding_dim": 4, "feature_names": ["fa"],
       "optimizer": {"type": "sgd", "lr": 0.5}},
      {"name": "b", "num_embeddings": 50, "embedding_dim": 3, "feature_names": ["fb"], "pooling": "MEAN",
       "optimizer": {"type": "adagrad", "lr": 0.1}}
    ],
    "model": {"top_mlp": [1]},
    "data": {"source": "synthetic"},
    "training": {"batch_size": 2, "steps": 10, "consistency": ")" + consistency + R"("}
  })";
  auto job = ParseJobConfig(text, "");
  CHECK(job.ok()) << job.status();
  return *job;
}

class PsServiceTest : public ::testing::Test {
 protected:
  // `open`: the service serves any connection (the test is master and
  // trainers at once); otherwise only those it is told of.
  void Start(const std::string& consistency, int trainers, RowStoreFactory store_factory = nullptr,
             bool open = true, size_t max_reply_values = size_t{1} << 28) {
    job_ = MakeJob(consistency, trainers);
    if (context_ttl_ms_ > 0) job_.runtime.context_ttl_ms = context_ttl_ms_;
    // Every table whole on server 0: shard id = table index.
    plan_ = ShardingPlan{};
    plan_.num_ps = 1;
    for (int t = 0; t < static_cast<int>(job_.tables.size()); ++t) {
      ShardSpec s;
      s.shard_id = t;
      s.table = t;
      s.num_rows = job_.tables[t].num_embeddings;
      s.num_cols = job_.tables[t].embedding_dim;
      plan_.shards.push_back(s);
      plan_.tables.push_back(TablePlan{t, ShardingType::kTableWise, {static_cast<uint32_t>(t)}});
    }
    PsServiceOptions options{0, std::move(store_factory)};
    options.open_to_any_sender = open;
    options.max_reply_values = max_reply_values;
    service_ = std::make_unique<PsService>(options);
    Status created = service_->CreateShards(job_, plan_);
    ASSERT_TRUE(created.ok()) << created;
    auto server = RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 2}, [this](Message&& m, Responder r) {
      service_->Handle(std::move(m), std::move(r));
    });
    ASSERT_TRUE(server.ok());
    server_ = std::move(server).value();
    client_ = std::move(RpcClient::Create()).value();
    peer_ = *client_->Connect(server_->endpoint());
  }
  void TearDown() override {
    Stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Every tier at once: a GPU tier (host slots) of 16 rows per shard over 1
  // KiB of host memory per server over RocksDB, so most requests evict,
  // write back and fetch.
  RowStoreFactory AllTiers() {
    ShardStorageOptions o;
    o.host_bytes = 1024;
    o.gpu_bytes = 1;
    o.gpu_tier_on_host = true;
    o.gpu_min_slots = 16;
    o.write_back_bytes = 256;  // about 10 rows: written-back rows reach RocksDB itself
    return WithRocksDb(o);
  }
  // Host memory for a few rows per server over RocksDB, no GPU tier.
  RowStoreFactory RocksDbTier() {
    ShardStorageOptions o;
    o.host_bytes = 1024;
    o.write_back_bytes = 256;
    return WithRocksDb(o);
  }
  // `o` with its RocksDB in a new folder, removed at the end.
  RowStoreFactory WithRocksDb(ShardStorageOptions o) {
    std::string tmpl = ::testing::TempDir() + "ps_service_test.XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
    o.rocksdb_path = dir_;
    return MakeRowStoreFactory(o);
  }

  int64_t RocksDbTierHitsOfShard0() {
    const nlohmann::json stats = service_->Stats();
    for (const auto& shard : stats.at("shards")) {
      if (shard.value("shard_id", -1) != 0) continue;
      for (const auto& tier : shard.at("tiers")) {
        if (tier.value("tier", "") == "rocksdb") return tier.value("hits", int64_t{0});
      }
    }
    return -1;
  }

  // Fills *rows with every row of both tables at the end.
  void SendDamagedRequests(std::vector<float>* rows = nullptr);
  void Stop() {
    client_.reset();
    server_.reset();
    service_.reset();
  }

  float Init(int table, int64_t row, int col) const {
    kernels::RowInitializer init;
    init.a = static_cast<float>(job_.tables[table].initializer.low);
    init.b = static_cast<float>(job_.tables[table].initializer.high);
    init.seed = job_.tables[table].seed;
    return kernels::InitValue(init, row, col);
  }

  // One entry on table 0's shard: bags given as lists of ids.
  Message Lookup(uint32_t trainer, uint64_t step, const std::vector<std::vector<int64_t>>& bags, uint32_t shard = 0,
                 uint32_t flags = 0) {
    std::vector<int32_t> lengths;
    std::vector<int64_t> ids;
    for (const auto& b : bags) {
      lengths.push_back(static_cast<int32_t>(b.size()));
      ids.insert(ids.end(), b.begin(), b.end());
    }
    const auto n = static_cast<uint32_t>(ids.size());
    Message m = EncodeLookupRequest(LookupMeta{trainer, flags, step},
                                    {LookupEntry{shard, static_cast<uint32_t>(bags.size()), n, 0}}, std::move(lengths),
                                    std::move(ids), {});
    m.header.plan_version = plan_.version;
    return m;
  }
  Message Push(uint32_t trainer, uint64_t step, uint32_t rows, uint32_t cols, std::vector<float> grads,
               uint32_t shard = 0, uint32_t flags = 0) {
    Message m = EncodePushRequest(PushMeta{trainer, flags, step}, {PushEntry{shard, rows, cols, 0}}, std::move(grads));
    m.header.plan_version = plan_.version;
    return m;
  }
  StatusOr<std::vector<float>> Values(StatusOr<Message> reply, size_t n, bool bf16 = false) {
    if (!reply.ok()) return reply.status();
    ArrayFrame<float> v;
    TESSERA_RETURN_IF_ERROR(DecodeLookupResponse(*reply, n, &v, bf16));
    return std::vector<float>(v.span().begin(), v.span().end());
  }
  StatusOr<Message> Call(Message m) { return client_->CallSync(peer_, std::move(m), milliseconds(5000)); }

  JobConfig job_;
  ShardingPlan plan_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  int peer_ = -1;
  std::string dir_;  // of the RocksDB tier, when there is one
  int64_t context_ttl_ms_ = 0;  // set before Start: the job's runtime.context_ttl_ms
};

// Who may ask a server (docs/design.md §5.1): orders only the master's
// connection, lookups and pushes for trainer r only trainer r's connection
// of the plan; a snapshot only inside checkpoint.dir at a step the trainers
// can be at, a dump only into the job's --dump_dir. Refusals change nothing.
TEST_F(PsServiceTest, OnlyTheMasterGivesOrdersAndOnlyThePlansTrainersLookUpAndPush) {
  Start("sync", 2, nullptr, /*open=*/false);
  const std::string dir = ::testing::TempDir() + "ps_service_auth_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  auto master = std::move(RpcClient::Create()).value();
  auto trainer1 = std::move(RpcClient::Create()).value();
  const int master_peer = *master->Connect(server_->endpoint());
  const int trainer1_peer = *trainer1->Connect(server_->endpoint());
  auto from = [](RpcClient* c, int peer, Message m) { return c->CallSync(peer, std::move(m), milliseconds(5000)); };
  auto stats = [] { return EncodeJson(Opcode::kServerStats, nlohmann::json::object()); };
  const auto denied = StatusCode::kPermissionDenied;

  // Told of no one yet: no one is obeyed or served.
  EXPECT_EQ(from(master.get(), master_peer, stats()).status().code(), denied);
  EXPECT_EQ(Call(Lookup(0, 0, {{1}})).status().code(), denied);
  service_->set_master(master->routing_id());
  EXPECT_TRUE(from(master.get(), master_peer, stats()).ok());
  EXPECT_EQ(Call(stats()).status().code(), denied);
  for (Opcode op : {Opcode::kShutdown, Opcode::kAbort}) {
    EXPECT_EQ(Call(EncodeJson(op, nlohmann::json::object())).status().code(), denied) << OpcodeName(op);
  }
  EXPECT_FALSE(service_->shutdown_requested());

  // The plan names the trainers' connections: client_ is trainer 0.
  JobConfig job = job_;
  job.checkpoint.dir = dir + "/ckpt";
  const nlohmann::json create = {{"job", job.ToJson()},
                                 {"plan", plan_.ToJson()},
                                 {"rank", 0},
                                 {"trainers", {RoutingIdToText(client_->routing_id()), RoutingIdToText(trainer1->routing_id())}},
                                 {"dump_dir", dir + "/dump"}};
  EXPECT_EQ(Call(EncodeJson(Opcode::kCreateShards, create)).status().code(), denied);
  ASSERT_TRUE(from(master.get(), master_peer, EncodeJson(Opcode::kCreateShards, create)).ok());
  EXPECT_EQ(Call(Lookup(1, 0, {{1}})).status().code(), denied);  // trainer 0 speaking for trainer 1
  EXPECT_EQ(from(master.get(), master_peer, Lookup(0, 0, {{1}})).status().code(), denied);
  ASSERT_TRUE(Call(Lookup(0, 0, {{1}})).ok());
  ASSERT_TRUE(from(trainer1.get(), trainer1_peer, Lookup(1, 0, {{2}})).ok());
  EXPECT_EQ(from(trainer1.get(), trainer1_peer, Push(0, 0, 1, 4, {9, 9, 9, 9})).status().code(), denied);
  ASSERT_TRUE(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).ok());
  ASSERT_TRUE(from(trainer1.get(), trainer1_peer, Push(1, 0, 1, 4, {1, 1, 1, 1})).ok());
  // Step 0 applied once, with trainer 0's own gradient only.
  auto v = Values(Call(Lookup(0, 1, {{1}})), 4);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_NEAR((*v)[0], Init(0, 1, 0) - 0.5f, 1e-6);

  // Snapshots: inside checkpoint.dir, at a step the trainers can be at.
  auto snapshot = [&](const std::string& where, int64_t step) {
    return from(master.get(), master_peer,
                EncodeJson(Opcode::kSnapshot, {{"dir", where}, {"step", step}})).status();
  };
  EXPECT_EQ(snapshot(dir + "/elsewhere", 1).code(), denied);
  EXPECT_EQ(snapshot(dir + "/ckpt/../escaped", 1).code(), denied);
  EXPECT_EQ(snapshot(dir + "/ckpt/step-far", 1000000000).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(snapshot(dir + "/ckpt/step-neg", -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(snapshot(dir + "/ckpt/step-1/ps0", 1).ok());
  // Dumps: into the job's --dump_dir only.
  auto dump = [&](const std::string& where) {
    return from(master.get(), master_peer, EncodeJson(Opcode::kDumpShards, {{"dir", where}})).status();
  };
  EXPECT_EQ(dump(dir + "/other").code(), denied);
  EXPECT_EQ(dump("/tmp").code(), denied);
  EXPECT_TRUE(dump(dir + "/dump").ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt/step-1/ps0"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/elsewhere"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/escaped"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt/step-far"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/other"));
  trainer1.reset();
  master.reset();
  std::filesystem::remove_all(dir);
}

TEST_F(PsServiceTest, ALookupWhoseReplyWouldBeTooLargeIsRefusedBeforeAnythingIsAllocated) {
  Start("async", 1, nullptr, true, /*max_reply_values=*/8);
  // Two bags of 4 columns fit; three do not.
  EXPECT_TRUE(Call(Lookup(0, 0, {{1}, {2}})).ok());
  auto big = Call(Lookup(0, 1, {{1}, {2}, {3}}));
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status();
  EXPECT_NE(big.status().message().find("split the batch"), std::string::npos);
  EXPECT_TRUE(Call(Lookup(0, 2, {{4}})).ok());
}

TEST_F(PsServiceTest, LookupPoolsInitialRows) {
  Start("async", 1);
  // The empty bag gets no row in the reply.
  auto v = Values(Call(Lookup(0, 0, {{1, 2, 2}, {}, {99}})), 2 * 4);
  ASSERT_TRUE(v.ok()) << v.status();
  for (int c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ((*v)[c], Init(0, 1, c) + 2 * Init(0, 2, c));
    EXPECT_FLOAT_EQ((*v)[4 + c], Init(0, 99, c));
  }
}

// An evaluation's lookup (no context) reads rows never trained as their
// initial values and creates none; a training lookup after it reads the
// same values. Over memory and over every tier (GPU tier, host, RocksDB).
TEST_F(PsServiceTest, EvaluationLookupsCreateNoRows) {
  for (bool tiers : {false, true}) {
    SCOPED_TRACE(tiers ? "every tier" : "memory");
    Start("async", 1, tiers ? AllTiers() : nullptr);
    auto rows_of_table0 = [&] {
      const nlohmann::json stats = service_->Stats();
      for (const auto& shard : stats.at("shards")) {
        if (shard["shard_id"] == 0) return shard["rows_materialized"].get<int64_t>();
      }
      return int64_t{-1};
    };
    // Train rows 1 and 2 once so that some rows exist.
    ASSERT_TRUE(Values(Call(Lookup(0, 0, {{1, 2}})), 4).ok());
    ASSERT_TRUE(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).ok());
    const int64_t before = rows_of_table0();
    ASSERT_EQ(before, 2);
    LookupMeta meta{0, kLookupNoContext, 1};
    std::vector<int32_t> lengths = {2, 3};
    std::vector<int64_t> ids = {1, 50, 60, 61, 62};
    Message no_context = EncodeLookupRequest(meta, {LookupEntry{0, 2, 5, 0}}, std::move(lengths), std::move(ids), {});
    no_context.header.plan_version = plan_.version;
    auto evaluated = Values(Call(std::move(no_context)), 2 * 4);
    ASSERT_TRUE(evaluated.ok()) << evaluated.status();
    EXPECT_EQ(rows_of_table0(), before);  // rows 50, 60, 61, 62 were not created
    // The same bags looked up for training (which does keep the rows it
    // reads): the same values.
    auto trained = Values(Call(Lookup(0, 1, {{1, 50}, {60, 61, 62}})), 2 * 4);
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_EQ(*evaluated, *trained);
    for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ((*evaluated)[4 + c], Init(0, 60, c) + Init(0, 61, c) + Init(0, 62, c));
    Stop();
  }
}

// A rows entry (kEntryRows): the reply is each id's row as stored, the push
// each row's own gradient, applied as given; repeated or foreign ids are
// refused and change nothing. In memory and over every tier.
TEST_F(PsServiceTest, RowsEntriesReplyStoredRowsAndApplyTheirGradients) {
  for (bool tiers : {false, true}) {
    SCOPED_TRACE(tiers ? "every tier" : "memory");
    Start("async", 1, tiers ? AllTiers() : nullptr);
    auto rows = [&](uint64_t step, std::vector<int64_t> ids, uint32_t flags = 0) {
      const uint32_t n = static_cast<uint32_t>(ids.size());
      Message m = EncodeLookupRequest(LookupMeta{0, flags, step}, {LookupEntry{0, 0, n, kEntryRows}}, {},
                                      std::move(ids), {});
      m.header.plan_version = plan_.version;
      return m;
    };
    auto v = Values(Call(rows(0, {7, 3, 9})), 3 * 4);
    ASSERT_TRUE(v.ok()) << v.status();
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ((*v)[c], Init(0, 7, c));
      EXPECT_EQ((*v)[4 + c], Init(0, 3, c));
      EXPECT_EQ((*v)[8 + c], Init(0, 9, c));
    }
    // Row 3 gets gradient 2, the others 1 and 4: SGD at 0.5, each once.
    ASSERT_TRUE(Call(Push(0, 0, 3, 4, {1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4})).ok());
    auto refused = Call(rows(1, {3, 5, 3}));
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("repeats ids"), std::string::npos) << refused.status();
    EXPECT_EQ(Call(rows(1, {3, 100})).status().code(), StatusCode::kOutOfRange);
    v = Values(Call(rows(1, {9, 3, 7}, kLookupNoContext)), 3 * 4);
    ASSERT_TRUE(v.ok()) << v.status();
    for (int c = 0; c < 4; ++c) {
      EXPECT_NEAR((*v)[c], Init(0, 9, c) - 0.5f * 4, 1e-6);
      EXPECT_NEAR((*v)[4 + c], Init(0, 3, c) - 0.5f * 2, 1e-6);
      EXPECT_NEAR((*v)[8 + c], Init(0, 7, c) - 0.5f * 1, 1e-6);
    }
    Stop();
  }
}

// training.qcomms: a lookup asking for bfloat16 gets the float32 reply
// rounded once, and a bfloat16 push applies as a float32 push of the
// rounded gradients would.
TEST_F(PsServiceTest, Bf16LookupsAndPushesAreRoundedOnceWhereSent) {
  Start("async", 1);
  auto exact = Values(Call(Lookup(0, 0, {{1, 2, 2}, {7}}, 0, kLookupNoContext)), 8);
  ASSERT_TRUE(exact.ok()) << exact.status();
  auto narrow = Values(Call(Lookup(0, 0, {{1, 2, 2}, {7}}, 0, kLookupBf16Values)), 8, /*bf16=*/true);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  int rounded = 0;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ((*narrow)[i], Bf16BitsToFloat(FloatToBf16Bits((*exact)[i]))) << i;
    rounded += (*narrow)[i] != (*exact)[i];
  }
  EXPECT_GT(rounded, 0);  // the initial rows are not all bfloat16 already

  // Bag 1 is row 7 alone: its row gets exactly bag 1's gradient.
  const std::vector<float> g = {0.1f, 0.3f, -0.7f, 1.0f, 0.2f, 0.6f, 1e-3f, -5.5f};
  ASSERT_TRUE(Call(Push(0, 0, 2, 4, g, 0, kPushBf16Grads)).ok());
  auto row7 = Values(Call(Lookup(0, 1, {{7}}, 0, kLookupNoContext)), 4);
  ASSERT_TRUE(row7.ok()) << row7.status();
  for (int c = 0; c < 4; ++c) {
    const float q = Bf16BitsToFloat(FloatToBf16Bits(g[4 + c]));
    EXPECT_EQ((*row7)[c], (*exact)[4 + c] - 0.5f * q) << c;
  }
  EXPECT_NE((*row7)[0], (*exact)[4] - 0.5f * g[4]);  // 0.2 is not a bfloat16
  // A push whose flag says bfloat16 but whose bytes are float32's is refused
  // by its size, and changes nothing.
  ASSERT_TRUE(Call(Lookup(0, 2, {{7}})).ok());
  Message lying = Push(0, 2, 1, 4, {1, 1, 1, 1});
  PushMeta meta{0, kPushBf16Grads, 2};
  lying.frames[0] = zmq::message_t(&meta, sizeof(meta));
  EXPECT_EQ(Call(std::move(lying)).status().code(), StatusCode::kInvalidArgument);
  auto unchanged = Values(Call(Lookup(0, 3, {{7}}, 0, kLookupNoContext)), 4);
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ(*unchanged, *row7);
}

TEST_F(PsServiceTest, PushAppliesSgdOncePerRow) {
  Start("async", 1);
  ASSERT_TRUE(Call(Lookup(0, 0, {{5, 5}, {6}})).ok());
  // Gradient of bag 0 reaches row 5 twice (summed), of bag 1 row 6 once.
  ASSERT_TRUE(Call(Push(0, 0, 2, 4, {1, 1, 1, 1, 2, 2, 2, 2})).ok());
  auto v = Values(Call(Lookup(0, 1, {{5}, {6}})), 8);
  ASSERT_TRUE(v.ok()) << v.status();
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR((*v)[c], Init(0, 5, c) - 0.5f * 2.0f, 1e-6);
    EXPECT_NEAR((*v)[4 + c], Init(0, 6, c) - 0.5f * 2.0f, 1e-6);
  }
}

// A backup's copy of a lookup opens the backward context without sending
// values, so the push that follows applies there as on the primary; PROMOTE
// then moves the server to a new plan keeping rows and applied steps, and
// refuses a plan asking for a shard it lacks without changing anything.
TEST_F(PsServiceTest, BackupLookupOpensTheContextAndPromoteKeepsTheState) {
  Start("async", 1);
  Message copy = EncodeLookupRequest(LookupMeta{0, 0, 0}, {LookupEntry{0, 2, 3, kEntryContextOnly}}, {2, 1}, {5, 5, 6},
                                     {});
  copy.header.plan_version = plan_.version;
  auto none = Values(Call(std::move(copy)), 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(Call(Push(0, 0, 2, 4, {1, 1, 1, 1, 2, 2, 2, 2})).ok());
  auto applied = Values(Call(Lookup(0, 1, {{5}, {6}})), 8);
  ASSERT_TRUE(applied.ok()) << applied.status();
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR((*applied)[c], Init(0, 5, c) - 0.5f * 2.0f, 1e-6);
    EXPECT_NEAR((*applied)[4 + c], Init(0, 6, c) - 0.5f * 2.0f, 1e-6);
  }

  // A plan with a shard this server does not hold: refused, nothing changed.
  ShardingPlan foreign = plan_;
  foreign.version = plan_.version + 1;
  ShardSpec extra = foreign.shards[0];
  extra.shard_id = static_cast<uint32_t>(foreign.shards.size());
  foreign.shards.push_back(extra);
  Message bad = EncodeJson(Opcode::kPromote, {{"plan", foreign.ToJson()}, {"rank", 0}});
  EXPECT_EQ(Call(std::move(bad)).status().code(), StatusCode::kFailedPrecondition);
  Message out_of_range = EncodeJson(Opcode::kPromote, {{"plan", plan_.ToJson()}, {"rank", 3}});
  EXPECT_EQ(Call(std::move(out_of_range)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Values(Call(Lookup(0, 2, {{5}})), 4).ok());

  ShardingPlan next = plan_;
  next.version = plan_.version + 1;
  Message promote = EncodeJson(Opcode::kPromote, {{"plan", next.ToJson()}, {"rank", 0}});
  ASSERT_TRUE(Call(std::move(promote)).ok());
  // The old plan's requests are refused; the new one's see the same rows,
  // and a push the server applied before stays applied.
  EXPECT_EQ(Call(Lookup(0, 3, {{5}})).status().code(), StatusCode::kPlanChanged);
  plan_ = next;
  auto kept = Values(Call(Lookup(0, 3, {{5}})), 4);
  ASSERT_TRUE(kept.ok()) << kept.status();
  for (int c = 0; c < 4; ++c) EXPECT_EQ((*kept)[c], (*applied)[c]);
  EXPECT_EQ(Call(Push(0, 0, 2, 4, std::vector<float>(8, 1.0f))).status().code(), StatusCode::kAlreadyApplied);
}

// A client that looks up without ever pushing cannot fill the server's
// memory with backward contexts: past the limit its lookups are refused,
// the others' are not, and a push frees its context again.
TEST_F(PsServiceTest, OpenContextsPerTrainerAreBounded) {
  Start("async", 2);
  // Trainer 0 trains to step 1000 (in strides within how far ahead of its
  // last push a trainer may look up).
  for (uint64_t s = 0; s <= 1000; s += 50) {
    ASSERT_TRUE(Call(Lookup(0, s, {{1}})).ok()) << s;
    ASSERT_TRUE(Call(Push(0, s, 1, 4, {0, 0, 0, 0})).ok()) << s;
  }
  // Steps going down: none is far behind the newest, so none is dropped.
  uint64_t step = 1060;
  for (;; --step) {
    auto r = Call(Lookup(0, step, {{1}}));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status();
      break;
    }
    ASSERT_GT(step, 960u) << "no limit on open contexts";
  }
  EXPECT_EQ(step, 1060u - 64);
  EXPECT_TRUE(Call(Lookup(1, 0, {{1}})).ok());       // another trainer is not affected
  EXPECT_TRUE(Call(Lookup(0, 1060, {{1}})).ok());    // a retried lookup of an open step is
  ASSERT_TRUE(Call(Push(0, 1060, 1, 4, {1, 1, 1, 1})).ok());
  EXPECT_TRUE(Call(Lookup(0, step, {{1}})).ok());    // the push closed one
  // Steps going up: those far behind are dropped, so a trainer that moves on
  // is never refused, and what it holds stays bounded.
  for (uint64_t s = 1061; s <= 1060 + 64; ++s) {
    auto r = Call(Lookup(0, s, {{1}}));
    ASSERT_TRUE(r.ok()) << s << ": " << r.status();
  }
  // Further than that past its last push, no trainer can be: refused.
  EXPECT_EQ(Call(Lookup(0, 1060 + 65, {{1}})).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(PsServiceTest, ValidationErrorsChangeNothingAndServerKeepsServing) {
  Start("async", 1);
  // Truncated frame: ids cut mid-element.
  {
    Message m = Lookup(0, 0, {{1, 2}});
    m.frames[3] = zmq::message_t(m.frames[3].data(), 12);
    EXPECT_EQ(Call(std::move(m)).status().code(), StatusCode::kInvalidArgument);
  }
  // Wrong frame count.
  {
    Message m = Lookup(0, 0, {{1}});
    m.frames.pop_back();
    EXPECT_EQ(Call(std::move(m)).status().code(), StatusCode::kInvalidArgument);
  }
  // Lengths not summing to the id count.
  {
    Message m = EncodeLookupRequest(LookupMeta{0, 0, 0}, {LookupEntry{0, 2, 3, 0}}, {1, 1}, {1, 2, 3}, {});
    m.header.plan_version = plan_.version;
    auto r = Call(std::move(m));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("sum to 2"), std::string::npos) << r.status();
  }
  // Id out of range of the shard.
  {
    auto r = Call(Lookup(0, 0, {{1, 100}}));
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(r.status().message().find("id 100"), std::string::npos) << r.status();
    EXPECT_EQ(Call(Lookup(0, 0, {{-1}})).status().code(), StatusCode::kOutOfRange);
  }
  // Unknown shard, stale plan version, unknown trainer.
  EXPECT_EQ(Call(Lookup(0, 0, {{1}}, 7)).status().code(), StatusCode::kNotFound);
  {
    Message m = Lookup(0, 0, {{1}});
    m.header.plan_version = 99;
    EXPECT_EQ(Call(std::move(m)).status().code(), StatusCode::kPlanChanged);
  }
  EXPECT_EQ(Call(Lookup(5, 0, {{1}})).status().code(), StatusCode::kInvalidArgument);
  // Push without a context.
  EXPECT_EQ(Call(Push(0, 3, 1, 4, {1, 1, 1, 1})).status().code(), StatusCode::kNotFound);

  // A valid lookup, then bad pushes against its context: NaN, wrong shape.
  ASSERT_TRUE(Call(Lookup(0, 0, {{3}})).ok());
  auto nan = Call(Push(0, 0, 1, 4, {1, NAN, 1, 1}));
  EXPECT_EQ(nan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nan.status().message().find("non-finite"), std::string::npos);
  EXPECT_EQ(Call(Push(0, 0, 2, 4, std::vector<float>(8, 1.0f))).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Call(Push(0, 0, 1, 3, std::vector<float>(3, 1.0f))).status().code(), StatusCode::kInvalidArgument);
  // Nothing was applied: row 3 still holds its initial value.
  auto v = Values(Call(Lookup(0, 1, {{3}})), 4);
  ASSERT_TRUE(v.ok());
  for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ((*v)[c], Init(0, 3, c));
  // The context of step 0 survived the bad pushes: a good push still works,
  // and its retry is recognised.
  EXPECT_TRUE(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).ok());
  EXPECT_EQ(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).status().code(), StatusCode::kAlreadyApplied);
  v = Values(Call(Lookup(0, 2, {{3}})), 4);
  ASSERT_TRUE(v.ok());
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*v)[c], Init(0, 3, c) - 0.5f, 1e-6);  // applied exactly once
}

TEST_F(PsServiceTest, SyncModeWaitsForEveryTrainersGradients) {
  Start("sync", 2);
  ASSERT_TRUE(Call(Lookup(0, 0, {{7}})).ok());
  ASSERT_TRUE(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).ok());
  // Trainer 0's step-1 lookup must wait for trainer 1's step-0 gradients.
  RpcFuture early = client_->Call(peer_, Lookup(0, 1, {{7}}), milliseconds(5000));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(early.Ready());
  // Two steps ahead of the applied ones is more than a trainer can be: refused, not parked.
  auto far = Call(Lookup(1, 2, {{7}}));
  EXPECT_EQ(far.status().code(), StatusCode::kInvalidArgument) << far.status();
  EXPECT_FALSE(early.Ready());
  ASSERT_TRUE(Call(Lookup(1, 0, {{7}})).ok());
  ASSERT_TRUE(Call(Push(1, 0, 1, 4, {3, 3, 3, 3})).ok());
  auto v = Values(early.Wait(), 4);
  ASSERT_TRUE(v.ok()) << v.status();
  // Both gradients applied as one step: 0.5 * (1 + 3).
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*v)[c], Init(0, 7, c) - 2.0f, 1e-6);
}

// Async prefetch (kLookupAfterOwnPush): a trainer's lookup of step t+1 sent
// before its push of step t waits for that push, and only for that one, so
// it sees its trainer's own update; a bad push leaves it waiting for the
// good one. A lookup without the flag, or with no push to wait for, is
// served at once.
TEST_F(PsServiceTest, AsyncLookupAfterOwnPushWaitsForThatPushOnly) {
  Start("async", 2);
  ASSERT_TRUE(Call(Lookup(0, 0, {{7}}, 0, kLookupAfterOwnPush)).ok());
  RpcFuture early = client_->Call(peer_, Lookup(0, 1, {{7}}, 0, kLookupAfterOwnPush), milliseconds(5000));
  // Trainer 1 has no push to come: served at once, with row 7 as it is.
  auto other = Values(Call(Lookup(1, 1, {{7}}, 0, kLookupAfterOwnPush)), 4);
  ASSERT_TRUE(other.ok()) << other.status();
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*other)[c], Init(0, 7, c), 1e-6);
  // Without the flag, trainer 0's own lookup is served on arrival too.
  auto unflagged = Values(Call(Lookup(0, 1, {{7}})), 4);
  ASSERT_TRUE(unflagged.ok()) << unflagged.status();
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*unflagged)[c], Init(0, 7, c), 1e-6);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(early.Ready());
  // Trainer 1's push, and a bad push of trainer 0's (wrong shape), release nothing.
  ASSERT_TRUE(Call(Push(1, 1, 1, 4, {2, 2, 2, 2})).ok());
  EXPECT_EQ(Call(Push(0, 0, 1, 3, {1, 1, 1})).status().code(), StatusCode::kInvalidArgument);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(early.Ready());
  ASSERT_TRUE(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).ok());
  auto v = Values(early.Wait(), 4);
  ASSERT_TRUE(v.ok()) << v.status();
  // Both pushes applied before it: 0.5 * (2 + 1).
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*v)[c], Init(0, 7, c) - 1.5f, 1e-6);
  // Its context is open: its push is taken as any other.
  EXPECT_TRUE(Call(Push(0, 1, 1, 4, {1, 1, 1, 1})).ok());
}

// A lookup waiting for a push that never comes is served once the push's
// context expires, not left waiting for good.
TEST_F(PsServiceTest, AsyncLookupWaitingForAnExpiredPushIsServed) {
  context_ttl_ms_ = 50;
  Start("async", 2);
  ASSERT_TRUE(Call(Lookup(0, 0, {{3}}, 0, kLookupAfterOwnPush)).ok());
  RpcFuture waiting = client_->Call(peer_, Lookup(0, 1, {{3}}, 0, kLookupAfterOwnPush), milliseconds(10000));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(waiting.Ready());
  // Contexts expire as lookups open new ones (at most once a second).
  std::this_thread::sleep_for(milliseconds(1000));
  ASSERT_TRUE(Call(Lookup(1, 0, {{4}})).ok());
  auto v = Values(waiting.Wait(), 4);
  ASSERT_TRUE(v.ok()) << v.status();
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*v)[c], Init(0, 3, c), 1e-6);
  EXPECT_EQ(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).status().code(), StatusCode::kNotFound);
}

// Sync prefetch over RocksDB: a lookup parked until the step before it is
// applied has its rows read from RocksDB while it waits, and is answered
// with the updated rows once the step is applied.
TEST_F(PsServiceTest, AParkedLookupsRowsComeUpFromRocksDbWhileItWaits) {
  Start("sync", 2, RocksDbTier());
  // Step 0 updates rows 0..79, more than the host tier holds: most are
  // written back to RocksDB and leave memory.
  for (uint32_t t = 0; t < 2; ++t) {
    std::vector<std::vector<int64_t>> bags;
    for (int64_t i = 0; i < 40; ++i) bags.push_back({40 * t + i});
    ASSERT_TRUE(Call(Lookup(t, 0, bags)).ok());
    ASSERT_TRUE(Call(Push(t, 0, 40, 4, std::vector<float>(160, 1.0f))).ok());
  }
  // A sync push is answered before it is applied: wait for step 0, so that
  // step 1's lookup is served at once rather than parked (and warmed).
  const auto applied_by = std::chrono::steady_clock::now() + milliseconds(5000);
  while (service_->Stats().value("applied_steps", int64_t{0}) < 1 && std::chrono::steady_clock::now() < applied_by) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  // Step 1 waits for trainer 1.
  ASSERT_TRUE(Call(Lookup(0, 1, {{90}})).ok());
  ASSERT_TRUE(Call(Push(0, 1, 1, 4, {1, 1, 1, 1})).ok());
  ASSERT_EQ(service_->Stats().value("rows_warmed", int64_t{-1}), 0);
  // Found below the host tier: in RocksDB, or still in a write-back buffer
  // that RocksDB's writing thread has not emptied yet (a loaded machine);
  // both count as the rocksdb tier's hits.
  const int64_t found_below_before = RocksDbTierHitsOfShard0();
  std::vector<std::vector<int64_t>> wanted;
  for (int64_t i = 0; i < 10; ++i) wanted.push_back({i});
  RpcFuture early = client_->Call(peer_, Lookup(0, 2, wanted), milliseconds(5000));
  // Its rows come up before step 1 is applied.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (service_->Stats().value("rows_warmed", int64_t{0}) < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(service_->Stats().value("rows_warmed", int64_t{0}), 10);
  EXPECT_GT(RocksDbTierHitsOfShard0(), found_below_before);
  EXPECT_FALSE(early.Ready());
  ASSERT_TRUE(Call(Lookup(1, 1, {{91}})).ok());
  ASSERT_TRUE(Call(Push(1, 1, 1, 4, {1, 1, 1, 1})).ok());
  auto v = Values(early.Wait(), 10 * 4);
  ASSERT_TRUE(v.ok()) << v.status();
  // Rows 0..9: step 0's update only, 0.5 * 1.
  for (int64_t i = 0; i < 10; ++i) {
    for (int c = 0; c < 4; ++c) EXPECT_NEAR((*v)[i * 4 + c], Init(0, i, c) - 0.5f, 1e-6) << "row " << i;
  }
}

TEST_F(PsServiceTest, AbortAnswersWaitingLookups) {
  Start("sync", 2);
  ASSERT_TRUE(Call(Lookup(0, 0, {{1}})).ok());
  ASSERT_TRUE(Call(Push(0, 0, 1, 4, {1, 1, 1, 1})).ok());
  RpcFuture waiting = client_->Call(peer_, Lookup(0, 1, {{1}}), milliseconds(5000));
  std::this_thread::sleep_for(milliseconds(100));
  service_->Abort(Status::Aborted("trainer 1 died"));
  auto r = waiting.Wait();
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_EQ(Call(Lookup(1, 0, {{1}})).status().code(), StatusCode::kAborted);
}

TEST_F(PsServiceTest, MeanPoolingAndSumPartial) {
  Start("async", 1);
  // Table b (shard 1) pools by MEAN; with sum_partial it pools by SUM.
  Message m = EncodeLookupRequest(LookupMeta{0, 0, 0},
                                  {LookupEntry{1, 1, 2, 0}, LookupEntry{1, 1, 2, kEntrySumPartial}}, {2, 2},
                                  {4, 9, 4, 9}, {});
  m.header.plan_version = plan_.version;
  auto v = Values(Call(std::move(m)), 6);
  ASSERT_TRUE(v.ok()) << v.status();
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR((*v)[c], (Init(1, 4, c) + Init(1, 9, c)) / 2, 1e-6);
    EXPECT_NEAR((*v)[3 + c], Init(1, 4, c) + Init(1, 9, c), 1e-6);
  }
}

// Damages one part of a valid message: flips bytes, cuts or grows a frame,
// drops, repeats or replaces one, or changes the header's op or plan version.
void Damage(Message* m, std::mt19937_64* rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>((*rng)() % n); };
  const size_t f = m->frames.empty() ? 0 : pick(m->frames.size());
  auto bytes = [&](size_t n) {
    std::string b(n, '\0');
    for (char& c : b) c = static_cast<char>((*rng)() & 0xff);
    return b;
  };
  switch (pick(8)) {
    case 0: {  // flip 1-4 bytes of one frame
      if (m->frames.empty() || m->frames[f].size() == 0) break;
      std::string b = m->frames[f].to_string();
      for (size_t k = 0, n = 1 + pick(4); k < n; ++k) b[pick(b.size())] ^= static_cast<char>(1 + pick(255));
      m->frames[f] = zmq::message_t(b.data(), b.size());
      break;
    }
    case 1:  // cut a frame short (to any length, 0 included)
      if (!m->frames.empty()) m->frames[f] = zmq::message_t(m->frames[f].data(), pick(m->frames[f].size() + 1));
      break;
    case 2: {  // grow a frame by 1-16 bytes
      if (m->frames.empty()) break;
      std::string b = m->frames[f].to_string() + bytes(1 + pick(16));
      m->frames[f] = zmq::message_t(b.data(), b.size());
      break;
    }
    case 3:
      if (!m->frames.empty()) m->frames.erase(m->frames.begin() + static_cast<std::ptrdiff_t>(f));
      break;
    case 4:
      if (!m->frames.empty()) {
        std::string b = m->frames[f].to_string();
        m->frames.emplace_back(b.data(), b.size());
      }
      break;
    case 5: {  // a frame of random bytes
      if (m->frames.empty()) break;
      std::string b = bytes(pick(64));
      m->frames[f] = zmq::message_t(b.data(), b.size());
      break;
    }
    case 6: {  // another op: the data plane's, stats, ones no server knows
      const Opcode ops[] = {Opcode::kLookup, Opcode::kPushGradients, Opcode::kServerStats, Opcode::kInvalid,
                            Opcode::kStoreGet, static_cast<Opcode>(999)};
      m->header.op = ops[pick(std::size(ops))];
      break;
    }
    default:
      m->header.plan_version = static_cast<uint32_t>((*rng)());
      break;
  }
}

// Thousands of damaged lookups and pushes: every one is answered (an error
// or, where the damage left it valid, a result) and none takes the server
// down; afterwards it still looks up and applies a push exactly once. Under
// AddressSanitizer this is also a check that no decoding reads out of bounds.
void PsServiceTest::SendDamagedRequests(std::vector<float>* rows) {
  std::mt19937_64 rng(20261201);
  std::map<StatusCode, int> codes;
  const int kRequests = 3000;
  int64_t last_push = -1;
  for (int i = 0; i < kRequests; ++i) {
    const uint64_t step = static_cast<uint64_t>(i);
    if (static_cast<int64_t>(step) - last_push > 50) {
      // Damaged pushes fail: a clean one (a zero gradient, which changes no
      // row) keeps the steps within how far a trainer may be ahead of its
      // last push.
      ASSERT_TRUE(Call(Lookup(0, step - 1, {{0}})).ok());
      ASSERT_TRUE(Call(Push(0, step - 1, 1, 4, {0, 0, 0, 0})).ok());
      last_push = static_cast<int64_t>(step) - 1;
    }
    bool push = false;
    const uint32_t shard = static_cast<uint32_t>(rng() % 2);
    const int64_t rows = shard == 0 ? 100 : 50;
    std::vector<std::vector<int64_t>> bags(1 + rng() % 4);
    for (auto& b : bags) {
      b.resize(rng() % 4);
      for (int64_t& id : b) id = static_cast<int64_t>(rng() % 90) % rows;  // row 99 stays untouched
    }
    Message m = Lookup(0, step, bags, shard);
    if (rng() % 2 == 1) {
      push = true;
      // A push against a context a valid lookup opened.
      ASSERT_TRUE(Call(std::move(m)).ok());
      const uint32_t cols = shard == 0 ? 4 : 3;
      std::vector<float> grads(bags.size() * cols);
      for (float& g : grads) g = static_cast<float>(rng() % 200) / 100.0f - 1.0f;
      m = Push(0, step, static_cast<uint32_t>(bags.size()), cols, std::move(grads), shard);
    }
    Damage(&m, &rng);
    StatusOr<Message> reply = Call(std::move(m));
    const StatusCode code = reply.status().code();
    ++codes[code];
    ASSERT_NE(code, StatusCode::kDeadlineExceeded) << "request " << i << " was not answered";
    ASSERT_NE(code, StatusCode::kUnavailable) << "request " << i << ": " << reply.status();
    if (push && reply.ok()) last_push = static_cast<int64_t>(step);
  }
  for (const auto& [code, n] : codes) std::cout << "[ info     ] " << n << " x " << StatusCodeName(code) << "\n";
  // The damage reached past the header checks: some requests were refused
  // for what their frames held, and some damage left a request valid.
  EXPECT_GT(codes[StatusCode::kInvalidArgument], kRequests / 10);
  EXPECT_GT(codes[StatusCode::kOk], 0);

  const uint64_t step = kRequests;
  auto before = Values(Call(Lookup(0, step, {{99}})), 4);
  ASSERT_TRUE(before.ok()) << before.status();
  for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ((*before)[c], Init(0, 99, c)) << "row 99 was changed";
  ASSERT_TRUE(Call(Push(0, step, 1, 4, {1, 1, 1, 1})).ok());
  auto after = Values(Call(Lookup(0, step + 1, {{99}})), 4);
  ASSERT_TRUE(after.ok()) << after.status();
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*after)[c], Init(0, 99, c) - 0.5f, 1e-6);

  if (rows == nullptr) return;
  // Ten rows a lookup: one request's rows must fit in a 16-row GPU tier.
  uint64_t read_step = step + 2;
  for (uint32_t shard : {0u, 1u}) {
    const int64_t n = shard == 0 ? 100 : 50;
    const size_t cols = shard == 0 ? 4 : 3;
    for (int64_t first = 0; first < n; first += 10) {
      std::vector<std::vector<int64_t>> each;
      for (int64_t id = first; id < std::min(n, first + 10); ++id) each.push_back({id});
      auto v = Values(Call(Lookup(0, read_step++, each, shard)), each.size() * cols);
      ASSERT_TRUE(v.ok()) << v.status();
      rows->insert(rows->end(), v->begin(), v->end());
    }
  }
}

TEST_F(PsServiceTest, DamagedRequestsAreAnsweredAndTheServerKeepsServing) {
  Start("async", 1);
  SendDamagedRequests();
}

// The same damaged requests against a server whose rows move between a GPU
// tier, host memory and RocksDB all the time end in the same rows, bit for
// bit, as against one that keeps them in memory: no error path loses or
// doubles an update.
TEST_F(PsServiceTest, DamagedRequestsOverEveryTierEndAsInMemory) {
  Start("async", 1);
  std::vector<float> in_memory, tiered;
  SendDamagedRequests(&in_memory);
  ASSERT_FALSE(HasFatalFailure());
  Stop();
  Start("async", 1, AllTiers());
  SendDamagedRequests(&tiered);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(in_memory.size(), 100u * 4 + 50u * 3);
  EXPECT_EQ(tiered, in_memory);
  // Rows did move between the tiers meanwhile.
  int64_t gpu_evictions = 0, rocksdb_reads = 0;
  const nlohmann::json stats = service_->Stats();
  for (const auto& shard : stats.at("shards")) {
    rocksdb_reads += shard.value("rocksdb_rows_read", int64_t{0});
    for (const auto& tier : shard["tiers"]) {
      if (tier.value("tier", "") == "gpu") gpu_evictions += tier.value("evictions", int64_t{0});
    }
  }
  std::cout << "[ info     ] GPU-tier evictions " << gpu_evictions << ", rows read from RocksDB " << rocksdb_reads
            << "\n";
  EXPECT_GT(gpu_evictions, 1000);
  EXPECT_GT(rocksdb_reads, 1000);
}

}  // namespace
}  // namespace tessera
