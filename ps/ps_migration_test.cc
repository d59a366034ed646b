// Migrations between PsServices over real RpcServers on loopback: rows and
// their optimizer state move from the servers of one plan to those of the
// next, cut another way (rows split, columns split, whole tables moved), over
// every storage tier; the moved rows then train exactly as rows that never
// moved. A fetch from a stranger, of a shard or rows a server does not hold,
// or before a migration, is refused; a migration whose source is gone fails
// and leaves the running plan as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <map>

#include "common/control_messages.h"
#include "common/messages.h"
#include "common/peer_pool.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "ps/ps_service.h"
#include "ps/store_factory.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

JobConfig MakeJob() {
  auto job = ParseJobConfig(R"({
    "cluster": {"num_ps": 2, "num_trainers": 1},
    "tables": [
      {"name": "a", "num_embeddings": 100, "embedding_dim": 4, "feature_names": ["fa"],
       "optimizer": {"type": "sgd", "lr": 0.5}},
      {"name": "b", "num_embeddings": 50, "embedding_dim": 3, "feature_names": ["fb"],
       "optimizer": {"type": "adagrad", "lr": 0.1}}
    ],
    "model": {"top_mlp": [1]},
    "data": {"source": "synthetic"},
    "training": {"batch_size": 2, "steps": 10, "consistency": "async"}
  })",
                            "");
  CHECK(job.ok()) << job.status();
  return *job;
}

ShardSpec Spec(uint32_t id, int table, int64_t row_offset, int64_t rows, int col_offset, int cols, int ps) {
  ShardSpec s;
  s.shard_id = id;
  s.table = table;
  s.row_offset = row_offset;
  s.num_rows = rows;
  s.col_offset = col_offset;
  s.num_cols = cols;
  s.ps = ps;
  return s;
}

// Version 1: both tables whole on one server.
ShardingPlan OnePlan() {
  ShardingPlan p;
  p.version = 1;
  p.num_ps = 1;
  p.shards = {Spec(0, 0, 0, 100, 0, 4, 0), Spec(1, 1, 0, 50, 0, 3, 0)};
  p.tables = {TablePlan{0, ShardingType::kTableWise, {0}}, TablePlan{1, ShardingType::kTableWise, {1}}};
  return p;
}

// Version 2 on two servers: table a cut by rows, table b by columns.
ShardingPlan TwoPlan() {
  ShardingPlan p;
  p.version = 2;
  p.num_ps = 2;
  p.shards = {Spec(0, 0, 0, 50, 0, 4, 0), Spec(1, 0, 50, 50, 0, 4, 1), Spec(2, 1, 0, 50, 0, 2, 1),
              Spec(3, 1, 0, 50, 2, 1, 0)};
  p.tables = {TablePlan{0, ShardingType::kRowWise, {0, 1}}, TablePlan{1, ShardingType::kColumnWise, {2, 3}}};
  return p;
}

// One parameter server: its service, its RPC server and the client it
// fetches rows from the others with.
struct Node {
  std::unique_ptr<RpcClient> client;
  std::unique_ptr<PeerPool<std::string>> peers;  // endpoint -> peer of client
  std::unique_ptr<PsService> service;
  std::unique_ptr<RpcServer> server;

  Node(RowStoreFactory factory, bool open) {
    client = std::move(RpcClient::Create()).value();
    peers = std::make_unique<PeerPool<std::string>>(client.get(), Role::kNone);
    PsServiceOptions options;
    options.store_factory = std::move(factory);
    options.open_to_any_sender = open;
    // A few rows per FETCH_ROWS reply: every shard moves in many pages.
    options.fetch_reply_bytes = 7 * 4 * 16;
    options.call_server = [this](const std::string& endpoint, Message&& m, milliseconds timeout,
                                 const std::atomic<bool>*) -> StatusOr<Message> {
      TESSERA_ASSIGN_OR_RETURN(const int peer, peers->Get(endpoint, endpoint));
      return client->CallSync(peer, std::move(m), std::min(timeout, milliseconds(5000)));
    };
    options.end_server_calls = [this] { peers->ForgetAll(); };
    service = std::make_unique<PsService>(options);
    server = std::move(RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 2}, [this](Message&& m, Responder r) {
                         service->Handle(std::move(m), std::move(r));
                       })).value();
  }
  ~Node() {
    server->Stop();
    service->EndMigration();
  }
  std::string endpoint() const { return server->endpoint(); }
  // Connections to other servers this node has open for its fetches.
  size_t open_peers() { return peers->size(); }
};

class MigrationTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "ps_migration_test.XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
    driver_ = std::move(RpcClient::Create()).value();
  }
  void TearDown() override {
    driver_.reset();
    nodes_.clear();
    std::filesystem::remove_all(dir_);
  }

  RowStoreFactory Factory(const std::string& name) const {
    if (GetParam() == "memory") return nullptr;
    ShardStorageOptions o;
    o.rocksdb_path = dir_ + "/" + name;
    o.host_bytes = 1024;  // most rows below, in RocksDB
    if (GetParam() == "gpu_tier_on_host") {
      o.gpu_bytes = 1;
      o.gpu_tier_on_host = true;
      o.gpu_min_slots = 128;  // a lookup of a whole shard must fit
    }
    return MakeRowStoreFactory(o);
  }
  Node* AddNode(const std::string& name, bool open = true) {
    nodes_.push_back(std::make_unique<Node>(Factory(name), open));
    return nodes_.back().get();
  }
  int Peer(Node* n) {
    auto it = driver_peers_.find(n);
    if (it != driver_peers_.end()) return it->second;
    return driver_peers_[n] = *driver_->Connect(n->endpoint());
  }
  StatusOr<Message> Call(Node* n, Message m) { return driver_->CallSync(Peer(n), std::move(m), milliseconds(10000)); }

  // Looks every id of `shards` up (each id its own bag) at `step`, in one
  // request: one lookup and one push per server and step.
  Status LookupAll(Node* n, const ShardingPlan& plan, const std::vector<uint32_t>& shards, uint64_t step) {
    std::vector<LookupEntry> entries;
    std::vector<int32_t> lengths;
    std::vector<int64_t> ids;
    size_t values = 0;
    for (uint32_t shard : shards) {
      const ShardSpec& s = plan.shards[shard];
      const auto rows = static_cast<uint32_t>(s.num_rows);
      entries.push_back(LookupEntry{shard, rows, rows, 0});
      for (int64_t i = 0; i < s.num_rows; ++i) {
        lengths.push_back(1);
        ids.push_back(s.row_offset + i);
      }
      values += static_cast<size_t>(s.num_rows * s.num_cols);
    }
    Message m = EncodeLookupRequest(LookupMeta{0, 0, step}, std::move(entries), std::move(lengths), std::move(ids), {});
    m.header.plan_version = plan.version;
    auto reply = Call(n, std::move(m));
    if (!reply.ok()) return reply.status();
    ArrayFrame<float> v;
    return DecodeLookupResponse(*reply, values, &v);
  }
  // The push that closes LookupAll's context: a gradient for every row that
  // depends on the row, the column and `salt` (some rows zero).
  Status PushAll(Node* n, const ShardingPlan& plan, const std::vector<uint32_t>& shards, uint64_t step, float salt) {
    std::vector<PushEntry> entries;
    std::vector<float> grads;
    for (uint32_t shard : shards) {
      const ShardSpec& s = plan.shards[shard];
      entries.push_back(PushEntry{shard, static_cast<uint32_t>(s.num_rows), static_cast<uint32_t>(s.num_cols), 0});
      for (int64_t i = 0; i < s.num_rows; ++i) {
        const int64_t row = s.row_offset + i;
        for (int c = 0; c < s.num_cols; ++c) {
          grads.push_back(row % 3 == 0 ? 0.0f : 0.01f * static_cast<float>((row * 7 + s.col_offset + c) % 11) + salt);
        }
      }
    }
    Message m = EncodePushRequest(PushMeta{0, 0, step}, std::move(entries), std::move(grads));
    m.header.plan_version = plan.version;
    return Call(n, std::move(m)).status();
  }
  // Trains `steps` steps from `first` on every shard of `plan` held by `nodes`
  // (by rank).
  void Train(const std::vector<Node*>& nodes, const ShardingPlan& plan, uint64_t first, int steps) {
    for (uint64_t step = first; step < first + steps; ++step) {
      for (size_t rank = 0; rank < nodes.size(); ++rank) {
        std::vector<uint32_t> shards;
        for (const ShardSpec& s : plan.shards) {
          if (s.ps == static_cast<int>(rank)) shards.push_back(s.shard_id);
        }
        Status looked_up = LookupAll(nodes[rank], plan, shards, step);
        ASSERT_TRUE(looked_up.ok()) << looked_up;
        Status pushed = PushAll(nodes[rank], plan, shards, step, 0.1f * static_cast<float>(step));
        ASSERT_TRUE(pushed.ok()) << pushed;
      }
    }
  }
  // Every row's embedding of both tables, as the servers of `plan` hold them.
  std::vector<float> Table(const std::vector<Node*>& nodes, const ShardingPlan& plan, int table, uint64_t step) {
    const JobConfig job = MakeJob();
    const int dim = job.tables[table].embedding_dim;
    std::vector<float> out(job.tables[table].num_embeddings * dim, -1.0f);
    for (const ShardSpec& s : plan.shards) {
      if (s.table != table) continue;
      // Lookups with no context: they must not open one the test never closes.
      const std::vector<int32_t> lengths(s.num_rows, 1);
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < s.num_rows; ++i) ids.push_back(s.row_offset + i);
      const auto rows = static_cast<uint32_t>(s.num_rows);
      Message m = EncodeLookupRequest(LookupMeta{0, kLookupNoContext, step}, {LookupEntry{s.shard_id, rows, rows, 0}},
                                      std::vector<int32_t>(lengths), std::move(ids), {});
      m.header.plan_version = plan.version;
      auto reply = Call(nodes[s.ps], std::move(m));
      EXPECT_TRUE(reply.ok()) << reply.status();
      if (!reply.ok()) continue;
      ArrayFrame<float> v;
      EXPECT_TRUE(DecodeLookupResponse(*reply, s.num_rows * s.num_cols, &v).ok());
      for (int64_t i = 0; i < s.num_rows; ++i) {
        for (int c = 0; c < s.num_cols; ++c) out[(s.row_offset + i) * dim + s.col_offset + c] = v[i * s.num_cols + c];
      }
    }
    return out;
  }
  // MIGRATE as the master sends it to the server at `rank` (-1: leaving).
  MigrateRequest Migration(const ShardingPlan& from, const ShardingPlan& to, int rank,
                           const std::vector<Node*>& sources, const std::vector<Node*>& fetchers, int64_t step) {
    MigrateRequest req;
    req.job = MakeJob().ToJson();
    req.plan = to.ToJson();
    req.rank = rank;
    req.step = step;
    req.from_version = from.version;
    req.from_plan = from.ToJson();
    for (Node* n : sources) req.sources.push_back(n->endpoint());
    for (Node* n : fetchers) req.fetchers.push_back(n->client->routing_id());
    return req;
  }
  static StatusOr<json> RunMigrate(Node* n, const MigrateRequest& req) {
    std::promise<StatusOr<json>> result;
    n->service->Migrate(req, [&](StatusOr<json> r) { result.set_value(std::move(r)); });
    return result.get_future().get();
  }

  std::string dir_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unique_ptr<RpcClient> driver_;
  std::map<Node*, int> driver_peers_;
};

