// The GPU tier as the parameter server uses it:
//  - a shard over the tier computes what a shard over host memory computes
//    (lookups, gradients, optimizer steps), with the tier's slots in host
//    memory here and, where there is a GPU, in GPU memory;
//  - the CUDA SlotTable against the host one on fresh random inputs (skips,
//    visibly, without a usable GPU);
//  - how a server's flags size the tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/sharding_plan.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/dedup.h"
#include "kernels/sparse_optimizer.h"
#include "ps/device_row_store.h"
#include "ps/embedding_shard.h"
#include "ps/slot_table.h"
#include "ps/store_factory.h"

namespace tessera {
namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

bool HaveGpu() { return kernels::NoCudaDeviceReason().empty(); }

// A request: bag lengths (some empty, some long), ids drawn with many
// duplicates from [lo, lo + rows), optional per-id weights.
struct Request {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
};

Request RandomRequest(std::mt19937_64& rng, int64_t lo, int64_t rows, int bags, bool weighted, int long_bag = 0) {
  Request r;
  std::uniform_int_distribution<int> len(0, 6);
  // Half the ids from a hot tenth of the rows: duplicates within and across bags.
  std::uniform_int_distribution<int64_t> hot(0, std::max<int64_t>(0, rows / 10 - 1)), any(0, rows - 1);
  std::uniform_real_distribution<float> w(-1.0f, 1.0f);
  for (int b = 0; b < bags; ++b) {
    const int n = (b == bags / 2 && long_bag > 0) ? long_bag : len(rng);
    r.lengths.push_back(n);
    for (int i = 0; i < n; ++i) {
      r.ids.push_back(lo + ((rng() & 1) ? hot(rng) : any(rng)));
      if (weighted) r.weights.push_back(w(rng));
    }
  }
  return r;
}

TableConfig MakeTable(const std::string& optimizer, PoolingType pooling, int dim, int64_t rows) {
  TableConfig t;
  t.name = "t_" + optimizer;
  t.num_embeddings = rows;
  t.embedding_dim = dim;
  t.pooling = pooling;
  t.optimizer.type = optimizer;
  t.optimizer.lr = 0.05;
  t.optimizer.initial_accumulator = 0.1;
  t.seed = 7;
  return t;
}

// How the tier under test holds its slots.
enum class Slots { kHost, kCuda };

RowStoreFactory TierFactory(Slots where, int64_t slots) {
  return [where, slots](const ShardSpec& shard, const RowStoreOptions& rows) -> StatusOr<std::unique_ptr<RowStore>> {
    std::unique_ptr<SlotTable> table;
    if (where == Slots::kHost) {
      table = NewHostSlotTable(slots, rows.row_width);
    } else {
      TESSERA_ASSIGN_OR_RETURN(table, NewCudaSlotTable(0, slots, rows.row_width));
    }
    TESSERA_ASSIGN_OR_RETURN(auto tier, DeviceRowStore::Create(rows, std::move(table), NewMemoryRowStore(rows),
                                                               shard.row_offset, shard.num_rows));
    return std::unique_ptr<RowStore>(std::move(tier));
  };
}

void ExpectNear(const std::vector<float>& want, const std::vector<float>& got, float tol, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = tol == 0.0f ? (want[i] == got[i] || (std::isnan(want[i]) && std::isnan(got[i])))
                                : std::fabs(want[i] - got[i]) <= tol * (1.0f + std::fabs(want[i]));
    if (!ok && reported++ < 5) ADD_FAILURE() << what << "[" << i << "]: want " << want[i] << ", got " << got[i];
  }
}

// The full rows (weights and optimizer state) of `ids`, through the RowStore
// interface, which writes a tier's dirty rows back first.
std::vector<float> ReadRows(RowStore* store, const std::vector<int64_t>& ids) {
  const int width = store->row_width();
  std::vector<float> v(ids.size() * width, kPoison);
  Status s = store->Read(ids, [&](const float* const* p, int64_t n) {
    for (int64_t i = 0; i < n; ++i) std::copy(p[i], p[i] + width, v.begin() + i * width);
  });
  EXPECT_TRUE(s.ok()) << s;
  return v;
}

