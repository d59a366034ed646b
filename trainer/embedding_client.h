// EmbeddingClient: the trainer's side of the sparse forward and the gradient
// return path (DESIGN.md §4 steps 2, 3 and 5).
//
// Lookup() splits a KeyedJaggedTensor by the plan — ids of a row-split table
// go to the shard holding their row, column shards all get the same ids —
// sends one request per parameter server (all in flight at once; a server
// with nothing to do still gets an empty one, which sync mode's step barrier
// counts on) and assembles each feature's output: row partials summed,
// column slices placed side by side. PushGradients() sends the gradient of
// each feature's output back under the same (trainer, step) context.
//
// Not thread-safe: one step at a time, from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/job_config.h"
#include "common/keyed_jagged_tensor.h"
#include "common/messages.h"
#include "common/rpc_client.h"
#include "common/sharding_plan.h"
#include "common/status.h"
#include "kernels/dedup.h"
#include "kernels/embedding_bag.h"

namespace tessera {

// Where requests go: the plan and, by its rank, each server's RpcClient peer.
struct EmbeddingRoute {
  ShardingPlan plan;
  std::vector<int> ps_peers;
};

struct EmbeddingClientOptions {
  uint32_t trainer = 0;
  std::chrono::milliseconds timeout{120000};
  // With backups in the plan (cluster.replicas): when a request fails as a
  // lost server's would (cancelled, PLAN_CHANGED, unavailable, no reply),
  // asks for the plan that replaced it — the backups serving — and sends the
  // step's lookup or push again under it (lookups are idempotent, a push
  // already applied is ALREADY_APPLIED). An error ends the step as before.
  std::function<StatusOr<EmbeddingRoute>(const Status& why)> reroute;
  // Whether the plan was replaced meanwhile: asked before sending, so that
  // nothing goes to a server the plan no longer has.
  std::function<bool()> plan_replaced;
  // How pooled features' rows come back (training.row_replies).
  RowReplies row_replies = RowReplies::kAuto;
  // training.plan_independent_pooling: a pooled feature split by rows comes
  // back as rows and is pooled here over whole bags.
  bool plan_independent_pooling = false;
  // training.qcomms: lookups' rows come back (forward) and gradients go out
  // (backward) as bfloat16, half the bytes, rounded once where they are sent.
  bool forward_bf16 = false;
  bool backward_bf16 = false;
};

// Per feature in model order: pooled [B x dim] or unpooled [num_ids x dim].
using FeatureOutputs = std::vector<std::vector<float>>;
// The same shapes, in the caller's memory (a Python trainer's gradients
// are read where torch left them).
using FeatureGrads = std::vector<std::span<const float>>;
inline FeatureGrads ViewsOf(const FeatureOutputs& outputs) { return FeatureGrads(outputs.begin(), outputs.end()); }

class EmbeddingClient {
 public:
  // ps_peers[p] is the RpcClient peer of parameter server p.
  EmbeddingClient(const EmbeddingClientOptions& options, const JobConfig& job, const ShardingPlan& plan,
                  RpcClient* client, std::vector<int> ps_peers);

  // Every feature of the job, in model order (tables in order, then their
  // features); FeatureOutputs are indexed the same way.
  const std::vector<std::string>& features() const { return features_; }

  // Looks up every feature of `kjt` held by parameter servers for `step`
  // (data-parallel features are left alone: trainer/data_parallel_tables.h
  // fills them). inference: no backward context is opened (evaluation).
  Status Lookup(uint64_t step, const KeyedJaggedTensor& kjt, bool inference, FeatureOutputs* out) {
    // FinishLookup answers the oldest lookup in flight, which would be that one.
    if (!pending_.empty()) return Status::FailedPrecondition("a lookup is in flight (prefetched): finish it first");
    TESSERA_RETURN_IF_ERROR(StartLookup(step, kjt, inference));
    return FinishLookup(out);
  }
  // The same in two halves, so that the next step's lookup can travel while
  // this step computes: StartLookup sends the requests (at most two lookups
  // in flight), FinishLookup waits for the oldest one and assembles it; its
  // step is the one the next StartPush answers.
  Status StartLookup(uint64_t step, const KeyedJaggedTensor& kjt, bool inference);
  Status FinishLookup(FeatureOutputs* out);

  // Sends d(loss)/d(output) of every feature for the step of the last
  // finished training lookup (evaluations leave it) without waiting; WaitPush() waits until every server accepted
  // it. The trainer overlaps the dense allreduce with the push this way.
  Status StartPush(const FeatureGrads& grads);
  Status StartPush(const FeatureOutputs& grads) { return StartPush(ViewsOf(grads)); }
  Status WaitPush();
  Status PushGradients(const FeatureOutputs& grads) {
    TESSERA_RETURN_IF_ERROR(StartPush(grads));
    return WaitPush();
  }

  // Takes the plan that replaced the running one (options.reroute); every
  // later request follows it.
  Status Reroute(const Status& why);

  // Bytes the last Lookup() moved: sent (entries, lengths, ids, weights) and
  // received (pooled or unpooled rows), over all servers.
  int64_t last_lookup_bytes() const { return last_lookup_bytes_; }
  // Bytes of an id in a lookup request: 4 when every table has at most 2^32
  // rows (kLookupIds32), else 8.
  int64_t id_bytes() const { return id_bytes_; }
  int64_t last_reply_bytes() const { return last_reply_bytes_; }
  // Bytes the last push sent (entries and gradients), over all servers.
  int64_t last_push_bytes() const { return last_push_bytes_; }

 private:
  struct FeatureRoute {
    int table = 0;
    int dim = 0;
    bool pooled = true;
    bool mean = false;
    bool row_split = false;
    bool local = false;  // data_parallel: on the trainers, not routed
    std::vector<const ShardSpec*> shards;  // by row range, then column range
  };
  // One request entry: which feature, which shard, and where each row of
  // the reply goes in the feature's output: positions[row] is a bag (pooled:
  // replies skip empty bags) or an id's position (unpooled, row-split);
  // empty positions mean row i goes to row i.
  // A rows entry (kEntryRows): the server sends the distinct ids' rows and
  // this side pools them into the entry's bags, as the server would have.
  struct RowsEntry {
    int64_t unique = 0;
    std::vector<int32_t> inverse;  // [ids] into the distinct ids
    std::vector<int64_t> offsets;  // [bags + 1], the non-empty bags only
    std::vector<float> weights;    // [ids] or empty
    kernels::Pooling pooling = kernels::Pooling::kSum;
    // The server's forward over the reply's rows [unique x cols]:
    // out [bags x cols].
    void Pool(const float* rows, int cols, int64_t bags, float* out) const;
    // The server's backward: grad_out [bags x cols] -> grad_rows [unique x cols].
    void Unpool(const float* grad_out, int cols, int64_t bags, float* grad_rows) const;
  };
  struct EntryRoute {
    int feature = 0;
    const ShardSpec* shard = nullptr;
    int64_t out_rows = 0;
    std::vector<int64_t> positions;
    // To the shard's backup: no values come back; its push is the same.
    bool backup = false;
    std::shared_ptr<const RowsEntry> rows;  // null: the server pools
    // >= 0: this shard's rows are pooled with the other shards' over whole
    // bags (WholeBags); the index of its rows there.
    int whole_bags_shard = -1;
    // Rows in the reply and in the push.
    int64_t wire_rows() const { return rows ? rows->unique : out_rows; }
  };
  // A pooled feature of a table split by rows, under
  // plan_independent_pooling: its bags, pooled here once every shard's rows
  // have come, each over all its ids in order, as one server holding the
  // whole table would pool it.
  struct WholeBags {
    std::vector<int64_t> offsets;          // [B + 1], every bag
    std::vector<float> weights;            // [ids] or empty
    kernels::Pooling pooling = kernels::Pooling::kSum;
    std::vector<int32_t> shard;            // [ids]: which of the feature's shards holds the id's row
    std::vector<int32_t> row;              // [ids]: the row's place in that shard's reply
    std::vector<std::vector<float>> rows;  // per shard: its reply's rows, as they come
  };
  // Pools `wb`'s bags [bags x dim] into *out (added to it).
  void PoolWholeBags(const WholeBags& wb, int dim, int64_t bags, std::vector<float>* out);
  struct ServerRequest {
    std::vector<LookupEntry> entries;
    std::vector<int32_t> lengths;
    std::vector<int64_t> ids;
    std::vector<float> weights;
    std::vector<EntryRoute> routes;
  };

  void RouteFeature(int f, const KeyedJaggedTensor& kjt, int key, const std::vector<int64_t>& value_offsets,
                    std::vector<ServerRequest>* requests);
  // Adds one entry for `shard` to its server's request, and the same entry,
  // context only, to its backup's.
  static void AddEntry(const ShardSpec* shard, LookupEntry entry, std::span<const int32_t> lengths,
                       std::span<const int64_t> ids, std::span<const float> weights, EntryRoute route,
                       std::vector<ServerRequest>* requests);
  // The same for a pooled entry of `ids` in bags of `lengths` (B bags,
  // out_rows non-empty): as distinct rows when options_.row_replies says so.
  void AddPooledEntry(const ShardSpec* shard, uint32_t flags, kernels::Pooling pooling,
                      std::span<const int32_t> lengths, std::span<const int64_t> ids, std::span<const float> weights,
                      EntryRoute route, std::vector<ServerRequest>* requests);

  struct LookupState;
  void BuildRoutes();
  // Routes every feature of `kjt` under the running plan: the request for
  // each server, and each feature's output rows.
  Status RouteBatch(const KeyedJaggedTensor& kjt, std::vector<ServerRequest>* requests,
                    std::vector<int64_t>* out_rows);
  // Routes `kjt` under the running plan and sends its lookup.
  Status SendLookup(const KeyedJaggedTensor& kjt, LookupState* st);
  // Sends the push of `grads` for the finished lookup current_.
  void SendPush(const FeatureGrads& grads);
  // Routes current_'s batch again under the running plan, for its push.
  Status RouteCurrentAgain();
  static bool Retryable(const Status& st);

  EmbeddingClientOptions options_;
  JobConfig job_;
  // Bytes of an id on the wire: 4 (kLookupIds32) when every table has at
  // most 2^32 rows, else 8.
  int64_t id_bytes_ = 8;
  ShardingPlan plan_;
  RpcClient* client_;
  std::vector<int> ps_peers_;
  std::vector<std::string> features_;
  std::vector<FeatureRoute> routes_;

  // A lookup from StartLookup() on, then (once finished) what StartPush() needs.
  struct LookupState {
    uint64_t step = 0;
    bool inference = false;
    uint64_t epoch = 0;      // the plan it was sent under
    KeyedJaggedTensor kjt;   // kept to send again on a new plan (with reroute)
    int64_t batch = 0;
    std::vector<int64_t> out_rows;                   // per feature
    std::vector<std::vector<EntryRoute>> routes;     // per server
    std::vector<std::vector<int32_t>> bag_lengths;  // per feature, for MEAN over row shards
    std::vector<std::shared_ptr<WholeBags>> whole_bags;  // per feature; null but where pooled whole
    std::vector<size_t> expected;                    // reply floats per server
    std::vector<RpcFuture> futures;                  // per server, while in flight
    int64_t bytes_sent = 0;
    int64_t bytes_received = 0;
  };
  std::deque<LookupState> pending_;  // started, not finished; oldest first
  LookupState current_;              // the last finished training lookup
  std::vector<std::vector<int32_t>> bag_lengths_;  // per feature, filled by RouteFeature
  std::vector<std::shared_ptr<WholeBags>> whole_bags_;  // per feature, filled by RouteFeature
  kernels::IdDeduper deduper_;
  std::vector<int64_t> unique_scratch_;
  std::vector<int32_t> inverse_scratch_;
  std::vector<float> pool_scratch_;
  std::vector<const float*> whole_ptrs_;
  std::vector<int32_t> whole_index_;
  int64_t last_lookup_bytes_ = 0;
  int64_t last_reply_bytes_ = 0;
  int64_t last_push_bytes_ = 0;
  std::vector<RpcFuture> pushes_;  // in flight, one per server
  FeatureOutputs pushed_;          // what they carry, to send again on a new plan (with reroute)
  uint64_t epoch_ = 0;             // plans taken so far
};

}  // namespace tessera
