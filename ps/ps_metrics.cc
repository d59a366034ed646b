#include "ps/ps_metrics.h"

#include <string>

namespace tessera {

using nlohmann::json;

namespace {

double Number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A figure of a shard or tier: its family, help, the Stats() key it comes
// from, and whether it is a counter (else a gauge).
struct Figure {
  const char* name;
  const char* help;
  const char* key;
  bool counter;
};

constexpr Figure kShardFigures[] = {
    {"tessera_ps_rows_materialized", "Rows of the shard that exist (written at least once).", "rows_materialized",
     false},
    {"tessera_ps_rocksdb_read_rows_total", "Rows read from RocksDB (found there).", "rocksdb_rows_read", true},
    {"tessera_ps_rocksdb_read_bytes_total", "Bytes of rows read from RocksDB.", "rocksdb_bytes_read", true},
    {"tessera_ps_rocksdb_written_rows_total", "Rows written to RocksDB.", "rocksdb_rows_written", true},
    {"tessera_ps_rocksdb_written_bytes_total", "Key and value bytes written to RocksDB.", "rocksdb_bytes_written",
     true},
    {"tessera_ps_rocksdb_write_stalls_total", "Writes RocksDB stopped or slowed because compaction fell behind.",
     "rocksdb_write_stalls", true},
};

constexpr Figure kTierFigures[] = {
    {"tessera_ps_tier_hits_total", "Rows looked up and found in the tier.", "hits", true},
    {"tessera_ps_tier_misses_total", "Rows looked up and not found in the tier.", "misses", true},
    {"tessera_ps_tier_hit_ratio", "hits / (hits + misses) of the tier since the shard opened.", "hit_rate", false},
    {"tessera_ps_tier_evictions_total", "Rows moved out of the tier to make room.", "evictions", true},
    {"tessera_ps_tier_writebacks_total", "Dirty rows written to the tier below.", "writebacks", true},
    {"tessera_ps_tier_rows", "Rows resident in the tier.", "rows", false},
    {"tessera_ps_tier_bytes", "Bytes resident in the tier.", "bytes", false},
    {"tessera_ps_tier_budget_bytes", "The tier's byte budget (0: unbounded).", "budget_bytes", false},
};

void Write(PrometheusText* out, const Figure& f, const MetricLabels& labels, double value) {
  if (f.counter) {
    out->Counter(f.name, f.help, labels, value);
  } else {
    out->Gauge(f.name, f.help, labels, value);
  }
}

}  // namespace

void WritePsMetrics(const json& stats, PrometheusText* out) {
  out->Gauge("tessera_ps_rank", "This server's place in the current plan (-1: none yet).", {},
             stats.value("ps_rank", -1));
  out->Counter("tessera_ps_lookups_total", "Lookup requests served.", {}, Number(stats, "lookups"));
  out->Counter("tessera_ps_ids_looked_up_total", "Ids looked up, over all lookup requests.", {},
               Number(stats, "ids_looked_up"));
  out->Counter("tessera_ps_rows_warmed_total",
               "Rows of lookups parked for the step before them, read up from RocksDB while they waited.", {},
               Number(stats, "rows_warmed"));
  out->Counter("tessera_ps_pushes_applied_total", "Gradient pushes applied.", {}, Number(stats, "pushes_applied"));
  out->Counter("tessera_ps_refused_requests_total", "Requests refused (bad, forged, out of order).", {},
               Number(stats, "errors"));
  out->Gauge("tessera_ps_open_contexts", "Lookup contexts waiting for their gradients.", {},
             Number(stats, "open_contexts"));
  out->Gauge("tessera_ps_applied_steps", "Steps whose gradients this server has applied.", {},
             Number(stats, "applied_steps"));
  const char* compute = "CPU time in the embedding kernels, by phase (lookup, backward, apply).";
  out->Counter("tessera_ps_compute_seconds_total", compute, {{"phase", "lookup"}},
               Number(stats, "lookup_compute_ms") / 1e3);
  out->Counter("tessera_ps_compute_seconds_total", compute, {{"phase", "backward"}},
               Number(stats, "backward_compute_ms") / 1e3);
  out->Counter("tessera_ps_compute_seconds_total", compute, {{"phase", "apply"}},
               Number(stats, "apply_compute_ms") / 1e3);
  if (!stats.contains("shards") || !stats["shards"].is_array()) return;
  for (const json& shard : stats["shards"]) {
    const MetricLabels l = {{"table", shard.value("table", "")},
                            {"shard", std::to_string(shard.value("shard_id", -1))}};
    for (const Figure& f : kShardFigures) Write(out, f, l, Number(shard, f.key));
    if (!shard.contains("tiers") || !shard["tiers"].is_array()) continue;
    for (const json& tier : shard["tiers"]) {
      MetricLabels t = l;
      t.emplace_back("tier", tier.value("tier", ""));
      for (const Figure& f : kTierFigures) Write(out, f, t, Number(tier, f.key));
    }
  }
}

}  // namespace tessera
