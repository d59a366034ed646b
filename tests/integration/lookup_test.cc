// Lookups through the real routing and real parameter servers (in process,
// over loopback) against the reference kernels on the whole table: weighted
// sum, mean and unpooled lookups, for every way of sharding a table.
#include <gtest/gtest.h>

#include <random>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "kernels/config_conversion.h"
#include "kernels/embedding_bag.h"
#include "master/planner.h"
#include "ps/ps_service.h"
#include "trainer/embedding_client.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

struct Case {
  std::string sharding;
  std::string pooling;
};

// Two servers and one trainer's client in this process, over loopback.
struct LoopbackJob {
  LoopbackJob(const JobConfig& job, const ShardingPlan& plan, RowReplies replies, bool plan_independent = false,
              bool bf16 = false) {
    client = std::move(RpcClient::Create()).value();
    std::vector<int> peers;
    for (int s = 0; s < plan.num_ps; ++s) {
      PsServiceOptions options{s};
      options.open_to_any_sender = true;  // no master: the test plays it
      services.push_back(std::make_unique<PsService>(options));
      EXPECT_TRUE(services.back()->CreateShards(job, plan).ok());
      PsService* svc = services.back().get();
      servers.push_back(std::move(RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 1},
                                                   [svc](Message&& m, Responder r) { svc->Handle(std::move(m), std::move(r)); }))
                            .value());
      peers.push_back(*client->Connect(servers.back()->endpoint()));
    }
    EmbeddingClientOptions options{0, milliseconds(5000)};
    options.row_replies = replies;
    options.plan_independent_pooling = plan_independent;
    options.forward_bf16 = options.backward_bf16 = bf16;
    embeddings = std::make_unique<EmbeddingClient>(options, job, plan, client.get(), peers);
  }
  std::vector<std::unique_ptr<PsService>> services;
  std::vector<std::unique_ptr<RpcServer>> servers;
  std::unique_ptr<RpcClient> client;
  std::unique_ptr<EmbeddingClient> embeddings;
};

// One table-wise table of 1,000 rows of dim 4, feature "f", over `servers`.
JobConfig OneTableJob(int servers) {
  JobConfig job;
  job.cluster = {servers, 1};
  TableConfig t;
  t.name = "t";
  t.num_embeddings = 1000;
  t.embedding_dim = 4;
  t.feature_names = {"f"};
  t.sharding_type = "table_wise";
  job.tables = {t};
  return job;
}

class LookupTest : public ::testing::TestWithParam<Case> {};