// 1 -> 2 servers: the moved rows (with Adagrad's state) train on exactly as
// on a server where nothing moved, bit for bit.
TEST_P(MigrationTest, RowsAndOptimizerStateMoveAndTrainOnAsIfNothingMoved) {
  const JobConfig job = MakeJob();
  const ShardingPlan one = OnePlan(), two = TwoPlan();
  Node* a = AddNode("a");
  Node* reference = AddNode("reference");
  ASSERT_TRUE(a->service->CreateShards(job, one).ok());
  ASSERT_TRUE(reference->service->CreateShards(job, one).ok());
  Train({a}, one, 0, 5);
  Train({reference}, one, 0, 5);
  Node* b = AddNode("b");
  b->service->set_rank(1);  // the master tells a server its rank at registration

  const auto mig_a = Migration(one, two, 0, {a}, {a, b}, 5);
  const auto mig_b = Migration(one, two, 1, {a}, {a, b}, 5);
  std::promise<StatusOr<json>> on_a;
  a->service->Migrate(mig_a, [&](StatusOr<json> r) { on_a.set_value(std::move(r)); });
  auto on_b = RunMigrate(b, mig_b);
  auto got_a = on_a.get_future().get();
  ASSERT_TRUE(got_a.ok()) << got_a.status();
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  // b fetched table a's rows 50..99 and b's columns 0..1 (rows materialized
  // by the training: every one of them, as every row was looked up).
  EXPECT_EQ((*on_b)["rows"], 50 + 50);
  // a re-cuts its own: table a's rows 0..49 and b's column 2.
  EXPECT_EQ((*got_a)["rows"], 50 + 50);
  // Until CREATE_SHARDS the old plan is what a serves.
  EXPECT_EQ(a->service->plan_version(), 1u);
  EXPECT_EQ(Table({a}, one, 0, 5), Table({reference}, one, 0, 5));
  EXPECT_EQ(b->open_peers(), 1u);  // to a, its source

  ASSERT_TRUE(a->service->CreateShards(job, two, {}, /*keep=*/true, /*staged=*/2).ok());
  ASSERT_TRUE(b->service->CreateShards(job, two, {}, /*keep=*/true, /*staged=*/2).ok());
  // The migration is over: its connections are closed (a source that left
  // the job would otherwise stay connected, and reconnected to, for good).
  EXPECT_EQ(a->open_peers(), 0u);
  EXPECT_EQ(b->open_peers(), 0u);
  for (int t = 0; t < 2; ++t) EXPECT_EQ(Table({a, b}, two, t, 5), Table({reference}, one, t, 5)) << "table " << t;
  // Training on: the Adagrad state moved with the rows, so the updates match.
  Train({a, b}, two, 5, 3);
  Train({reference}, one, 5, 3);
  for (int t = 0; t < 2; ++t) EXPECT_EQ(Table({a, b}, two, t, 8), Table({reference}, one, t, 8)) << "table " << t;
  // Staged stores' files are named apart and go with their shards.
  nodes_.clear();
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".v"), std::string::npos) << entry.path();
  }
}

