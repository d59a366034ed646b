// PsService over a real RpcServer on loopback: lookups, pushes, sync-mode
// step barrier, exactly-once, and every validation error (each answered with
// an error while the server keeps serving and nothing is applied).
#include "ps/ps_service.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "kernels/row_init.h"

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
  void Start(const std::string& consistency, int trainers) {
    job_ = MakeJob(consistency, trainers);
    // Every table whole on server 0: shard id = table index.
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
    service_ = std::make_unique<PsService>(PsServiceOptions{0});
    ASSERT_TRUE(service_->CreateShards(job_, plan_).ok());
    auto server = RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 2}, [this](Message&& m, Responder r) {
      service_->Handle(std::move(m), std::move(r));
    });
    ASSERT_TRUE(server.ok());
    server_ = std::move(server).value();
    client_ = std::move(RpcClient::Create()).value();
    peer_ = *client_->Connect(server_->endpoint());
  }
  void TearDown() override {
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
  Message Lookup(uint32_t trainer, uint64_t step, const std::vector<std::vector<int64_t>>& bags, uint32_t shard = 0) {
    std::vector<int32_t> lengths;
    std::vector<int64_t> ids;
    for (const auto& b : bags) {
      lengths.push_back(static_cast<int32_t>(b.size()));
      ids.insert(ids.end(), b.begin(), b.end());
    }
    const auto n = static_cast<uint32_t>(ids.size());
    Message m = EncodeLookupRequest(LookupMeta{trainer, 0, step},
                                    {LookupEntry{shard, static_cast<uint32_t>(bags.size()), n, 0}}, std::move(lengths),
                                    std::move(ids), {});
    m.header.plan_version = plan_.version;
    return m;
  }
  Message Push(uint32_t trainer, uint64_t step, uint32_t rows, uint32_t cols, std::vector<float> grads,
               uint32_t shard = 0) {
    Message m = EncodePushRequest(PushMeta{trainer, 0, step}, {PushEntry{shard, rows, cols, 0}}, std::move(grads));
    m.header.plan_version = plan_.version;
    return m;
  }
  StatusOr<std::vector<float>> Values(StatusOr<Message> reply, size_t n) {
    if (!reply.ok()) return reply.status();
    ArrayFrame<float> v;
    TESSERA_RETURN_IF_ERROR(DecodeLookupResponse(*reply, n, &v));
    return std::vector<float>(v.span().begin(), v.span().end());
  }
  StatusOr<Message> Call(Message m) { return client_->CallSync(peer_, std::move(m), milliseconds(5000)); }

  JobConfig job_;
  ShardingPlan plan_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  int peer_ = -1;
};

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
  ASSERT_TRUE(Call(Lookup(1, 0, {{7}})).ok());
  ASSERT_TRUE(Call(Push(1, 0, 1, 4, {3, 3, 3, 3})).ok());
  auto v = Values(early.Wait(), 4);
  ASSERT_TRUE(v.ok()) << v.status();
  // Both gradients applied as one step: 0.5 * (1 + 3).
  for (int c = 0; c < 4; ++c) EXPECT_NEAR((*v)[c], Init(0, 7, c) - 2.0f, 1e-6);
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

}  // namespace
}  // namespace tessera