struct ShardCase {
  std::string optimizer;
  PoolingType pooling;
  int dim;
  int64_t slots;  // of the tier; fewer than the shard's 600 rows forces evictions
};

void PrintTo(const ShardCase& c, std::ostream* os) {
  *os << c.optimizer << " " << PoolingName(c.pooling) << " dim " << c.dim << " slots " << c.slots;
}

std::string CaseName(const ::testing::TestParamInfo<ShardCase>& info) {
  return info.param.optimizer + "_" + PoolingName(info.param.pooling) + "_dim" + std::to_string(info.param.dim) +
         "_slots" + std::to_string(info.param.slots);
}

class ShardOverTier : public ::testing::TestWithParam<ShardCase> {
 protected:
  // Runs the same steps on a shard over host memory and one over the tier
  // and compares every output, every gradient and, at the end, every row.
  // tol 0: bit for bit (both run the same CPU arithmetic in the same order).
  void Compare(Slots where, float tol) {
    const ShardCase& c = GetParam();
    const int64_t rows = 600;
    TableConfig table = MakeTable(c.optimizer, c.pooling, c.dim, rows + 100);
    ShardSpec spec;
    spec.shard_id = 3;
    spec.row_offset = 100;  // a row shard: ids [100, 700)
    spec.num_rows = rows;
    spec.num_cols = c.dim;
    auto plain = EmbeddingShard::Create(spec, table);
    ASSERT_TRUE(plain.ok()) << plain.status();
    auto tiered = EmbeddingShard::Create(spec, table, TierFactory(where, c.slots));
    ASSERT_TRUE(tiered.ok()) << tiered.status();
    ASSERT_NE((*tiered)->store()->device_tier(), nullptr);

    std::mt19937_64 rng(c.dim * 31 + c.slots);
    kernels::IdDeduper dedup;
    for (int step = 0; step < 6; ++step) {
      const bool weighted = c.pooling != PoolingType::kNone && step % 2 == 1;
      Request r = RandomRequest(rng, spec.row_offset, rows, 24, weighted);
      ForwardContextEntry ctx_a, ctx_b;
      std::vector<float> out_a(r.ids.size() * c.dim, kPoison), out_b(r.ids.size() * c.dim, kPoison);
      ASSERT_TRUE((*plain)->Forward(r.lengths, r.ids, r.weights, false, &dedup, &ctx_a, out_a.data()).ok());
      Status st = (*tiered)->Forward(r.lengths, r.ids, r.weights, false, &dedup, &ctx_b, out_b.data());
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(ctx_a.out_rows, ctx_b.out_rows);
      out_a.resize(ctx_a.out_rows * c.dim);
      out_b.resize(ctx_b.out_rows * c.dim);
      ExpectNear(out_a, out_b, tol, "forward step " + std::to_string(step));

      std::vector<float> grad_out(out_a.size());
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (float& v : grad_out) v = g(rng);
      std::vector<float> rows_a(ctx_a.unique_ids.size() * c.dim, kPoison);
      std::vector<float> rows_b(ctx_b.unique_ids.size() * c.dim, kPoison);
      ASSERT_TRUE((*plain)->Backward(ctx_a, grad_out.data(), rows_a.data()).ok());
      st = (*tiered)->Backward(ctx_b, grad_out.data(), rows_b.data());
      ASSERT_TRUE(st.ok()) << st;
      ExpectNear(rows_a, rows_b, tol, "backward step " + std::to_string(step));

      ASSERT_TRUE((*plain)->Apply(ctx_a.unique_ids, rows_a.data()).ok());
      st = (*tiered)->Apply(ctx_b.unique_ids, rows_a.data());
      ASSERT_TRUE(st.ok()) << st;
    }
    // Every row, weights and optimizer state.
    std::vector<int64_t> all(rows);
    for (int64_t i = 0; i < rows; ++i) all[i] = spec.row_offset + i;
    ExpectNear(ReadRows((*plain)->store(), all), ReadRows((*tiered)->store(), all), tol, "rows after training");
    if (c.slots < rows) {
      const RowStoreStats stats = (*tiered)->store()->Stats();
      ASSERT_FALSE(stats.tiers.empty());
      EXPECT_EQ(stats.tiers[0].name, "gpu");
      EXPECT_GT(stats.tiers[0].evictions, 0) << "the case was meant to evict";
    }
  }
};