// A precopy runs while the job trains; at the boundary only the rows
// updated since it began move again, and the result is bit for bit what a
// server where nothing moved holds.
TEST_P(MigrationTest, PrecopyWhileTrainingThenOnlyTheChangedRowsMove) {
  const JobConfig job = MakeJob();
  const ShardingPlan one = OnePlan(), two = TwoPlan();
  Node* a = AddNode("a");
  Node* reference = AddNode("reference");
  ASSERT_TRUE(a->service->CreateShards(job, one).ok());
  ASSERT_TRUE(reference->service->CreateShards(job, one).ok());
  Train({a}, one, 0, 5);
  Train({reference}, one, 0, 5);
  Node* b = AddNode("b");
  b->service->set_rank(1);

  // Steps 5..9 train table b only (shard 1 of plan one), during the precopy:
  // its pages (a few rows each) interleave with the pushes.
  auto train_b = [&](Node* n, uint64_t first, uint64_t last) {
    for (uint64_t step = first; step < last; ++step) {
      Status st = LookupAll(n, one, {1}, step);
      if (st.ok()) st = PushAll(n, one, {1}, step, 0.1f * static_cast<float>(step));
      if (!st.ok()) return st;
    }
    return Status::OK();
  };
  auto pre_a = Migration(one, two, 0, {a}, {a, b}, 5);
  auto pre_b = Migration(one, two, 1, {a}, {a, b}, 5);
  pre_a.phase = pre_b.phase = MigratePhase::kPrecopy;
  std::promise<StatusOr<json>> on_a;
  a->service->Migrate(pre_a, [&](StatusOr<json> r) { on_a.set_value(std::move(r)); });
  auto training = std::async(std::launch::async, [&] { return train_b(a, 5, 10); });
  auto got_b = RunMigrate(b, pre_b);
  auto got_a = on_a.get_future().get();
  ASSERT_TRUE(got_a.ok()) << got_a.status();
  ASSERT_TRUE(got_b.ok()) << got_b.status();
  EXPECT_EQ((*got_b)["rows"], 50 + 50);
  Status trained = training.get();
  ASSERT_TRUE(trained.ok()) << trained;
  ASSERT_TRUE(train_b(reference, 5, 10).ok());
  // A fetch of changed rows before the boundary's MIGRATE is refused.
  {
    FetchRowsRequest q;
    q.version = 1;
    q.shard = 1;
    q.row_end = 50;
    q.max_rows = 10;
    q.changed = true;
    auto reply = Call(a, EncodeJson(Opcode::kFetchRows, q.ToJson()));
    EXPECT_EQ(reply.status().code(), StatusCode::kFailedPrecondition) << reply.status();
  }

  // The boundary at step 10: table b's 50 rows changed, table a's none.
  auto changed_a = Migration(one, two, 0, {a}, {a, b}, 10);
  auto changed_b = Migration(one, two, 1, {a}, {a, b}, 10);
  changed_a.phase = changed_b.phase = MigratePhase::kChanged;
  std::promise<StatusOr<json>> on_a2;
  a->service->Migrate(changed_a, [&](StatusOr<json> r) { on_a2.set_value(std::move(r)); });
  got_b = RunMigrate(b, changed_b);
  got_a = on_a2.get_future().get();
  ASSERT_TRUE(got_a.ok()) << got_a.status();
  ASSERT_TRUE(got_b.ok()) << got_b.status();
  EXPECT_EQ((*got_b)["rows"], 50);  // b's columns 0..1 of table b's rows
  EXPECT_EQ((*got_a)["rows"], 50);  // table b's column 2, which a re-cuts for itself

  ASSERT_TRUE(a->service->CreateShards(job, two, {}, /*keep=*/true, /*staged=*/2).ok());
  ASSERT_TRUE(b->service->CreateShards(job, two, {}, /*keep=*/true, /*staged=*/2).ok());
  for (int t = 0; t < 2; ++t) EXPECT_EQ(Table({a, b}, two, t, 10), Table({reference}, one, t, 10)) << "table " << t;
  Train({a, b}, two, 10, 3);
  Train({reference}, one, 10, 3);
  for (int t = 0; t < 2; ++t) EXPECT_EQ(Table({a, b}, two, t, 13), Table({reference}, one, t, 13)) << "table " << t;
}

