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

  std::vector<std::unique_ptr<PsService>> services;
  std::vector<std::unique_ptr<RpcServer>> servers;
  auto client = std::move(RpcClient::Create()).value();
  std::vector<int> peers;
  for (int s = 0; s < kServers; ++s) {
    PsServiceOptions options{s};
    options.open_to_any_sender = true;  // no master: the test plays it
    services.push_back(std::make_unique<PsService>(options));
    ASSERT_TRUE(services.back()->CreateShards(job, *plan).ok());
    PsService* svc = services.back().get();
    servers.push_back(std::move(RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 1}, [svc](Message&& m, Responder r) {
                                  svc->Handle(std::move(m), std::move(r));
                                })).value());
    peers.push_back(*client->Connect(servers.back()->endpoint()));
  }
  EmbeddingClient embeddings(EmbeddingClientOptions{0, milliseconds(5000)}, job, *plan, client.get(), peers);

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
  FeatureOutputs out;
  ASSERT_TRUE(embeddings.Lookup(0, kjt, /*inference=*/true, &out).ok());

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

}  // namespace
}  // namespace tessera