TEST_P(ShardOverTier, HostSlotsComputeWhatHostMemoryComputes) { Compare(Slots::kHost, 0.0f); }

TEST_P(ShardOverTier, CudaSlotsComputeWhatHostMemoryComputes) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << kernels::NoCudaDeviceReason();
  // The GPU sums in another order, and fuses multiply-adds.
  Compare(Slots::kCuda, 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(
    All, ShardOverTier,
    ::testing::Values(ShardCase{"sgd", PoolingType::kSum, 4, 1000}, ShardCase{"sgd", PoolingType::kMean, 64, 200},
                      ShardCase{"adagrad", PoolingType::kSum, 129, 150},
                      ShardCase{"rowwise_adagrad", PoolingType::kNone, 1, 180},
                      ShardCase{"rowwise_adagrad", PoolingType::kMean, 256, 600},
                      ShardCase{"adam", PoolingType::kSum, 64, 170}),
    CaseName);

TEST(GpuTier, ARequestLargerThanTheTierFailsAndChangesNothing) {
  TableConfig table = MakeTable("adagrad", PoolingType::kSum, 8, 1000);
  ShardSpec spec;
  spec.num_rows = 1000;
  spec.num_cols = 8;
  auto shard = EmbeddingShard::Create(spec, table, TierFactory(Slots::kHost, 16));
  ASSERT_TRUE(shard.ok()) << shard.status();
  kernels::IdDeduper dedup;
  std::vector<int64_t> ids(17);
  for (int i = 0; i < 17; ++i) ids[i] = i * 3;
  std::vector<int32_t> lengths = {17};
  ForwardContextEntry ctx;
  std::vector<float> out(8, kPoison);
  Status st = (*shard)->Forward(lengths, ids, {}, false, &dedup, &ctx, out.data());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("--gpu_bytes"), std::string::npos) << st;
  std::vector<float> grads(17 * 8, 1.0f);
  st = (*shard)->Apply(ids, grads.data());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  EXPECT_EQ((*shard)->store()->size(), 0);
  // Sixteen fit.
  lengths = {16};
  ids.resize(16);
  st = (*shard)->Forward(lengths, ids, {}, false, &dedup, &ctx, out.data());
  EXPECT_TRUE(st.ok()) << st;
}

// ---- Failures lose nothing.

// A store or a slot table that fails its writes while `fail` is set: a full
// disk below the tier, a device error in it.
struct Faults {
  bool fail_put = false;
  bool fail_upload = false;
};

class FlakyStore final : public RowStore {
 public:
  FlakyStore(const RowStoreOptions& o, const Faults* faults)
      : RowStore(o), inner_(NewMemoryRowStore(o)), faults_(faults) {}
  Status Read(std::span<const int64_t> ids, const ReadFn& fn) override { return inner_->Read(ids, fn); }
  Status Update(std::span<const int64_t> ids, const UpdateFn& fn) override { return inner_->Update(ids, fn); }
  Status Put(std::span<const int64_t> ids, const float* rows) override {
    if (faults_->fail_put) return Status::Unavailable("injected: disk full");
    return inner_->Put(ids, rows);
  }
  Status ForEach(const std::function<Status(int64_t, const float*)>& fn) override { return inner_->ForEach(fn); }
  int64_t size() const override { return inner_->size(); }
  RowStoreStats Stats() const override { return inner_->Stats(); }

 private:
  std::unique_ptr<RowStore> inner_;
  const Faults* faults_;
};