// A server that came back holding an older plan's shards (its master was
// replaced and the job rolled back without it) joins as a new server: its
// stale rows are dropped and it fetches the current ones.
TEST_P(MigrationTest, AServerWithAnOlderPlansShardsJoinsAsANewOne) {
  const JobConfig job = MakeJob();
  ShardingPlan one = OnePlan();
  one.version = 2;  // the running plan, after a rollback
  ShardingPlan two = TwoPlan();
  two.version = 3;
  ShardingPlan old = OnePlan();  // version 1: what the stale server holds
  Node* a = AddNode("a");
  Node* reference = AddNode("reference");
  Node* stale = AddNode("stale");
  ASSERT_TRUE(a->service->CreateShards(job, one).ok());
  ASSERT_TRUE(reference->service->CreateShards(job, one).ok());
  ASSERT_TRUE(stale->service->CreateShards(job, old).ok());
  Train({a}, one, 0, 4);
  Train({reference}, one, 0, 4);
  Train({stale}, old, 0, 1);  // its rows differ from the job's
  stale->service->set_rank(1);
  std::promise<StatusOr<json>> on_a;
  a->service->Migrate(Migration(one, two, 0, {a}, {a, stale}, 4),
                      [&](StatusOr<json> r) { on_a.set_value(std::move(r)); });
  auto on_stale = RunMigrate(stale, Migration(one, two, 1, {a}, {a, stale}, 4));
  ASSERT_TRUE(on_stale.ok()) << on_stale.status();
  ASSERT_TRUE(on_a.get_future().get().ok());
  ASSERT_TRUE(a->service->CreateShards(job, two, {}, /*keep=*/true, /*staged=*/3).ok());
  ASSERT_TRUE(stale->service->CreateShards(job, two, {}, /*keep=*/true, /*staged=*/3).ok());
  for (int t = 0; t < 2; ++t) EXPECT_EQ(Table({a, stale}, two, t, 4), Table({reference}, one, t, 4)) << "table " << t;
  // A server ahead of the migration's plan is refused.
  auto behind = Migration(old, two, 1, {a}, {a, stale}, 4);
  EXPECT_EQ(RunMigrate(stale, behind).status().code(), StatusCode::kFailedPrecondition);
}

