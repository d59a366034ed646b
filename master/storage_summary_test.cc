#include "master/storage_summary.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

using nlohmann::json;

json Shard(const std::string& table, int64_t hits, int64_t misses, int64_t evictions, int64_t rocks_read) {
  return {{"table", table},
          {"tiers", {{{"tier", "host"}, {"hits", hits}, {"misses", misses}, {"evictions", evictions}, {"rows", 10},
                      {"bytes", 1000}}}},
          {"rocksdb_rows_read", rocks_read},
          {"rocksdb_rows_written", 2},
          {"rocksdb_bytes_read", rocks_read * 100},
          {"rocksdb_bytes_written", 200}};
}

TEST(StorageSummaryTest, AddsUpATableSplitOverServers) {
  json servers = json::array({json{{"shards", {Shard("a", 30, 10, 4, 10), Shard("b", 5, 0, 0, 0)}}},
                              json{{"error", "UNAVAILABLE: gone"}},  // a server that did not answer
                              json{{"shards", {Shard("a", 50, 10, 6, 10)}}}});
  const json s = SummarizeStorage(servers);
  ASSERT_TRUE(s.contains("a") && s.contains("b"));
  const json& host = s["a"]["tiers"]["host"];
  EXPECT_EQ(host["hits"], 80);
  EXPECT_EQ(host["misses"], 20);
  EXPECT_DOUBLE_EQ(host["hit_rate"].get<double>(), 0.8);
  EXPECT_EQ(host["evictions"], 10);
  EXPECT_EQ(host["bytes"], 2000);
  EXPECT_EQ(s["a"]["rocksdb_rows_read"], 20);
  EXPECT_EQ(s["a"]["rocksdb_bytes_written"], 400);
  EXPECT_DOUBLE_EQ(s["b"]["tiers"]["host"]["hit_rate"].get<double>(), 1.0);

  const std::string text = FormatStorageSummary(s);
  EXPECT_NE(text.find("storage a/host: hit rate 80.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("storage a/rocksdb: 20 rows read"), std::string::npos) << text;
}

TEST(StorageSummaryTest, MemoryOnlyTablesShareALine) {
  json mem = Shard("m", 5, 5, 0, 0);
  mem["tiers"][0]["tier"] = "memory";
  json mem2 = Shard("n", 5, 5, 0, 0);
  mem2["tiers"][0]["tier"] = "memory";
  const std::string text =
      FormatStorageSummary(SummarizeStorage(json::array({json{{"shards", {mem, mem2, Shard("a", 1, 1, 0, 0)}}}})));
  EXPECT_NE(text.find("storage: 2 table(s) all in memory, 20 rows materialized"), std::string::npos) << text;
  EXPECT_NE(text.find("storage a/host"), std::string::npos) << text;
  EXPECT_EQ(text.find("storage m/"), std::string::npos) << text;
}

TEST(StorageSummaryTest, NoShardsNoLines) {
  EXPECT_TRUE(SummarizeStorage(json::array()).empty());
  EXPECT_EQ(FormatStorageSummary(SummarizeStorage(json::array({json{{"error", "x"}}}))), "");
}

}  // namespace
}  // namespace tessera