class FlakySlots final : public SlotTable {
 public:
  FlakySlots(int64_t capacity, int width, const Faults* faults)
      : SlotTable(capacity, width), inner_(NewHostSlotTable(capacity, width)), faults_(faults) {}
  std::string where() const override { return "flaky"; }
  Status Upload(std::span<const int32_t> slots, const float* rows) override {
    if (faults_->fail_upload) return Status::Internal("injected: device fault");
    return inner_->Upload(slots, rows);
  }
  Status Download(std::span<const int32_t> slots, float* rows) override { return inner_->Download(slots, rows); }
  Status Forward(const SlotBags& bags, int dim, float* out) override { return inner_->Forward(bags, dim, out); }
  Status Backward(const SlotBags& bags, int dim, const float* grad_out, int64_t num_rows, float* grad_rows) override {
    return inner_->Backward(bags, dim, grad_out, num_rows, grad_rows);
  }
  Status ApplyOptimizer(const kernels::SparseOptimizerConfig& config, int dim, std::span<const int32_t> slots,
                        const float* grads) override {
    return inner_->ApplyOptimizer(config, dim, slots, grads);
  }

 private:
  std::unique_ptr<SlotTable> inner_;
  const Faults* faults_;
};

TEST(GpuTier, FailedWriteBacksAndUploadsLoseNoUpdate) {
  // Two shards see the same updates: one over plain memory, one over a
  // 32-slot tier whose writes below and uploads fail now and then. Every
  // update that was acknowledged must be in the tier's rows at the end.
  TableConfig table = MakeTable("adagrad", PoolingType::kSum, 8, 400);
  ShardSpec spec;
  spec.num_rows = 400;
  spec.num_cols = 8;
  Faults faults;
  RowStoreFactory flaky = [&faults](const ShardSpec& shard,
                                    const RowStoreOptions& rows) -> StatusOr<std::unique_ptr<RowStore>> {
    TESSERA_ASSIGN_OR_RETURN(auto tier,
                             DeviceRowStore::Create(rows, std::make_unique<FlakySlots>(32, rows.row_width, &faults),
                                                    std::make_unique<FlakyStore>(rows, &faults), shard.row_offset,
                                                    shard.num_rows));
    return std::unique_ptr<RowStore>(std::move(tier));
  };
  auto plain = EmbeddingShard::Create(spec, table);
  auto tiered = EmbeddingShard::Create(spec, table, flaky);
  ASSERT_TRUE(plain.ok() && tiered.ok());
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int64_t> any(0, 399);
  int failed_puts = 0, failed_uploads = 0, applied = 0;
  for (int step = 0; step < 300; ++step) {
    faults.fail_put = step % 7 == 3;
    faults.fail_upload = step % 11 == 5;
    std::vector<int64_t> ids;
    for (int i = 0; i < 12; ++i) {
      const int64_t id = any(rng);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::vector<float> grads(ids.size() * 8);
    for (float& g : grads) g = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    Status st = (*tiered)->Apply(ids, grads.data());
    if (st.ok()) {
      ASSERT_TRUE((*plain)->Apply(ids, grads.data()).ok());
      ++applied;
    } else {
      // A failure says what failed and changes nothing.
      EXPECT_TRUE(st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kInternal) << st;
      (st.code() == StatusCode::kUnavailable ? failed_puts : failed_uploads) += 1;
    }
  }
  EXPECT_GT(failed_puts, 5);
  EXPECT_GT(failed_uploads, 5);
  EXPECT_GT(applied, 200);
  faults = Faults{};
  std::vector<int64_t> all(400);
  for (int64_t i = 0; i < 400; ++i) all[i] = i;
  ExpectNear(ReadRows((*plain)->store(), all), ReadRows((*tiered)->store(), all), 0.0f, "rows after failures");
}

// ---- The CUDA SlotTable against the host one.

class CudaSlotTableTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: " << kernels::NoCudaDeviceReason();
  }
};