TEST_P(LookupTest, MatchesTheReferenceKernelOnTheWholeTable) {
  const Case c = GetParam();
  constexpr int kServers = 2, kRows = 37, kDim = 7, kBatch = 9;
  JobConfig job;
  job.cluster = {kServers, 1};
  TableConfig t;
  t.name = "t";
  t.num_embeddings = kRows;
  t.embedding_dim = kDim;
  t.feature_names = {"f", "g"};  // two features share the table
  t.sharding_type = c.sharding;
  t.seed = 99;
  t.pooling = c.pooling == "SUM" ? PoolingType::kSum : c.pooling == "MEAN" ? PoolingType::kMean : PoolingType::kNone;
  job.tables = {t};
  auto plan = PlanSharding(job, PlannerOptions::Uniform(kServers));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tables[0].type == ShardingType::kTableWise, c.sharding == "table_wise");

  // A batch with duplicate ids, empty bags, a long bag and per-id weights.
  std::mt19937 rng(5);
  KeyedJaggedTensor kjt;
  kjt.keys = {"f", "g"};
  kjt.batch_size = kBatch;
  for (int f = 0; f < 2; ++f) {
    for (int b = 0; b < kBatch; ++b) {
      const int len = b == 0 ? 0 : b == 1 ? 40 : static_cast<int>(rng() % 6);
      kjt.lengths.push_back(len);
      for (int k = 0; k < len; ++k) {
        kjt.values.push_back(k % 3 == 0 ? 3 : static_cast<int64_t>(rng() % kRows));
        kjt.weights.push_back(0.25f + static_cast<float>(rng() % 8) / 4.0f);
      }
    }
  }
  // Pooled by the servers, and as rows pooled here.
  for (RowReplies replies : {RowReplies::kNever, RowReplies::kAlways}) {
    SCOPED_TRACE(RowRepliesName(replies));
    LoopbackJob loopback(job, *plan, replies);
    FeatureOutputs out;
    ASSERT_TRUE(loopback.embeddings->Lookup(0, kjt, /*inference=*/true, &out).ok());

    // The reference: the kernel over the whole table, initialized as servers do.
    std::vector<float> table(kRows * kDim);
    const auto init = kernels::ToRowInitializer(t.initializer, t.seed);
    for (int r = 0; r < kRows; ++r) kernels::InitRow(init, r, 0, kDim, &table[r * kDim]);
    const auto value_offsets = kjt.FeatureValueOffsets();
    for (int f = 0; f < 2; ++f) {
      const auto offsets = kjt.BagOffsets(f);
      const int64_t n = value_offsets[f + 1] - value_offsets[f];
      std::vector<float> expect((c.pooling == "NONE" ? n : kBatch) * kDim, NAN);
      kernels::EmbeddingBagForwardArgs<int64_t> args;
      args.rows = table.data();
      args.num_rows = kRows;
      args.row_stride = kDim;
      args.dim = kDim;
      args.indices = kjt.values.data() + value_offsets[f];
      args.offsets = offsets.data();
      args.num_bags = kBatch;
      args.weights = kjt.weights.data() + value_offsets[f];
      args.pooling = kernels::ToPooling(t.pooling);
      args.out = expect.data();
      kernels::EmbeddingBagForwardCpu(args);
      ASSERT_EQ(out[f].size(), expect.size());
      for (size_t i = 0; i < expect.size(); ++i) {
        // Row shards add partial sums: equal up to float rounding.
        EXPECT_NEAR(out[f][i], expect[i], 1e-6) << "feature " << f << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    ShardingAndPooling, LookupTest,
    ::testing::ValuesIn([] {
      std::vector<Case> cases;
      for (const char* s : {"table_wise", "row_wise", "column_wise", "table_row_wise"}) {
        for (const char* p : {"SUM", "MEAN", "NONE"}) cases.push_back({s, p});
      }
      return cases;
    }()),
    [](const auto& info) { return info.param.sharding + "_" + info.param.pooling; });

// Rows sent once and pooled by the trainer (kEntryRows) against rows pooled
// by the servers: the same outputs and, after training steps, the same
// tables, bit for bit, for every sharding and pooling, weighted or not; and
// fewer bytes where ids repeat more than bags do.
class RowRepliesTest : public ::testing::TestWithParam<Case> {};

TEST_P(RowRepliesTest, EqualPooledRepliesBitForBitAndMoveFewerBytesOnHotIds) {
  const Case c = GetParam();
  constexpr int kServers = 2, kRows = 50, kDim = 8, kBatch = 64, kSteps = 4;
  JobConfig job;
  job.cluster = {kServers, 1};
  TableConfig t;
  t.name = "t";
  t.num_embeddings = kRows;
  t.embedding_dim = kDim;
  t.feature_names = {"hot", "multi"};
  t.sharding_type = c.sharding;
  t.seed = 3;
  t.pooling = c.pooling == "SUM" ? PoolingType::kSum : PoolingType::kMean;
  t.optimizer.type = "adagrad";
  t.optimizer.lr = 0.1;
  job.tables = {t};
  auto plan = PlanSharding(job, PlannerOptions::Uniform(kServers));
  ASSERT_TRUE(plan.ok()) << plan.status();
  LoopbackJob never(job, *plan, RowReplies::kNever), always(job, *plan, RowReplies::kAlways),
      automatic(job, *plan, RowReplies::kAuto);

  std::mt19937 rng(17);
  for (int step = 0; step < kSteps; ++step) {
    // "hot": one id per bag out of 6 (one-hot, hot ids); "multi": up to 9
    // ids per bag, some bags empty, weighted on odd steps.
    KeyedJaggedTensor kjt;
    kjt.keys = {"hot", "multi"};
    kjt.batch_size = kBatch;
    for (int b = 0; b < kBatch; ++b) {
      kjt.lengths.push_back(1);
      kjt.values.push_back(static_cast<int64_t>(rng() % 6));
    }
    for (int b = 0; b < kBatch; ++b) {
      const int len = b % 5 == 0 ? 0 : static_cast<int>(rng() % 10);
      kjt.lengths.push_back(len);
      for (int k = 0; k < len; ++k) kjt.values.push_back(static_cast<int64_t>(rng() % kRows));
    }
    if (step % 2 == 1) {
      for (size_t i = 0; i < kjt.values.size(); ++i) kjt.weights.push_back(0.5f + static_cast<float>(rng() % 5) / 4.0f);
    }
    FeatureOutputs out[3];
    LoopbackJob* jobs[3] = {&never, &always, &automatic};
    for (int j = 0; j < 3; ++j) {
      ASSERT_TRUE(jobs[j]->embeddings->Lookup(step, kjt, /*inference=*/false, &out[j]).ok());
    }
    for (int j = 1; j < 3; ++j) {
      for (int f = 0; f < 2; ++f) {
        ASSERT_EQ(out[j][f], out[0][f]) << "step " << step << " feature " << f << " client " << j;
      }
    }
    // Hot ids: 6 distinct rows for 64 bags, so rows move fewer bytes; kAuto
    // takes them.
    EXPECT_LT(always.embeddings->last_reply_bytes(), never.embeddings->last_reply_bytes());
    EXPECT_LT(automatic.embeddings->last_reply_bytes() + automatic.embeddings->last_lookup_bytes(),
              never.embeddings->last_reply_bytes() + never.embeddings->last_lookup_bytes());
    FeatureOutputs grads(2);
    for (int f = 0; f < 2; ++f) {
      grads[f].resize(out[0][f].size());
      for (float& g : grads[f]) g = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 997.0f;
    }
    for (LoopbackJob* j : jobs) ASSERT_TRUE(j->embeddings->PushGradients(grads).ok());
  }
  // The tables after training, read back whole.
  KeyedJaggedTensor all;
  all.keys = {"hot", "multi"};
  all.batch_size = kRows;
  for (int f = 0; f < 2; ++f) {
    for (int r = 0; r < kRows; ++r) {
      all.lengths.push_back(1);
      all.values.push_back(r);
    }
  }
  FeatureOutputs tables[3];
  ASSERT_TRUE(never.embeddings->Lookup(kSteps, all, true, &tables[0]).ok());
  ASSERT_TRUE(always.embeddings->Lookup(kSteps, all, true, &tables[1]).ok());
  ASSERT_TRUE(automatic.embeddings->Lookup(kSteps, all, true, &tables[2]).ok());
  EXPECT_EQ(tables[1][0], tables[0][0]);
  EXPECT_EQ(tables[2][0], tables[0][0]);
  // And the rows did train.
  std::vector<float> initial(kDim);
  const auto init = kernels::ToRowInitializer(t.initializer, t.seed);
  kernels::InitRow(init, 0, 0, kDim, initial.data());
  EXPECT_NE(std::vector<float>(tables[0][0].begin(), tables[0][0].begin() + kDim), initial);
}

INSTANTIATE_TEST_SUITE_P(
    ShardingAndPooling, RowRepliesTest,
    ::testing::ValuesIn([] {
      std::vector<Case> cases;
      for (const char* s : {"table_wise", "row_wise", "column_wise", "table_row_wise"}) {
        for (const char* p : {"SUM", "MEAN"}) cases.push_back({s, p});
      }
      return cases;
    }()),
    [](const auto& info) { return info.param.sharding + "_" + info.param.pooling; });

// kAuto picks rows or pooled bags by the bytes each moves, counted in the
// precision the job sends: 10 bags of 4 ids over 16 distinct ids of dim 4
// are cheaper pooled in float32 (520 bytes of ids, lengths and rows each
// way, against 576 as rows) and cheaper as rows in bfloat16 (360 against
// 320).
TEST(RowRepliesBreakEvenTest, AutoMovesNoMoreBytesThanEitherWayInEitherPrecision) {
  const JobConfig job = OneTableJob(1);
  auto plan = PlanSharding(job, PlannerOptions::Uniform(1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  KeyedJaggedTensor kjt;
  kjt.keys = {"f"};
  kjt.batch_size = 10;
  for (int b = 0; b < 10; ++b) {
    kjt.lengths.push_back(4);
    for (int k = 0; k < 4; ++k) kjt.values.push_back(100 + (b * 4 + k) % 16);
  }
  for (bool bf16 : {false, true}) {
    int64_t moved[3] = {0, 0, 0};
    const RowReplies ways[3] = {RowReplies::kNever, RowReplies::kAlways, RowReplies::kAuto};
    for (int w = 0; w < 3; ++w) {
      LoopbackJob j(job, *plan, ways[w], /*plan_independent=*/false, bf16);
      FeatureOutputs out;
      ASSERT_TRUE(j.embeddings->Lookup(0, kjt, /*inference=*/false, &out).ok());
      FeatureOutputs grads(1, std::vector<float>(out[0].size(), 0.25f));
      ASSERT_TRUE(j.embeddings->PushGradients(grads).ok());
      moved[w] = j.embeddings->last_lookup_bytes() + j.embeddings->last_reply_bytes() +
                 j.embeddings->last_push_bytes();
    }
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    // The case is one where the two ways differ, and in each precision the
    // other one wins.
    if (bf16) {
      EXPECT_LT(moved[1], moved[0]) << "rows should be cheaper in bf16";
    } else {
      EXPECT_LT(moved[0], moved[1]) << "pooled bags should be cheaper in fp32";
    }
    EXPECT_EQ(moved[2], std::min(moved[0], moved[1])) << "never " << moved[0] << ", always " << moved[1];
  }
}

// training.plan_independent_pooling: a table split by rows over 2 or 3
// servers gives the outputs and, after training steps, the table of the
// same table whole on one server, bit for bit, for SUM and MEAN, weighted
// or not (the servers' partial sums, added up, differ in their rounding).
class PlanIndependentPoolingTest : public ::testing::TestWithParam<Case> {};

// n servers on one host (table_row_wise splits a table over one host's servers).
PlannerOptions OneHost(int n) {
  PlannerOptions o = PlannerOptions::Uniform(n);
  for (ServerInfo& s : o.servers) s.host = "host";
  return o;
}

TEST_P(PlanIndependentPoolingTest, RowShardsOnAnyNumberOfServersEqualTheWholeTableOnOne) {
  const Case c = GetParam();
  constexpr int kRows = 90, kDim = 8, kBatch = 48, kSteps = 4;
  auto job_on = [&](int servers) {
    JobConfig job;
    job.cluster = {servers, 1};
    TableConfig t;
    t.name = "t";
    t.num_embeddings = kRows;
    t.embedding_dim = kDim;
    t.feature_names = {"multi"};
    t.sharding_type = c.sharding;
    t.seed = 4;
    t.pooling = c.pooling == "SUM" ? PoolingType::kSum : PoolingType::kMean;
    t.optimizer.type = "adagrad";
    t.optimizer.lr = 0.1;
    job.tables = {t};
    return job;
  };
  std::vector<std::unique_ptr<LoopbackJob>> jobs;
  std::vector<int> servers_of;
  for (int servers : {1, 2, 3}) {
    const JobConfig job = job_on(servers);
    auto plan = PlanSharding(job, OneHost(servers));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->tables[0].shards.size(), static_cast<size_t>(servers));
    // One server: the servers pool (the reference); more: rows pooled whole here.
    jobs.push_back(std::make_unique<LoopbackJob>(job, *plan, servers == 1 ? RowReplies::kNever : RowReplies::kAuto,
                                                 /*plan_independent=*/servers > 1));
    servers_of.push_back(servers);
  }
  // The same split without it: its partial sums round otherwise.
  const JobConfig job3 = job_on(3);
  auto plan3 = PlanSharding(job3, OneHost(3));
  ASSERT_TRUE(plan3.ok());
  LoopbackJob partial(job3, *plan3, RowReplies::kNever);
  bool partial_differed = false;

  std::mt19937 rng(23);
  for (int step = 0; step < kSteps; ++step) {
    KeyedJaggedTensor kjt;
    kjt.keys = {"multi"};
    kjt.batch_size = kBatch;
    for (int b = 0; b < kBatch; ++b) {
      const int len = b % 7 == 0 ? 0 : static_cast<int>(rng() % 12);
      kjt.lengths.push_back(len);
      for (int k = 0; k < len; ++k) kjt.values.push_back(static_cast<int64_t>(rng() % kRows));
    }
    if (step % 2 == 1) {
      for (size_t i = 0; i < kjt.values.size(); ++i) kjt.weights.push_back(0.3f + static_cast<float>(rng() % 7) / 5.0f);
    }
    std::vector<FeatureOutputs> out(jobs.size());
    for (size_t j = 0; j < jobs.size(); ++j) {
      ASSERT_TRUE(jobs[j]->embeddings->Lookup(step, kjt, /*inference=*/false, &out[j]).ok());
    }
    for (size_t j = 1; j < jobs.size(); ++j) {
      ASSERT_EQ(out[j][0], out[0][0]) << "step " << step << ", " << servers_of[j] << " servers";
    }
    FeatureOutputs partial_out;
    ASSERT_TRUE(partial.embeddings->Lookup(step, kjt, /*inference=*/false, &partial_out).ok());
    partial_differed = partial_differed || partial_out[0] != out[0][0];
    FeatureOutputs grads(1);
    grads[0].resize(out[0][0].size());
    for (float& g : grads[0]) g = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 997.0f;
    for (auto& j : jobs) ASSERT_TRUE(j->embeddings->PushGradients(grads).ok());
    ASSERT_TRUE(partial.embeddings->PushGradients(grads).ok());
  }
  EXPECT_TRUE(partial_differed) << "the servers' partial sums rounded as the whole bags did: the test sees nothing";
  // The tables after training, read back whole.
  KeyedJaggedTensor all;
  all.keys = {"multi"};
  all.batch_size = kRows;
  for (int r = 0; r < kRows; ++r) {
    all.lengths.push_back(1);
    all.values.push_back(r);
  }
  std::vector<FeatureOutputs> tables(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    ASSERT_TRUE(jobs[j]->embeddings->Lookup(kSteps, all, /*inference=*/true, &tables[j]).ok());
  }
  for (size_t j = 1; j < jobs.size(); ++j) EXPECT_EQ(tables[j][0], tables[0][0]) << servers_of[j] << " servers";
}

INSTANTIATE_TEST_SUITE_P(
    ShardingAndPooling, PlanIndependentPoolingTest,
    ::testing::ValuesIn([] {
      std::vector<Case> cases;
      for (const char* s : {"row_wise", "table_row_wise"}) {
        for (const char* p : {"SUM", "MEAN"}) cases.push_back({s, p});
      }
      return cases;
    }()),
    [](const auto& info) { return info.param.sharding + "_" + info.param.pooling; });

// Ids travel as uint32 when every table fits (kLookupIds32): half the ids'
// bytes. An id no uint32 holds (a caller's bad input) goes as int64 instead,
// and the server refuses it with its error: nothing crashes, and the next
// lookup works.
TEST(LookupIdsTest, IdsGoAsUint32AndIdsPastItAreRefusedByTheServer) {
  const JobConfig job = OneTableJob(2);
  auto plan = PlanSharding(job, PlannerOptions::Uniform(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  LoopbackJob loopback(job, *plan, RowReplies::kNever);
  KeyedJaggedTensor kjt;
  kjt.keys = {"f"};
  kjt.batch_size = 2;
  kjt.lengths = {3, 2};
  kjt.values = {1, 2, 3, 999, 0};
  FeatureOutputs out;
  ASSERT_TRUE(loopback.embeddings->Lookup(0, kjt, /*inference=*/true, &out).ok());
  // One entry of 16 bytes, 2 lengths, 5 ids of 4 bytes.
  EXPECT_EQ(loopback.embeddings->last_lookup_bytes(), 16 + 2 * 4 + 5 * 4);
  for (int64_t bad : {int64_t{1} << 33, int64_t{-1}, int64_t{1000}}) {
    kjt.values[3] = bad;
    Status st = loopback.embeddings->Lookup(0, kjt, /*inference=*/true, &out);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find(std::to_string(bad)), std::string::npos) << st;
  }
  kjt.values[3] = 999;
  EXPECT_TRUE(loopback.embeddings->Lookup(0, kjt, /*inference=*/true, &out).ok());

  // A table of more than 2^32 rows (never created: only the client's
  // encoding is looked at) sends 8-byte ids.
  JobConfig big = job;
  big.tables[0].num_embeddings = (int64_t{1} << 32) + 1;
  EmbeddingClient wide(EmbeddingClientOptions{0, std::chrono::milliseconds(100)}, big, *plan,
                       loopback.client.get(), {});
  EXPECT_EQ(wide.id_bytes(), 8);
  EXPECT_EQ(loopback.embeddings->id_bytes(), 4);
}

// An evaluation between a training lookup and its push (a PyTorch loop may
// validate before backward()) reads the rows that lookup read, and the push
// still goes by the training lookup's routes: the tables end bit for bit as
// without it. The push's gradients must have the lookup's shapes, and a
// whole lookup is refused while a prefetched one is in flight.
TEST(EvaluationTest, ALookupBetweenATrainingLookupAndItsPushChangesNothing) {
  constexpr int kRows = 40, kDim = 4, kBatch = 6;
  JobConfig job;
  job.cluster = {2, 1};
  TableConfig t;
  t.name = "t";
  t.num_embeddings = kRows;
  t.embedding_dim = kDim;
  t.feature_names = {"f"};
  t.sharding_type = "row_wise";
  t.optimizer.type = "sgd";
  t.optimizer.lr = 0.5;
  job.tables = {t};
  auto plan = PlanSharding(job, PlannerOptions::Uniform(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  LoopbackJob plain(job, *plan, RowReplies::kNever), evaluated(job, *plan, RowReplies::kNever);
  KeyedJaggedTensor all;  // every row, one per bag: another shape than the steps' batches
  all.keys = {"f"};
  all.batch_size = kRows;
  for (int r = 0; r < kRows; ++r) {
    all.lengths.push_back(1);
    all.values.push_back(r);
  }
  std::mt19937 rng(23);
  for (int step = 0; step < 3; ++step) {
    KeyedJaggedTensor kjt;
    kjt.keys = {"f"};
    kjt.batch_size = kBatch;
    for (int b = 0; b < kBatch; ++b) {
      const int len = static_cast<int>(rng() % 4);
      kjt.lengths.push_back(len);
      for (int k = 0; k < len; ++k) kjt.values.push_back(static_cast<int64_t>(rng() % kRows));
    }
    FeatureOutputs out, evaluated_out, before, during;
    ASSERT_TRUE(evaluated.embeddings->Lookup(step, all, /*inference=*/true, &before).ok());
    ASSERT_TRUE(plain.embeddings->Lookup(step, kjt, /*inference=*/false, &out).ok());
    ASSERT_TRUE(evaluated.embeddings->Lookup(step, kjt, /*inference=*/false, &evaluated_out).ok());
    ASSERT_TRUE(evaluated.embeddings->Lookup(step, all, /*inference=*/true, &during).ok());
    EXPECT_EQ(during[0], before[0]) << "step " << step;
    FeatureOutputs grads(1, std::vector<float>(out[0].size()));
    for (float& g : grads[0]) g = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 997.0f;
    // Gradients of the evaluation's shape are refused, and the step's go.
    FeatureOutputs wrong(1, std::vector<float>(during[0].size(), 1.0f));
    Status st = evaluated.embeddings->StartPush(wrong);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    ASSERT_TRUE(plain.embeddings->PushGradients(grads).ok());
    ASSERT_TRUE(evaluated.embeddings->PushGradients(grads).ok());
  }
  FeatureOutputs tables[2];
  ASSERT_TRUE(plain.embeddings->Lookup(3, all, true, &tables[0]).ok());
  ASSERT_TRUE(evaluated.embeddings->Lookup(3, all, true, &tables[1]).ok());
  EXPECT_EQ(tables[1][0], tables[0][0]);

  // A prefetched lookup in flight: a whole lookup would be answered with its rows.
  ASSERT_TRUE(evaluated.embeddings->StartLookup(3, all, /*inference=*/false).ok());
  FeatureOutputs out;
  EXPECT_EQ(evaluated.embeddings->Lookup(3, all, true, &out).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(evaluated.embeddings->FinishLookup(&out).ok());
}

}  // namespace
}  // namespace tessera
