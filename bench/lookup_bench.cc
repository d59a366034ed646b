// Lookup benchmark over 2 parameter servers (issue: sharding like TorchRec).
//
// 26 tables shaped like Criteo's (the per-column distinct counts of the
// Criteo sample, scaled to 10M rows in all), dim 64, batch 2048, one id per
// feature per example, Zipf 1.05 ids. Two parameter servers and one trainer's
// EmbeddingClient in this process, talking over loopback TCP. For table-wise,
// row-wise and column-wise sharding of every table it prints lookups/s (ids
// per second), lookup+push steps/s, and the bytes moved per step against the
// minimum: every unique id's row once (unique ids x dim x 4), which is what a
// server holding the row must send at the least. Each sharding runs twice,
// back to back: with rows pooled by the servers (training.row_replies
// "never", the peer) and with the default "auto" (distinct rows, pooled by
// the trainer, where that moves fewer bytes). "push B/step" is the gradient
// push of a training step, whose minimum is the same rows again.
//
//   tessera_lookup_bench [--steps N] [--batch B] [--rows R] [--dim D]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "master/planner.h"
#include "ps/ps_service.h"
#include "trainer/data_factory.h"
#include "trainer/embedding_client.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// Distinct values per categorical column of the Criteo sample (SOURCE.md).
constexpr int64_t kCriteoCardinality[26] = {157,  370, 4524, 3369, 53,   7,    2817, 82,   3,  2584, 1904, 4337, 1591,
                                            22,   1833, 3905, 9,   1055, 480, 3,    4140, 7,  12,   2152, 37,   1635};

JobConfig MakeJob(const std::string& sharding, int64_t total_rows, int dim, int64_t batch) {
  int64_t sum = 0;
  for (int64_t c : kCriteoCardinality) sum += c;
  JobConfig job;
  job.cluster = {2, 1};
  job.training.batch_size = batch;
  job.training.seed = 1;
  job.data.source = "synthetic";
  job.data.num_examples = 1 << 20;
  job.data.ids_per_bag = 1;
  job.data.zipf = 1.05;
  job.model.top_mlp = {1};
  for (int c = 0; c < 26; ++c) {
    TableConfig t;
    t.name = "C" + std::to_string(c + 1);
    t.num_embeddings = std::max<int64_t>(2, kCriteoCardinality[c] * total_rows / sum);
    t.embedding_dim = dim;
    t.feature_names = {t.name};
    t.sharding_type = sharding;
    t.seed = 100 + c;
    job.tables.push_back(t);
  }
  return job;
}

int Run(int argc, char** argv) {
  int steps = 50;
  int64_t batch = 2048, rows = 10'000'000;
  int dim = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dim")) dim = std::atoi(argv[i + 1]);
  }
  std::printf("%-12s %-7s %14s %12s %14s %14s %14s %14s %8s %8s\n", "sharding", "replies", "lookups/s", "steps/s",
              "sent B/step", "recv B/step", "push B/step", "min B/step", "ratio", "push/min");
  for (const char* sharding : {"table_wise", "row_wise", "column_wise"}) {
  for (RowReplies replies : {RowReplies::kNever, RowReplies::kAuto}) {
      JobConfig job = MakeJob(sharding, rows, dim, batch);
      auto plan = PlanSharding(job, PlannerOptions::Uniform(2));
      CHECK(plan.ok()) << plan.status();
      std::vector<std::unique_ptr<PsService>> services;
      std::vector<std::unique_ptr<RpcServer>> servers;
      auto client = std::move(RpcClient::Create()).value();
      std::vector<int> peers;
      for (int s = 0; s < 2; ++s) {
        PsServiceOptions options{s};
        options.open_to_any_sender = true;  // no master: the bench plays it
        services.push_back(std::make_unique<PsService>(options));
        JobConfig async = job;
        async.training.consistency = Consistency::kAsync;
        CHECK(services.back()->CreateShards(async, *plan).ok());
        PsService* svc = services.back().get();
        servers.push_back(std::move(RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 2},
                                                     [svc](Message&& m, Responder r) {
                                                       svc->Handle(std::move(m), std::move(r));
                                                     }))
                              .value());
        peers.push_back(*client->Connect(servers.back()->endpoint()));
      }
      EmbeddingClientOptions client_options{0, std::chrono::milliseconds(60000)};
      client_options.row_replies = replies;
      EmbeddingClient embeddings(client_options, job, *plan, client.get(), peers);
      auto data = OpenTrainingData(job);
      CHECK(data.ok()) << data.status();
      std::vector<Batch> batches(8);
      double min_bytes = 0;
      for (size_t i = 0; i < batches.size(); ++i) {
        CHECK((*data)->Read(i * batch, batch, &batches[i]).ok());
        const auto offsets = batches[i].sparse.FeatureValueOffsets();
        for (int f = 0; f < 26; ++f) {
          std::set<int64_t> unique(batches[i].sparse.values.begin() + offsets[f],
                                   batches[i].sparse.values.begin() + offsets[f + 1]);
          min_bytes += static_cast<double>(unique.size()) * dim * 4;
        }
      }
      min_bytes /= static_cast<double>(batches.size());

      FeatureOutputs out, grads;
      // Warm-up: materializes the rows the batches touch.
      for (size_t i = 0; i < batches.size(); ++i) CHECK(embeddings.Lookup(i, batches[i].sparse, true, &out).ok());
      double sent = 0, received = 0;
      auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) {
        CHECK(embeddings.Lookup(s, batches[s % batches.size()].sparse, true, &out).ok());
        sent += static_cast<double>(embeddings.last_lookup_bytes());
        received += static_cast<double>(embeddings.last_reply_bytes());
      }
      const double lookup_s = std::chrono::duration<double>(Clock::now() - t0).count();
      // Lookup + gradient push, as in training (async servers).
      t0 = Clock::now();
      double pushed = 0;
      for (int s = 0; s < steps; ++s) {
        const Status looked = embeddings.Lookup(s, batches[s % batches.size()].sparse, false, &out);
        CHECK(looked.ok()) << looked;
        grads = out;
        CHECK(embeddings.PushGradients(grads).ok());
        pushed += static_cast<double>(embeddings.last_push_bytes());
      }
      const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
      const double ids_per_step = static_cast<double>(batch) * 26;
      std::printf("%-12s %-7s %14.0f %12.1f %14.0f %14.0f %14.0f %14.0f %8.2f %8.2f\n", sharding,
                  RowRepliesName(replies), steps * ids_per_step / lookup_s, steps / step_s, sent / steps,
                  received / steps, pushed / steps, min_bytes, (sent + received) / steps / min_bytes,
                  pushed / steps / min_bytes);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  return tessera::Run(argc, argv);
}