// A `changed` migration needs a finished precopy to the same plan.
TEST_P(MigrationTest, ChangedRowsWithoutAPrecopyAreRefused) {
  const JobConfig job = MakeJob();
  const ShardingPlan one = OnePlan(), two = TwoPlan();
  Node* a = AddNode("a");
  ASSERT_TRUE(a->service->CreateShards(job, one).ok());
  auto changed = Migration(one, two, 0, {a}, {a}, 3);
  changed.phase = MigratePhase::kChanged;
  auto got = RunMigrate(a, changed);
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << got.status();
  // A plain migration to the plan leaves no precopy either.
  auto all = Migration(one, two, 0, {a}, {a}, 3);
  ASSERT_TRUE(RunMigrate(a, all).ok());
  got = RunMigrate(a, changed);
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << got.status();
}

// 2 -> 1: a leaving server (rank -1) serves its rows and stages nothing.
TEST_P(MigrationTest, ALeavingServerHandsItsRowsOver) {
  const JobConfig job = MakeJob();
  ShardingPlan two = TwoPlan();
  two.version = 1;
  ShardingPlan one = OnePlan();
  one.version = 2;
  Node* a = AddNode("a");
  Node* b = AddNode("b");
  Node* reference = AddNode("reference");
  a->service->set_rank(0);
  b->service->set_rank(1);
  ASSERT_TRUE(a->service->CreateShards(job, two).ok());
  ASSERT_TRUE(b->service->CreateShards(job, two).ok());
  ShardingPlan ref_plan = two;
  ref_plan.num_ps = 1;
  for (ShardSpec& s : ref_plan.shards) s.ps = 0;
  ASSERT_TRUE(reference->service->CreateShards(job, ref_plan).ok());
  Train({a, b}, two, 0, 4);
  Train({reference}, ref_plan, 0, 4);

  std::promise<StatusOr<json>> on_b;
  b->service->Migrate(Migration(two, one, -1, {a, b}, {a, b}, 4), [&](StatusOr<json> r) { on_b.set_value(std::move(r)); });
  auto on_a = RunMigrate(a, Migration(two, one, 0, {a, b}, {a, b}, 4));
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  auto left = on_b.get_future().get();
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ((*left)["shards"], 0);
  EXPECT_EQ(a->open_peers(), 2u);  // to b, and to itself for its own rows' new cut
  ASSERT_TRUE(a->service->CreateShards(job, one, {}, true, 2).ok());
  EXPECT_EQ(a->open_peers(), 0u);
  for (int t = 0; t < 2; ++t) EXPECT_EQ(Table({a}, one, t, 4), Table({reference}, ref_plan, t, 4)) << "table " << t;
}

INSTANTIATE_TEST_SUITE_P(Storage, MigrationTest, ::testing::Values("memory", "rocksdb", "gpu_tier_on_host"),
                         [](const auto& info) { return info.param; });

class MigrationRefusalTest : public MigrationTest {};

