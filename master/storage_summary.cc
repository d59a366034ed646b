#include "master/storage_summary.h"

#include <cstdio>

namespace tessera {

using nlohmann::json;

json SummarizeStorage(const json& servers) {
  json tables = json::object();
  for (const json& server : servers) {
    if (!server.is_object() || !server.contains("shards")) continue;
    for (const json& shard : server["shards"]) {
      json& t = tables[shard.value("table", std::string("?"))];
      if (t.is_null()) {
        t = {{"tiers", json::object()},
             {"rocksdb_rows_read", 0},
             {"rocksdb_rows_written", 0},
             {"rocksdb_bytes_read", 0},
             {"rocksdb_bytes_written", 0}};
      }
      for (const char* k : {"rocksdb_rows_read", "rocksdb_rows_written", "rocksdb_bytes_read", "rocksdb_bytes_written"}) {
        t[k] = t[k].get<int64_t>() + shard.value(k, int64_t{0});
      }
      for (const json& tier : shard.value("tiers", json::array())) {
        json& a = t["tiers"][tier.value("tier", std::string("?"))];
        if (a.is_null()) a = {{"hits", 0}, {"misses", 0}, {"evictions", 0}, {"writebacks", 0}, {"rows", 0}, {"bytes", 0}};
        for (const char* k : {"hits", "misses", "evictions", "writebacks", "rows", "bytes"}) {
          a[k] = a[k].get<int64_t>() + tier.value(k, int64_t{0});
        }
      }
    }
  }
  for (auto& [name, t] : tables.items()) {
    for (auto& [tier, a] : t["tiers"].items()) {
      const int64_t lookups = a["hits"].get<int64_t>() + a["misses"].get<int64_t>();
      a["hit_rate"] = lookups > 0 ? static_cast<double>(a["hits"].get<int64_t>()) / static_cast<double>(lookups) : 0.0;
    }
  }
  return tables;
}

std::string FormatStorageSummary(const json& summary) {
  std::string out;
  char line[512];
  // Tables wholly in memory get one line between them: their "misses" are
  // rows touched for the first time, nothing to tune.
  int64_t memory_tables = 0, memory_rows = 0;
  for (const auto& [name, t] : summary.items()) {
    if (t["tiers"].size() == 1 && t["tiers"].contains("memory")) {
      ++memory_tables;
      memory_rows += t["tiers"]["memory"]["rows"].get<int64_t>();
      continue;
    }
    for (const auto& [tier, a] : t["tiers"].items()) {
      std::snprintf(line, sizeof(line),
                    "[master]   storage %s/%s: hit rate %.1f%% (%lld hits, %lld misses), %lld evictions, %lld rows, "
                    "%.1f MiB\n",
                    name.c_str(), tier.c_str(), 100.0 * a["hit_rate"].get<double>(),
                    static_cast<long long>(a["hits"].get<int64_t>()), static_cast<long long>(a["misses"].get<int64_t>()),
                    static_cast<long long>(a["evictions"].get<int64_t>()),
                    static_cast<long long>(a["rows"].get<int64_t>()), a["bytes"].get<int64_t>() / 1048576.0);
      out += line;
    }
    if (t["rocksdb_rows_read"].get<int64_t>() + t["rocksdb_rows_written"].get<int64_t>() > 0) {
      std::snprintf(line, sizeof(line), "[master]   storage %s/rocksdb: %lld rows read (%.1f MiB), %lld written (%.1f MiB)\n",
                    name.c_str(), static_cast<long long>(t["rocksdb_rows_read"].get<int64_t>()),
                    t["rocksdb_bytes_read"].get<int64_t>() / 1048576.0,
                    static_cast<long long>(t["rocksdb_rows_written"].get<int64_t>()),
                    t["rocksdb_bytes_written"].get<int64_t>() / 1048576.0);
      out += line;
    }
  }
  if (memory_tables > 0) {
    std::snprintf(line, sizeof(line), "[master]   storage: %lld table(s) all in memory, %lld rows materialized\n",
                  static_cast<long long>(memory_tables), static_cast<long long>(memory_rows));
    out += line;
  }
  return out;
}

}  // namespace tessera