TEST_P(CudaSlotTableTest, MatchesTheHostTable) {
  const int dim = GetParam();
  const int64_t capacity = 12000;
  std::mt19937_64 rng(dim);
  for (auto kind : {kernels::SparseOptimizerKind::kSgd, kernels::SparseOptimizerKind::kAdagrad,
                    kernels::SparseOptimizerKind::kRowWiseAdagrad, kernels::SparseOptimizerKind::kAdam}) {
    kernels::SparseOptimizerConfig config;
    config.kind = kind;
    config.lr = 0.03f;
    config.initial_accumulator = 0.1f;
    const int width = dim + static_cast<int>(kernels::SparseOptimizerStateFloats(kind, dim));
    auto host = NewHostSlotTable(capacity, width);
    auto cuda = NewCudaSlotTable(0, capacity, width);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    SCOPED_TRACE("optimizer " + std::to_string(static_cast<int>(kind)) + " dim " + std::to_string(dim));

    // Fill every slot (in a shuffled order), then read them all back.
    std::vector<int32_t> all(capacity);
    for (int64_t i = 0; i < capacity; ++i) all[i] = static_cast<int32_t>(i);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<float> rows(capacity * width);
    std::uniform_real_distribution<float> u(0.01f, 1.0f);  // positive: valid optimizer state
    for (float& v : rows) v = u(rng);
    ASSERT_TRUE(host->Upload(all, rows.data()).ok());
    ASSERT_TRUE((*cuda)->Upload(all, rows.data()).ok());
    std::vector<float> back(rows.size(), kPoison);
    ASSERT_TRUE((*cuda)->Download(all, back.data()).ok());
    ExpectNear(rows, back, 0.0f, "download after upload");

    for (auto pooling : {kernels::Pooling::kSum, kernels::Pooling::kMean, kernels::Pooling::kNone}) {
      // Bags of slots with many duplicates, empty bags, one bag of 10,000.
      Request r = RandomRequest(rng, 0, capacity, 40, pooling != kernels::Pooling::kNone, 10000);
      std::vector<int32_t> index(r.ids.begin(), r.ids.end());
      std::vector<int64_t> offsets = {0};
      for (int32_t len : r.lengths) offsets.push_back(offsets.back() + len);
      SlotBags bags;
      bags.index = index.data();
      bags.num_ids = static_cast<int64_t>(index.size());
      bags.offsets = offsets.data();
      bags.num_bags = static_cast<int64_t>(r.lengths.size());
      bags.weights = r.weights.empty() ? nullptr : r.weights.data();
      bags.pooling = pooling;
      std::vector<float> want(bags.OutRows() * dim, kPoison), got(want.size(), kPoison);
      ASSERT_TRUE(host->Forward(bags, dim, want.data()).ok());
      Status st = (*cuda)->Forward(bags, dim, got.data());
      ASSERT_TRUE(st.ok()) << st;
      ExpectNear(want, got, 1e-5f, "forward");

      // Backward over positions in the distinct slots.
      kernels::IdDeduper dedup;
      std::vector<int64_t> unique;
      std::vector<int32_t> inverse;
      dedup.Run(r.ids, &unique, &inverse);
      bags.index = inverse.data();
      std::vector<float> grad_out(bags.OutRows() * dim);
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (float& v : grad_out) v = g(rng);
      const int64_t u_rows = static_cast<int64_t>(unique.size());
      std::vector<float> gw(u_rows * dim, kPoison), gg(gw.size(), kPoison);
      ASSERT_TRUE(host->Backward(bags, dim, grad_out.data(), u_rows, gw.data()).ok());
      st = (*cuda)->Backward(bags, dim, grad_out.data(), u_rows, gg.data());
      ASSERT_TRUE(st.ok()) << st;
      ExpectNear(gw, gg, 1e-4f, "backward");

      // The optimizer on the distinct slots, then every slot compared.
      std::vector<int32_t> slots(unique.begin(), unique.end());
      ASSERT_TRUE(host->ApplyOptimizer(config, dim, slots, gw.data()).ok());
      st = (*cuda)->ApplyOptimizer(config, dim, slots, gw.data());
      ASSERT_TRUE(st.ok()) << st;
      std::vector<float> hw(rows.size(), kPoison), cw(rows.size(), kPoison);
      ASSERT_TRUE(host->Download(all, hw.data()).ok());
      ASSERT_TRUE((*cuda)->Download(all, cw.data()).ok());
      ExpectNear(hw, cw, 1e-5f, "rows after the optimizer");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, CudaSlotTableTest, ::testing::Values(1, 4, 64, 129, 256));

TEST(CudaSlotTable, WithoutAGpuItIsUnavailable) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present";
  auto t = NewCudaSlotTable(0, 16, 4);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable) << t.status();
}