// Only the servers MIGRATE names may fetch, only during a migration from the
// plan the server follows, only rows of a shard it holds; a forged MIGRATE
// body, a staged CREATE_SHARDS without a migration, and a migration whose
// source is gone are refused or fail, and the running plan serves on.
TEST_P(MigrationRefusalTest, FetchesAndMigrationsThatMayNotBeAreRefusedAndChangeNothing) {
  const JobConfig job = MakeJob();
  const ShardingPlan one = OnePlan(), two = TwoPlan();
  Node* a = AddNode("a", /*open=*/false);
  ASSERT_TRUE(a->service->CreateShards(job, one).ok());
  auto fetch = [&](FetchRowsRequest q) { return Call(a, EncodeJson(Opcode::kFetchRows, q.ToJson())).status(); };
  FetchRowsRequest q;
  q.version = 1;
  q.shard = 0;
  q.row_begin = 0;
  q.row_end = 100;
  q.max_rows = 10;
  EXPECT_EQ(fetch(q).code(), StatusCode::kPermissionDenied);  // no migration: no one may fetch

  // A staged CREATE_SHARDS with no migration: refused, the old plan stays.
  EXPECT_EQ(a->service->CreateShards(job, two, {}, true, 2).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->service->plan_version(), 1u);

  // A migration whose other server (the source of nothing here, but a
  // fetcher) is the only one allowed: the driver is a stranger.
  Node* b = AddNode("b");
  auto on_a = RunMigrate(a, Migration(one, two, 0, {a}, {a, b}, 0));
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  EXPECT_EQ(fetch(q).code(), StatusCode::kPermissionDenied);
  // b may fetch, but only what a holds, of the plan it follows.
  const int b_to_a = *b->client->Connect(a->endpoint());
  auto from_b = [&](FetchRowsRequest r) {
    return b->client->CallSync(b_to_a, EncodeJson(Opcode::kFetchRows, r.ToJson()), milliseconds(5000));
  };
  auto rows = from_b(q);
  ASSERT_TRUE(rows.ok()) << rows.status();
  auto decoded = DecodeFetchRowsReply(std::move(rows).value());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->meta.width, 4u);  // SGD: no state
  FetchRowsRequest bad = q;
  bad.shard = 9;
  EXPECT_EQ(from_b(bad).status().code(), StatusCode::kNotFound);
  bad = q;
  bad.row_end = 101;
  EXPECT_EQ(from_b(bad).status().code(), StatusCode::kOutOfRange);
  bad = q;
  bad.version = 2;
  EXPECT_EQ(from_b(bad).status().code(), StatusCode::kFailedPrecondition);
  Message malformed = EncodeJson(Opcode::kFetchRows, json{{"version", "1"}});
  EXPECT_EQ(b->client->CallSync(b_to_a, std::move(malformed), milliseconds(5000)).status().code(),
            StatusCode::kInvalidArgument);

  // A migration whose source died: the fetcher's fails, its old plan serves.
  Node* c = AddNode("c");
  ASSERT_TRUE(c->service->CreateShards(job, one).ok());
  const std::string gone = b->endpoint();
  b->server->Stop();
  MigrateRequest dead = Migration(one, two, 0, {c}, {c}, 0);
  dead.sources = {gone};
  auto failed = RunMigrate(c, dead);
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(c->service->CreateShards(job, two, {}, true, 2).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->service->plan_version(), 1u);
  EXPECT_EQ(Table({c}, one, 0, 0).size(), 400u);

  // Malformed MIGRATE bodies are refused by their parser.
  json body = Migration(one, two, 0, {a}, {a}, 0).ToJson();
  body["rank"] = -2;
  EXPECT_FALSE(MigrateRequest::Parse(body).ok());
  body = Migration(one, two, 0, {a}, {a}, 0).ToJson();
  body["fetchers"] = {"not hex"};
  EXPECT_FALSE(MigrateRequest::Parse(body).ok());
  body = Migration(one, two, 0, {a}, {a}, 0).ToJson();
  body.erase("from_plan");
  EXPECT_FALSE(MigrateRequest::Parse(body).ok());
  // A MIGRATE whose sources do not match its old plan fails at once.
  MigrateRequest mismatched = Migration(one, two, 0, {a, a}, {a}, 0);
  EXPECT_EQ(RunMigrate(a, mismatched).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Storage, MigrationRefusalTest, ::testing::Values("memory"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessera
