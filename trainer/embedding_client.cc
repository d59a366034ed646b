#include "trainer/embedding_client.h"

#include <algorithm>
#include <cstring>

#include <glog/logging.h>

#include "kernels/embedding_bag_math.h"

namespace tessera {
namespace {

// Bytes of one value on the wire: float32, or bfloat16 under qcomms.
int64_t ValueBytes(bool bf16) { return bf16 ? 2 : 4; }

}  // namespace

EmbeddingClient::EmbeddingClient(const EmbeddingClientOptions& options, const JobConfig& job, const ShardingPlan& plan,
                                 RpcClient* client, std::vector<int> ps_peers)
    : options_(options), job_(job), plan_(plan), client_(client), ps_peers_(std::move(ps_peers)) {
  const bool fit = std::all_of(job_.tables.begin(), job_.tables.end(),
                               [](const TableConfig& t) { return t.num_embeddings <= int64_t{1} << 32; });
  id_bytes_ = fit ? 4 : 8;
  BuildRoutes();
}

void EmbeddingClient::BuildRoutes() {
  features_.clear();
  routes_.clear();
  for (const TablePlan& tp : plan_.tables) {
    const TableConfig& table = job_.tables[tp.table];
    FeatureRoute r;
    r.table = tp.table;
    r.dim = table.embedding_dim;
    r.pooled = table.pooling != PoolingType::kNone;
    r.mean = table.pooling == PoolingType::kMean;
    r.local = tp.type == ShardingType::kDataParallel;
    for (uint32_t id : tp.shards) r.shards.push_back(&plan_.shards[id]);
    std::stable_sort(r.shards.begin(), r.shards.end(), [](const ShardSpec* a, const ShardSpec* b) {
      return a->row_offset != b->row_offset ? a->row_offset < b->row_offset : a->col_offset < b->col_offset;
    });
    r.row_split = r.shards.size() > 1 && r.shards[1]->row_offset != 0;
    for (const std::string& f : table.feature_names) {
      features_.push_back(f);
      routes_.push_back(r);
    }
  }
  bag_lengths_.resize(features_.size());
  whole_bags_.resize(features_.size());
}

void EmbeddingClient::RouteFeature(int f, const KeyedJaggedTensor& kjt, int key,
                                   const std::vector<int64_t>& value_offsets, std::vector<ServerRequest>* requests) {
  const FeatureRoute& fr = routes_[f];
  whole_bags_[f] = nullptr;
  const int64_t B = kjt.batch_size;
  auto lens = kjt.FeatureLengths(key);
  const int64_t begin = value_offsets[key], n = value_offsets[key + 1] - begin;
  const int64_t* ids = kjt.values.data() + begin;
  const float* weights = kjt.weighted() ? kjt.weights.data() + begin : nullptr;
  uint32_t flags = weights ? kEntryWeighted : 0;

  if (!fr.row_split) {
    // Every shard (one, or one per column slice) gets all of the feature's
    // ids; a pooled reply has a row per non-empty bag.
    std::vector<int64_t> bags;
    int64_t out_rows = fr.pooled ? B : n;
    if (fr.pooled && std::find(lens.begin(), lens.end(), 0) != lens.end()) {
      for (int64_t b = 0; b < B; ++b) {
        if (lens[b] > 0) bags.push_back(b);
      }
      out_rows = static_cast<int64_t>(bags.size());
    }
    const std::span<const int32_t> lengths(lens.data(), lens.size());
    const std::span<const float> w = weights ? std::span<const float>(weights, n) : std::span<const float>();
    for (const ShardSpec* s : fr.shards) {
      if (fr.pooled) {
        AddPooledEntry(s, flags, fr.mean ? kernels::Pooling::kMean : kernels::Pooling::kSum, lengths,
                       std::span<const int64_t>(ids, n), w, EntryRoute{f, s, out_rows, bags}, requests);
      } else {
        AddEntry(s, LookupEntry{s->shard_id, static_cast<uint32_t>(B), static_cast<uint32_t>(n), flags}, lengths,
                 std::span<const int64_t>(ids, n), w, EntryRoute{f, s, out_rows, bags}, requests);
      }
    }
    return;
  }

  // Row-split: each id goes to the shard holding its row. A MEAN table's
  // shards pool by SUM; the mean is taken here, over the whole bag.
  // Pooled whole (plan_independent_pooling), the shards send rows instead.
  const size_t k = fr.shards.size();
  const bool whole = fr.pooled && options_.plan_independent_pooling;
  std::shared_ptr<WholeBags> wb;
  // Per id, the backward's factor: needed where it is not 1 (MEAN, weights).
  const bool scaled = whole && (fr.mean || weights != nullptr);
  std::vector<std::vector<float>> grad_scales(scaled ? k : 0);
  if (whole) {
    wb = std::make_shared<WholeBags>();
    wb->offsets.resize(B + 1, 0);
    for (int64_t b = 0; b < B; ++b) wb->offsets[b + 1] = wb->offsets[b] + lens[b];
    if (weights) wb->weights.assign(weights, weights + n);
    wb->pooling = fr.mean ? kernels::Pooling::kMean : kernels::Pooling::kSum;
    wb->shard.resize(n);
    wb->row.resize(n);
    wb->rows.resize(k);
  } else if (fr.mean) {
    flags |= kEntrySumPartial;
    bag_lengths_[f].assign(lens.begin(), lens.end());
  }
  whole_bags_[f] = wb;
  std::vector<std::vector<int32_t>> shard_lens(k, std::vector<int32_t>(B, 0));
  std::vector<std::vector<int64_t>> shard_ids(k), positions(k);
  std::vector<std::vector<float>> shard_weights(k);
  int64_t i = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int32_t j = 0; j < lens[b]; ++j, ++i) {
      // The last shard whose first row is <= id; out-of-range ids go to an
      // edge shard, whose server rejects them with a clear error.
      size_t s = 0;
      while (s + 1 < k && fr.shards[s + 1]->row_offset <= ids[i]) ++s;
      if (whole) {
        wb->shard[i] = static_cast<int32_t>(s);
        wb->row[i] = static_cast<int32_t>(shard_ids[s].size());  // its occurrence, until the dedup below
      }
      if (scaled) {
        // The backward's factor for this id, as one server's kernel over
        // the whole bag computes it (the mean over the whole bag).
        grad_scales[s].push_back(kernels::EmbeddingBagGradScale(kernels::BagScale(wb->pooling, lens[b]),
                                                                weights ? weights[i] : 1.0f));
      }
      // Where the reply's row for this id goes: its bag (pooled, once per
      // bag) or its own position (unpooled).
      if (!fr.pooled) {
        positions[s].push_back(i);
      } else if (shard_lens[s][b] == 0) {
        positions[s].push_back(b);
      }
      shard_lens[s][b]++;
      shard_ids[s].push_back(ids[i]);
      if (weights) shard_weights[s].push_back(weights[i]);
    }
  }
  std::vector<std::shared_ptr<RowsEntry>> shard_rows(whole ? k : 0);
  for (size_t s = 0; s < k; ++s) {
    const ShardSpec* spec = fr.shards[s];
    const int64_t m = static_cast<int64_t>(shard_ids[s].size());
    const int64_t out_rows = static_cast<int64_t>(positions[s].size());
    EntryRoute route{f, spec, out_rows, std::move(positions[s])};
    if (whole) {
      // Each distinct row once; the push turns the bags' gradients into
      // its rows' with the whole bags' factors (a SUM over the shard's ids).
      deduper_.RunAtMost(shard_ids[s], shard_ids[s].size(), &unique_scratch_, &inverse_scratch_);
      auto rows = std::make_shared<RowsEntry>();
      rows->unique = static_cast<int64_t>(unique_scratch_.size());
      rows->inverse = inverse_scratch_;
      rows->offsets.reserve(out_rows + 1);
      rows->offsets.push_back(0);
      for (int32_t len : shard_lens[s]) {
        if (len > 0) rows->offsets.push_back(rows->offsets.back() + len);
      }
      if (scaled) rows->weights = std::move(grad_scales[s]);
      shard_rows[s] = rows;
      route.rows = std::move(rows);
      route.whole_bags_shard = static_cast<int>(s);
      AddEntry(spec, LookupEntry{spec->shard_id, 0, static_cast<uint32_t>(unique_scratch_.size()), kEntryRows}, {},
               unique_scratch_, {}, std::move(route), requests);
    } else if (fr.pooled) {
      // Partial sums (a MEAN table too: the mean is taken here, over the
      // whole bag).
      AddPooledEntry(spec, flags, kernels::Pooling::kSum, shard_lens[s], shard_ids[s], shard_weights[s],
                     std::move(route), requests);
    } else {
      AddEntry(spec, LookupEntry{spec->shard_id, static_cast<uint32_t>(B), static_cast<uint32_t>(m), flags},
               shard_lens[s], shard_ids[s], shard_weights[s], std::move(route), requests);
    }
  }
  if (whole) {
    for (int64_t id = 0; id < n; ++id) wb->row[id] = shard_rows[wb->shard[id]]->inverse[wb->row[id]];
  }
}

void EmbeddingClient::AddEntry(const ShardSpec* shard, LookupEntry entry, std::span<const int32_t> lengths,
                               std::span<const int64_t> ids, std::span<const float> weights, EntryRoute route,
                               std::vector<ServerRequest>* requests) {
  auto add = [&](int server, const LookupEntry& e, EntryRoute r) {
    ServerRequest& req = (*requests)[server];
    req.entries.push_back(e);
    req.lengths.insert(req.lengths.end(), lengths.begin(), lengths.end());
    req.ids.insert(req.ids.end(), ids.begin(), ids.end());
    req.weights.insert(req.weights.end(), weights.begin(), weights.end());
    req.routes.push_back(std::move(r));
  };
  if (shard->backup_ps >= 0) {
    EntryRoute copy = route;
    copy.backup = true;
    LookupEntry e = entry;
    e.flags |= kEntryContextOnly;
    add(shard->backup_ps, e, std::move(copy));
  }
  add(shard->ps, entry, std::move(route));
}

void EmbeddingClient::AddPooledEntry(const ShardSpec* shard, uint32_t flags, kernels::Pooling pooling,
                                     std::span<const int32_t> lengths, std::span<const int64_t> ids,
                                     std::span<const float> weights, EntryRoute route,
                                     std::vector<ServerRequest>* requests) {
  const int64_t n = static_cast<int64_t>(ids.size()), bags = static_cast<int64_t>(lengths.size());
  // Bytes on the wire either way: the request's ids (with lengths and
  // weights), and a row each way (reply and push) per pooled bag or per
  // distinct id.
  // (qcomms' bfloat16 halves a row in its direction: the ids weigh more.)
  const int64_t row_bytes =
      (ValueBytes(options_.forward_bf16) + ValueBytes(options_.backward_bf16)) * static_cast<int64_t>(shard->num_cols);
  const int64_t pooled_bytes =
      n * id_bytes_ + bags * 4 + (weights.empty() ? 0 : n * 4) + route.out_rows * row_bytes;
  size_t max_unique = 0;
  switch (options_.row_replies) {
    case RowReplies::kNever:
      break;
    case RowReplies::kAlways:
      max_unique = ids.size();
      break;
    case RowReplies::kAuto:
      max_unique = pooled_bytes > 0 ? static_cast<size_t>((pooled_bytes - 1) / (id_bytes_ + row_bytes)) : 0;
      break;
  }
  if (options_.row_replies == RowReplies::kNever ||
      !deduper_.RunAtMost(ids, max_unique, &unique_scratch_, &inverse_scratch_)) {
    AddEntry(shard, LookupEntry{shard->shard_id, static_cast<uint32_t>(bags), static_cast<uint32_t>(n), flags},
             lengths, ids, weights, std::move(route), requests);
    return;
  }
  auto rows = std::make_shared<RowsEntry>();
  rows->unique = static_cast<int64_t>(unique_scratch_.size());
  rows->inverse = inverse_scratch_;
  // The bags the server would pool: the non-empty ones, in order.
  rows->offsets.reserve(route.out_rows + 1);
  rows->offsets.push_back(0);
  for (int32_t len : lengths) {
    if (len > 0) rows->offsets.push_back(rows->offsets.back() + len);
  }
  rows->weights.assign(weights.begin(), weights.end());
  rows->pooling = pooling;
  route.rows = std::move(rows);
  AddEntry(shard, LookupEntry{shard->shard_id, 0, static_cast<uint32_t>(unique_scratch_.size()), kEntryRows}, {},
           unique_scratch_, {}, std::move(route), requests);
}

void EmbeddingClient::RowsEntry::Pool(const float* rows, int cols, int64_t bags, float* out) const {
  kernels::EmbeddingBagForwardArgs<int32_t> args;
  args.rows = rows;
  args.num_rows = unique;
  args.row_stride = cols;
  args.dim = cols;
  args.indices = inverse.data();
  args.offsets = offsets.data();
  args.num_bags = bags;
  args.weights = weights.empty() ? nullptr : weights.data();
  args.pooling = pooling;
  args.out = out;
  kernels::EmbeddingBagForwardCpu(args);
}

void EmbeddingClient::PoolWholeBags(const WholeBags& wb, int dim, int64_t bags, std::vector<float>* out) {
  const size_t n = wb.shard.size();
  whole_ptrs_.resize(n);
  whole_index_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    whole_ptrs_[i] = wb.rows[wb.shard[i]].data() + static_cast<int64_t>(wb.row[i]) * dim;
    whole_index_[i] = static_cast<int32_t>(i);
  }
  kernels::EmbeddingBagForwardArgs<int32_t> args;
  args.row_ptrs = whole_ptrs_.data();
  args.num_rows = static_cast<int64_t>(n);
  args.dim = dim;
  args.indices = whole_index_.data();
  args.offsets = wb.offsets.data();
  args.num_bags = bags;
  args.weights = wb.weights.empty() ? nullptr : wb.weights.data();
  args.pooling = wb.pooling;
  pool_scratch_.resize(static_cast<size_t>(bags) * dim);
  args.out = pool_scratch_.data();
  kernels::EmbeddingBagForwardCpu(args);
  // Added to the zeros the output starts as, as every other reply is.
  for (size_t e = 0; e < pool_scratch_.size(); ++e) (*out)[e] += pool_scratch_[e];
}

void EmbeddingClient::RowsEntry::Unpool(const float* grad_out, int cols, int64_t bags, float* grad_rows) const {
  kernels::EmbeddingBagBackwardArgs<int32_t> args;
  args.grad_out = grad_out;
  args.dim = cols;
  args.indices = inverse.data();
  args.offsets = offsets.data();
  args.num_bags = bags;
  args.weights = weights.empty() ? nullptr : weights.data();
  args.pooling = pooling;
  args.num_rows = unique;
  args.grad_rows = grad_rows;
  kernels::EmbeddingBagBackwardCpu(args);
}

Status EmbeddingClient::StartLookup(uint64_t step, const KeyedJaggedTensor& kjt, bool inference) {
  TESSERA_RETURN_IF_ERROR(kjt.Validate());
  if (pending_.size() >= 2) return Status::FailedPrecondition("more than two lookups in flight");
  if (options_.plan_replaced && options_.plan_replaced()) {
    TESSERA_RETURN_IF_ERROR(Reroute(Status::Cancelled("the plan was replaced")));
  }
  LookupState st;
  st.step = step;
  st.inference = inference;
  if (options_.reroute) st.kjt = kjt;
  TESSERA_RETURN_IF_ERROR(SendLookup(kjt, &st));
  pending_.push_back(std::move(st));
  return Status::OK();
}

Status EmbeddingClient::SendLookup(const KeyedJaggedTensor& kjt, LookupState* out) {
  LookupState& st = *out;
  std::vector<ServerRequest> requests;
  TESSERA_RETURN_IF_ERROR(RouteBatch(kjt, &requests, &st.out_rows));
  st.epoch = epoch_;
  st.batch = kjt.batch_size;
  st.futures.clear();
  st.bytes_sent = st.bytes_received = 0;
  st.bag_lengths = bag_lengths_;
  st.whole_bags = whole_bags_;
  st.routes.assign(ps_peers_.size(), {});
  st.expected.assign(ps_peers_.size(), 0);
  for (size_t p = 0; p < requests.size(); ++p) {
    ServerRequest& req = requests[p];
    for (const EntryRoute& r : req.routes) {
      if (!r.backup) st.expected[p] += r.wire_rows() * r.shard->num_cols;
    }
    // Ids outside [0, 2^32) (a caller's bad input) go as int64, for the
    // server to refuse with its error.
    const bool ids32 = id_bytes_ == 4 && std::all_of(req.ids.begin(), req.ids.end(), [](int64_t id) {
                         return id >= 0 && id <= int64_t{UINT32_MAX};
                       });
    st.bytes_sent += req.entries.size() * sizeof(LookupEntry) + req.ids.size() * (ids32 ? 4 : 8) +
                     req.lengths.size() * 4 + req.weights.size() * 4;
    st.bytes_received += static_cast<int64_t>(st.expected[p] * ValueBytes(options_.forward_bf16));
    st.routes[p] = std::move(req.routes);
    // A training lookup sees this trainer's own pushes before it in async
    // mode too: a prefetched one waits at the server for the push of the
    // step computing now.
    LookupMeta meta{options_.trainer,
                    (st.inference ? kLookupNoContext : kLookupAfterOwnPush) | (ids32 ? kLookupIds32 : 0u) |
                        (options_.forward_bf16 ? kLookupBf16Values : 0u),
                    st.step};
    Message m = EncodeLookupRequest(meta, std::move(req.entries), std::move(req.lengths), std::move(req.ids),
                                    std::move(req.weights));
    m.header.plan_version = plan_.version;
    st.futures.push_back(client_->Call(ps_peers_[p], std::move(m), options_.timeout));
  }
  return Status::OK();
}

bool EmbeddingClient::Retryable(const Status& st) {
  switch (st.code()) {
    case StatusCode::kCancelled:
    case StatusCode::kPlanChanged:
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return true;
    default:
      return false;
  }
}

Status EmbeddingClient::Reroute(const Status& why) {
  if (!options_.reroute) return why;
  TESSERA_ASSIGN_OR_RETURN(EmbeddingRoute route, options_.reroute(why));
  if (route.ps_peers.size() != static_cast<size_t>(route.plan.num_ps)) {
    return Status::Internal("a new plan of " + std::to_string(route.plan.num_ps) + " servers came with " +
                            std::to_string(route.ps_peers.size()) + " addresses");
  }
  plan_ = std::move(route.plan);
  ps_peers_ = std::move(route.ps_peers);
  BuildRoutes();
  ++epoch_;
  LOG(WARNING) << "trainer " << options_.trainer << ": requests follow plan version " << plan_.version << " ("
               << why.message() << ")";
  return Status::OK();
}

Status EmbeddingClient::FinishLookup(FeatureOutputs* out) {
  if (pending_.empty()) return Status::FailedPrecondition("no lookup in flight");
  LookupState st = std::move(pending_.front());
  pending_.pop_front();
  const int F = static_cast<int>(features_.size());
  // A lost server's backups may take over meanwhile: then the lookup goes
  // again, whole, under their plan (a few times at most).
  for (int attempt = 0;; ++attempt) {
    if (st.epoch != epoch_) TESSERA_RETURN_IF_ERROR(SendLookup(st.kjt, &st));
    out->resize(F);
    for (int f = 0; f < F; ++f) {
      if (!routes_[f].local) (*out)[f].assign(st.out_rows[f] * routes_[f].dim, 0.0f);
    }
    Status first_error;
    for (size_t p = 0; p < st.futures.size(); ++p) {
      auto reply = st.futures[p].Wait();
      ArrayFrame<float> values;
      Status status =
          reply.ok() ? DecodeLookupResponse(*reply, st.expected[p], &values, options_.forward_bf16) : reply.status();
      if (!status.ok()) {
        if (first_error.ok()) first_error = status.WithContext("lookup on parameter server " + std::to_string(p));
        continue;
      }
      const float* v = values.data();
      for (const EntryRoute& r : st.routes[p]) {
        if (r.backup) continue;  // no values: a backup's copy
        const int cols = r.shard->num_cols, dim = routes_[r.feature].dim, off = r.shard->col_offset;
        if (r.whole_bags_shard >= 0) {
          // Kept until every shard's rows are in: the bags are pooled whole below.
          st.whole_bags[r.feature]->rows[r.whole_bags_shard].assign(v, v + r.wire_rows() * cols);
          v += r.wire_rows() * cols;
          continue;
        }
        float* dst = (*out)[r.feature].data();
        const bool scatter = !r.positions.empty();
        const float* pooled = v;
        if (r.rows) {
          // Pooled here, with the kernel the server would have run.
          pool_scratch_.resize(r.out_rows * cols);
          r.rows->Pool(v, cols, r.out_rows, pool_scratch_.data());
          pooled = pool_scratch_.data();
        }
        for (int64_t row = 0; row < r.out_rows; ++row) {
          float* d = dst + (scatter ? r.positions[row] : row) * dim + off;
          const float* s = pooled + row * cols;
          // Row shards of a pooled feature are partial sums: add them.
          for (int c = 0; c < cols; ++c) d[c] += s[c];
        }
        v += r.wire_rows() * cols;
      }
    }
    st.futures.clear();
    if (first_error.ok()) break;
    if (!options_.reroute || !Retryable(first_error) || attempt >= 3) return first_error;
    TESSERA_RETURN_IF_ERROR(Reroute(first_error));
  }

  for (int f = 0; f < F; ++f) {
    if (st.whole_bags[f] != nullptr) PoolWholeBags(*st.whole_bags[f], routes_[f].dim, st.batch, &(*out)[f]);
  }
  for (int f = 0; f < F; ++f) {
    if (!(routes_[f].row_split && routes_[f].mean) || st.whole_bags[f] != nullptr) continue;
    const int dim = routes_[f].dim;
    for (int64_t b = 0; b < st.batch; ++b) {
      const int32_t len = st.bag_lengths[f][b];
      if (len <= 0) continue;
      const float inv = 1.0f / static_cast<float>(len);
      for (int c = 0; c < dim; ++c) (*out)[f][b * dim + c] *= inv;
    }
  }
  last_lookup_bytes_ = st.bytes_sent;
  last_reply_bytes_ = st.bytes_received;
  // An evaluation between a training lookup and its push (a PyTorch loop
  // that validates before backward()) must leave that lookup's routes for
  // the push: its own would send the gradients to other positions.
  if (!st.inference) current_ = std::move(st);
  return Status::OK();
}

Status EmbeddingClient::StartPush(const FeatureGrads& grads) {
  if (grads.size() != features_.size()) return Status::InvalidArgument("gradients for the wrong number of features");
  if (!pushes_.empty()) return Status::FailedPrecondition("the previous push was not waited for");
  // The routes read each gradient where the lookup put its output: one of
  // another shape would be read past its end.
  for (size_t f = 0; f < grads.size(); ++f) {
    if (routes_[f].local) continue;
    const size_t want = static_cast<size_t>(current_.out_rows.empty() ? 0 : current_.out_rows[f]) * routes_[f].dim;
    if (grads[f].size() != want) {
      return Status::InvalidArgument("the gradient of feature '" + features_[f] + "' has " +
                                     std::to_string(grads[f].size()) + " values; the step's lookup gave " +
                                     std::to_string(want));
    }
  }
  if (current_.epoch != epoch_ || (options_.plan_replaced && options_.plan_replaced())) {
    if (current_.epoch == epoch_) TESSERA_RETURN_IF_ERROR(Reroute(Status::Cancelled("the plan was replaced")));
    // The lookup was routed under an older plan: route it again (the same
    // shards, on the servers now holding them) for its push.
    TESSERA_RETURN_IF_ERROR(RouteCurrentAgain());
  }
  if (options_.reroute) {
    pushed_.resize(grads.size());
    for (size_t f = 0; f < grads.size(); ++f) pushed_[f].assign(grads[f].begin(), grads[f].end());
  }
  SendPush(grads);
  return Status::OK();
}

Status EmbeddingClient::RouteBatch(const KeyedJaggedTensor& kjt, std::vector<ServerRequest>* requests,
                                   std::vector<int64_t>* out_rows) {
  const int F = static_cast<int>(features_.size());
  const auto value_offsets = kjt.FeatureValueOffsets();
  requests->assign(ps_peers_.size(), {});
  out_rows->assign(F, 0);
  for (int f = 0; f < F; ++f) {
    if (routes_[f].local) continue;
    const int key = kjt.KeyIndex(features_[f]);
    if (key < 0) return Status::InvalidArgument("the batch has no feature '" + features_[f] + "'");
    RouteFeature(f, kjt, key, value_offsets, requests);
    (*out_rows)[f] = routes_[f].pooled ? kjt.batch_size : value_offsets[key + 1] - value_offsets[key];
  }
  return Status::OK();
}

Status EmbeddingClient::RouteCurrentAgain() {
  // Routing only: nothing is sent, the push needs the routes.
  std::vector<ServerRequest> requests;
  std::vector<int64_t> out_rows;
  TESSERA_RETURN_IF_ERROR(RouteBatch(current_.kjt, &requests, &out_rows));
  current_.routes.assign(ps_peers_.size(), {});
  for (size_t p = 0; p < requests.size(); ++p) current_.routes[p] = std::move(requests[p].routes);
  current_.bag_lengths = bag_lengths_;
  current_.epoch = epoch_;
  return Status::OK();
}

void EmbeddingClient::SendPush(const FeatureGrads& grads) {
  std::vector<RpcFuture>& futures = pushes_;
  last_push_bytes_ = 0;
  for (size_t p = 0; p < ps_peers_.size(); ++p) {
    std::vector<PushEntry> entries;
    std::vector<float> values;
    // Sized once: grown by doubling, W2's 1 MB of gradients a server was
    // moved about twice over on its way into the message.
    size_t most_values = 0;
    for (const EntryRoute& r : current_.routes[p]) {
      most_values += static_cast<size_t>(r.out_rows) * static_cast<size_t>(r.shard->num_cols);
    }
    entries.reserve(current_.routes[p].size());
    values.reserve(most_values);
    for (const EntryRoute& r : current_.routes[p]) {
      const FeatureRoute& fr = routes_[r.feature];
      const int cols = r.shard->num_cols, off = r.shard->col_offset;
      entries.push_back(
          PushEntry{r.shard->shard_id, static_cast<uint32_t>(r.wire_rows()), static_cast<uint32_t>(cols), 0});
      const float* g = grads[r.feature].data();
      const bool scatter = !r.positions.empty();
      // (Pooled whole, the mean's factor is in the rows entry's weights.)
      const bool mean_partial = fr.row_split && fr.mean && r.whole_bags_shard < 0;
      // A rows entry's bag gradients are gathered aside, then turned into
      // the distinct rows' gradients as the server would have.
      const size_t bag_grads = values.size();
      for (int64_t row = 0; row < r.out_rows; ++row) {
        const int64_t dst_row = scatter ? r.positions[row] : row;
        const float* s = g + dst_row * fr.dim + off;
        if (mean_partial) {
          // The server pooled this bag by SUM; the mean's 1/len is applied here.
          const int32_t len = current_.bag_lengths[r.feature][dst_row];
          const float scale = len > 0 ? 1.0f / static_cast<float>(len) : 0.0f;
          for (int c = 0; c < cols; ++c) values.push_back(s[c] * scale);
        } else {
          values.insert(values.end(), s, s + cols);
        }
      }
      if (r.rows) {
        pool_scratch_.assign(values.begin() + bag_grads, values.end());
        values.resize(bag_grads + r.rows->unique * cols);
        r.rows->Unpool(pool_scratch_.data(), cols, r.out_rows, values.data() + bag_grads);
      }
    }
    last_push_bytes_ += static_cast<int64_t>(entries.size() * sizeof(PushEntry)) +
                        static_cast<int64_t>(values.size()) * ValueBytes(options_.backward_bf16);
    const PushMeta meta{options_.trainer, options_.backward_bf16 ? kPushBf16Grads : 0u, current_.step};
    Message m = EncodePushRequest(meta, std::move(entries), std::move(values));
    m.header.plan_version = plan_.version;
    futures.push_back(client_->Call(ps_peers_[p], std::move(m), options_.timeout));
  }
}

Status EmbeddingClient::WaitPush() {
  for (int attempt = 0;; ++attempt) {
    std::vector<RpcFuture> futures;
    futures.swap(pushes_);
    Status first_error;
    for (size_t p = 0; p < futures.size(); ++p) {
      auto reply = futures[p].Wait();
      // A retried push the server already applied is a success.
      if (!reply.ok() && reply.status().code() != StatusCode::kAlreadyApplied && first_error.ok()) {
        first_error = reply.status().WithContext("gradient push to parameter server " + std::to_string(p));
      }
    }
    if (first_error.ok()) return first_error;
    if (!options_.reroute || !Retryable(first_error) || attempt >= 3) return first_error;
    // Sent again to every server of the new plan: those that had it answer
    // ALREADY_APPLIED, the backups now serving apply it.
    TESSERA_RETURN_IF_ERROR(Reroute(first_error));
    TESSERA_RETURN_IF_ERROR(RouteCurrentAgain());
    SendPush(ViewsOf(pushed_));
  }
}

}  // namespace tessera