// ---- Sizing from the flags.

TEST(GpuTierSlots, ShareOfTheBytesAtLeastAFloorAtMostTheRows) {
  // 1 GiB, a quarter of it, rows of 32 floats (128 bytes): 2 Mi rows.
  EXPECT_EQ(GpuTierSlots(int64_t{1} << 30, 0.25, 32, int64_t{1} << 30, 16384), int64_t{1} << 21);
  EXPECT_EQ(GpuTierSlots(int64_t{1} << 30, 0.25, 32, 1000, 16384), 1000);
  EXPECT_EQ(GpuTierSlots(1024, 0.01, 32, int64_t{1} << 30, 16384), 16384);
  EXPECT_EQ(GpuTierSlots(1024, 0.01, 32, 50, 16384), 50);
  EXPECT_EQ(GpuTierSlots(1024, 0.01, 32, 50, 0), 1);
}

// The store MakeRowStoreFactory(o) builds for a shard of `num_rows` rows of
// 16 floats, each row's floats its id.
StatusOr<std::unique_ptr<RowStore>> StoreOfAShard(const ShardStorageOptions& o, int64_t num_rows) {
  ShardSpec shard;
  shard.num_rows = num_rows;
  shard.num_cols = 16;
  RowStoreOptions rows;
  rows.row_width = 16;
  rows.gather_cols = 16;
  rows.init = [](int64_t id, float* row) { std::fill(row, row + 16, static_cast<float>(id)); };
  return MakeRowStoreFactory(o)(shard, rows);
}

bool BuildsAGpuTier(const ShardStorageOptions& o) {
  auto store = StoreOfAShard(o, 1000);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() && (*store)->device_tier() != nullptr;
}

TEST(ConfigureGpuTier, FromTheServersFlags) {
  ShardStorageOptions o;
  EXPECT_TRUE(ConfigureGpuTier("cpu", -1, 0, false, &o).ok());
  EXPECT_EQ(o.gpu_device, -1);
  EXPECT_FALSE(o.gpu_tier_on_host);
  EXPECT_FALSE(BuildsAGpuTier(o));

  Status st = ConfigureGpuTier("cpu", -1, 1 << 20, false, &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(ConfigureGpuTier("auto", -1, 1 << 20, false, &o).ok());  // fell back: ignored
  EXPECT_EQ(o.gpu_device, -1);
  EXPECT_EQ(ConfigureGpuTier("cuda:0", 0, -5, false, &o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ConfigureGpuTier("cpu", -1, 0, true, &o).code(), StatusCode::kInvalidArgument);

  ShardStorageOptions on_host;
  ASSERT_TRUE(ConfigureGpuTier("cpu", -1, 1 << 20, true, &on_host).ok());
  EXPECT_TRUE(on_host.gpu_tier_on_host);
  EXPECT_EQ(on_host.gpu_bytes, 1 << 20);
  EXPECT_TRUE(BuildsAGpuTier(on_host));

  ShardStorageOptions gpu;
  st = ConfigureGpuTier("cuda:0", 0, 0, false, &gpu);
  if (HaveGpu()) {
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(gpu.gpu_device, 0);
    EXPECT_GT(gpu.gpu_bytes, 0);
  } else {
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  }
}

TEST(GpuTierFactory, WrapsTheHostStoreOfEachShard) {
  ShardStorageOptions o;
  ASSERT_TRUE(ConfigureGpuTier("cpu", -1, 64 << 10, true, &o).ok());
  auto store = StoreOfAShard(o, 100000);
  ASSERT_TRUE(store.ok()) << store.status();
  DeviceRowStore* tier = (*store)->device_tier();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->table().where(), "host");
  // 64 KiB of 64-byte rows is 1024; the floor raises it.
  EXPECT_EQ(tier->table().capacity(), o.gpu_min_slots);
  EXPECT_FALSE(tier->dense_index());
  std::vector<float> out(16);
  ASSERT_TRUE((*store)->Gather(std::vector<int64_t>{4242}, out.data()).ok());
  EXPECT_EQ(out[15], 4242.0f);
}

}  // namespace
}  // namespace tessera
