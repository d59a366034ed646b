#include "master/planner.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <sstream>

namespace tessera {
namespace {

// Splits n into k contiguous parts whose sizes differ by at most one.
std::vector<std::pair<int64_t, int64_t>> EvenSplit(int64_t n, int64_t k) {
  std::vector<std::pair<int64_t, int64_t>> parts;
  int64_t offset = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t size = n / k + (i < n % k ? 1 : 0);
    parts.emplace_back(offset, size);
    offset += size;
  }
  return parts;
}

int64_t ShardBytes(const TableConfig& t, const ShardSpec& s) {
  // Row bytes scale with the shard's columns (the optimizer state does too,
  // except row-wise Adagrad's single float, which is close enough).
  return s.num_rows * t.RowBytes() * s.num_cols / t.embedding_dim;
}

std::string Human(int64_t bytes) {
  char buf[32];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

StatusOr<ShardingPlan> PlanSharding(const JobConfig& job, const PlannerOptions& options) {
  if (options.num_ps < 1) return Status::InvalidArgument("the plan needs at least one parameter server");
  ShardingPlan plan;
  plan.num_ps = options.num_ps;
  for (size_t t = 0; t < job.tables.size(); ++t) {
    const TableConfig& table = job.tables[t];
    TablePlan tp;
    tp.table = static_cast<int>(t);
    tp.type = ShardingType::kTableWise;
    if (!table.sharding_type.empty()) TESSERA_RETURN_IF_ERROR(ParseShardingType(table.sharding_type, &tp.type));
    auto add = [&](int64_t row_offset, int64_t num_rows, int64_t col_offset, int64_t num_cols) {
      ShardSpec s;
      s.shard_id = static_cast<uint32_t>(plan.shards.size());
      s.table = static_cast<int>(t);
      s.row_offset = row_offset;
      s.num_rows = num_rows;
      s.col_offset = static_cast<int>(col_offset);
      s.num_cols = static_cast<int>(num_cols);
      s.ps = -1;
      tp.shards.push_back(s.shard_id);
      plan.shards.push_back(s);
    };
    switch (tp.type) {
      case ShardingType::kTableWise:
        add(0, table.num_embeddings, 0, table.embedding_dim);
        break;
      case ShardingType::kRowWise:
        for (auto [off, n] : EvenSplit(table.num_embeddings, std::min<int64_t>(options.num_ps, table.num_embeddings))) {
          add(off, n, 0, table.embedding_dim);
        }
        break;
      case ShardingType::kColumnWise:
        for (auto [off, n] : EvenSplit(table.embedding_dim, std::min<int64_t>(options.num_ps, table.embedding_dim))) {
          add(0, table.num_embeddings, off, n);
        }
        break;
      case ShardingType::kTableRowWise:
      case ShardingType::kDataParallel:
        return Status::Unimplemented("table " + table.name + ": sharding type " + ShardingTypeName(tp.type) +
                                     " is not supported by this planner yet (use table_wise, row_wise or column_wise)");
    }
    plan.tables.push_back(std::move(tp));
  }

  // Largest shard first onto the least-loaded server, keeping the shards of
  // one table on distinct servers while there are servers to spare.
  std::vector<uint32_t> order(plan.shards.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return ShardBytes(job.tables[plan.shards[a].table], plan.shards[a]) >
           ShardBytes(job.tables[plan.shards[b].table], plan.shards[b]);
  });
  std::vector<int64_t> load(options.num_ps, 0);
  std::vector<std::set<int>> servers_of_table(job.tables.size());
  for (uint32_t id : order) {
    ShardSpec& s = plan.shards[id];
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; ++pass) {
      for (int ps = 0; ps < options.num_ps; ++ps) {
        if (pass == 0 && servers_of_table[s.table].count(ps)) continue;
        if (best < 0 || load[ps] < load[best]) best = ps;
      }
    }
    s.ps = best;
    load[best] += ShardBytes(job.tables[s.table], s);
    servers_of_table[s.table].insert(best);
  }
  return plan;
}

std::vector<int64_t> BytesPerServer(const JobConfig& job, const ShardingPlan& plan) {
  std::vector<int64_t> bytes(plan.num_ps, 0);
  for (const ShardSpec& s : plan.shards) {
    if (s.ps >= 0 && s.ps < plan.num_ps) bytes[s.ps] += ShardBytes(job.tables[s.table], s);
  }
  return bytes;
}

std::string FormatPlan(const JobConfig& job, const ShardingPlan& plan) {
  std::ostringstream out;
  size_t w = 5;
  for (const TableConfig& t : job.tables) w = std::max(w, t.name.size());
  auto pad = [](std::string s, size_t n) {
    s.resize(std::max(n, s.size()), ' ');
    return s;
  };
  out << "Sharding plan v" << plan.version << " over " << plan.num_ps << " parameter server(s)\n";
  out << pad("param", w) << " | " << pad("sharding type", 14) << " | ranks\n";
  for (const TablePlan& tp : plan.tables) {
    std::string ranks = "[";
    for (size_t i = 0; i < tp.shards.size(); ++i) {
      ranks += (i ? ", " : "") + std::to_string(plan.shards[tp.shards[i]].ps);
    }
    out << pad(job.tables[tp.table].name, w) << " | " << pad(ShardingTypeName(tp.type), 14) << " | " << ranks
        << "]\n";
  }
  out << "\n" << pad("param", w) << " | " << pad("shard offsets", 20) << " | " << pad("shard sizes", 20)
      << " | placement\n";
  for (const ShardSpec& s : plan.shards) {
    out << pad(job.tables[s.table].name, w) << " | "
        << pad("[" + std::to_string(s.row_offset) + ", " + std::to_string(s.col_offset) + "]", 20) << " | "
        << pad("[" + std::to_string(s.num_rows) + ", " + std::to_string(s.num_cols) + "]", 20) << " | rank:" << s.ps
        << "\n";
  }
  const auto bytes = BytesPerServer(job, plan);
  out << "\nbytes per server:";
  for (size_t ps = 0; ps < bytes.size(); ++ps) out << "  ps" << ps << " " << Human(bytes[ps]);
  out << "\n";
  return out.str();
}

}  // namespace tessera
