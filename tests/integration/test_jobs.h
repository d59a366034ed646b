// Job configs the integration tests share.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::testing {

// The seed a test draws its faults from: TESSERA_TEST_SEED when set (so a
// failure can be replayed), else `fallback`.
inline uint64_t TestSeed(uint64_t fallback) {
  const char* s = std::getenv("TESSERA_TEST_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : fallback;
}

// A small synchronous job with optimizer state everywhere (Adagrad, row-wise
// Adagrad, Adam), a row-split and a column-split table (re-cut when the
// server count changes), table-wise tables and a data-parallel one, and an Adam
// dense optimizer: what a checkpoint, a resume or a change of servers must
// carry over exactly. checkpoint.every_steps = `every` (0: on demand only).
// Row-split bags are pooled whole (training.plan_independent_pooling), so a
// change of the servers' count leaves the results bit for bit as they were.
inline nlohmann::json StatefulSyncJob(const std::string& name, const std::string& ckpt_dir, int64_t steps,
                                      int64_t every) {
  using nlohmann::json;
  auto table = [](const std::string& t, int rows, int dim, json optimizer, const std::string& sharding) {
    return json{{"name", t},        {"num_embeddings", rows},       {"embedding_dim", dim},
                {"feature_names", {t + "_f"}}, {"optimizer", optimizer}, {"sharding_type", sharding},
                {"initializer", {{"type", "uniform"}, {"low", -0.1}, {"high", 0.1}}}};
  };
  return json{
      {"name", name},
      {"tables",
       {table("rows", 97, 6, {{"type", "adagrad"}, {"lr", 0.1}}, "row_wise"),
        table("cols", 50, 7, {{"type", "adam"}, {"lr", 0.01}}, "column_wise"),
        table("whole", 40, 4, {{"type", "rowwise_adagrad"}, {"lr", 0.1}}, "table_wise"),
        // Small whole tables after re-cut ones: a change of the servers keeps
        // some where they are under new shard ids.
        table("small_a", 12, 2, {{"type", "sgd"}, {"lr", 0.1}}, "table_wise"),
        table("small_b", 12, 2, {{"type", "adagrad"}, {"lr", 0.1}}, "table_wise"),
        table("local", 20, 3, {{"type", "sgd"}, {"lr", 0.1}}, "data_parallel")}},
      {"model", {{"num_dense_features", 3}, {"bottom_mlp", {8, 4}}, {"top_mlp", {8, 1}}}},
      {"data", {{"source", "synthetic"}, {"num_examples", 300}, {"ids_per_bag", 3}, {"zipf", 0.9}}},
      {"training",
       {{"batch_size", 8},
        {"steps", steps},
        {"dense_optimizer", {{"type", "adam"}, {"lr", 0.01}}},
        {"consistency", "sync"},
        {"plan_independent_pooling", true},
        {"seed", 5},
        {"log_every", 4}}},
      {"checkpoint", {{"dir", ckpt_dir}, {"every_steps", every}, {"keep", 3}}},
      // A call or an allreduce that never completes fails in 30 s, with its
      // error in the trainer's log, well within the tests' waits for the
      // job's end (which the defaults, 120 s, matched exactly).
      {"runtime",
       {{"heartbeat_ms", 200},
        {"peer_timeout_ms", 3000},
        {"master_reconnect_ms", 5000},
        {"rpc_timeout_ms", 30000},
        {"collective_timeout_ms", 30000}}}};
}

}  // namespace tessera::testing
