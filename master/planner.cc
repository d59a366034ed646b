#include "master/planner.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace tessera {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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
  return s.num_rows * (s.num_cols + OptimizerStateFloats(t.optimizer.type, s.num_cols)) * 4;
}

double PoolingFactor(const JobConfig& job, const TableConfig& t) {
  if (t.constraints.pooling_factor > 0) return t.constraints.pooling_factor;
  return job.data.ids_per_bag > 0 ? static_cast<double>(job.data.ids_per_bag) : 1.0;
}

// Share of the table's lookups that fall in rows [lo, lo + n).
double LookupShare(const TableConfig& t, int64_t lo, int64_t n) {
  const auto& sample = t.constraints.id_frequency_sample;
  if (sample.empty()) return static_cast<double>(n) / static_cast<double>(t.num_embeddings);
  int64_t hits = 0;
  for (int64_t id : sample) hits += id >= lo && id < lo + n;
  return static_cast<double>(hits) / static_cast<double>(sample.size());
}

// Bytes a step moves to and from the server holding `s`: ids in, pooled
// vectors (or one row per id, unpooled) out.
double ShardLookupBytes(const JobConfig& job, const TableConfig& t, const ShardSpec& s, int64_t batch) {
  const double features = static_cast<double>(t.feature_names.size());
  const double ids = static_cast<double>(batch) * PoolingFactor(job, t) * features;
  const bool all_rows = s.num_rows == t.num_embeddings;
  const double my_ids = all_rows ? ids : ids * LookupShare(t, s.row_offset, s.num_rows);
  const double out_rows = t.pooling == PoolingType::kNone ? my_ids : static_cast<double>(batch) * features;
  return my_ids * 8 + out_rows * s.num_cols * 4;
}

std::string Human(double bytes) {
  char buf[32];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

bool Allows(const TableConfig& t, ShardingType type) {
  if (!t.sharding_type.empty()) return t.sharding_type == ShardingTypeName(type);
  if (t.constraints.sharding_types.empty()) return type != ShardingType::kDataParallel;
  for (const std::string& s : t.constraints.sharding_types) {
    if (s == ShardingTypeName(type)) return true;
  }
  return false;
}

class Planner {
 public:
  Planner(const JobConfig& job, const PlannerOptions& options) : job_(job), options_(options) {
    batch_ = options.global_batch > 0 ? options.global_batch
                                      : job.training.batch_size * static_cast<int64_t>(job.cluster.num_trainers);
    bytes_.assign(options.servers.size(), 0);
    cost_.assign(options.servers.size(), 0.0);
  }

  StatusOr<ShardingPlan> Run() {
    const int n = static_cast<int>(options_.servers.size());
    if (n < 1) return Status::InvalidArgument("the plan needs at least one parameter server");
    plan_.num_ps = n;
    // Normalizers: the average server's share of all bytes and lookup work
    // if every table stayed whole.
    for (const TableConfig& t : job_.tables) {
      ShardSpec whole{0, 0, 0, t.num_embeddings, 0, t.embedding_dim, 0};
      total_bytes_ += static_cast<double>(ShardBytes(t, whole));
      total_cost_ += ShardLookupBytes(job_, t, whole, batch_);
    }
    for (size_t t = 0; t < job_.tables.size(); ++t) TESSERA_RETURN_IF_ERROR(CutTable(static_cast<int>(t)));
    return Place();
  }

 private:
  // Servers table t may use.
  std::vector<int> AllowedServers(const TableConfig& t) const {
    std::vector<int> out;
    for (int s = 0; s < static_cast<int>(options_.servers.size()); ++s) {
      if (t.constraints.ps.empty() || std::count(t.constraints.ps.begin(), t.constraints.ps.end(), s)) {
        out.push_back(s);
      }
    }
    return out;
  }

  int ShardCount(const TableConfig& t, int available, int64_t limit) const {
    int k = available;
    if (t.constraints.max_shards > 0) k = std::min(k, t.constraints.max_shards);
    k = std::max(k, t.constraints.min_shards);
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(k, limit)));
  }

  Status CutTable(int index) {
    const TableConfig& t = job_.tables[index];
    const std::vector<int> allowed = AllowedServers(t);
    for (int s : t.constraints.ps) {
      if (s >= static_cast<int>(options_.servers.size())) {
        return Status::InvalidArgument("table " + t.name + ": constraints.ps names server " + std::to_string(s) +
                                       " but the job has " + std::to_string(options_.servers.size()));
      }
    }
    if (allowed.empty()) return Status::InvalidArgument("table " + t.name + ": no parameter server allowed");
    ShardSpec whole{0, index, 0, t.num_embeddings, 0, t.embedding_dim, -1};
    const double bytes = static_cast<double>(ShardBytes(t, whole));
    const double share = total_bytes_ / static_cast<double>(options_.servers.size());
    int64_t largest_budget = 0;
    bool unlimited = false;
    for (int s : allowed) {
      unlimited |= options_.servers[s].memory_bytes == 0;
      largest_budget = std::max(largest_budget, options_.servers[s].memory_bytes);
    }
    const bool fits_whole = unlimited || bytes <= static_cast<double>(largest_budget);
    const bool small = bytes <= options_.split_fraction * share && t.constraints.min_shards <= 1;

    TablePlan tp;
    tp.table = index;
    if (Allows(t, ShardingType::kDataParallel) && !t.sharding_type.empty()) {
      tp.type = ShardingType::kDataParallel;
    } else if (Allows(t, ShardingType::kTableWise) && ((small && fits_whole) || OnlyType(t, ShardingType::kTableWise))) {
      tp.type = ShardingType::kTableWise;
    } else if (Allows(t, ShardingType::kRowWise)) {
      tp.type = ShardingType::kRowWise;
    } else if (Allows(t, ShardingType::kTableRowWise)) {
      tp.type = ShardingType::kTableRowWise;
    } else if (Allows(t, ShardingType::kColumnWise)) {
      tp.type = ShardingType::kColumnWise;
    } else if (Allows(t, ShardingType::kTableWise)) {
      tp.type = ShardingType::kTableWise;
    } else if (Allows(t, ShardingType::kDataParallel)) {
      tp.type = ShardingType::kDataParallel;
    } else {
      return Status::InvalidArgument("table " + t.name + ": its constraints allow no sharding type");
    }

    auto add = [&](int64_t row_offset, int64_t num_rows, int64_t col_offset, int64_t num_cols, int ps) {
      ShardSpec s;
      s.shard_id = static_cast<uint32_t>(plan_.shards.size());
      s.table = index;
      s.row_offset = row_offset;
      s.num_rows = num_rows;
      s.col_offset = static_cast<int>(col_offset);
      s.num_cols = static_cast<int>(num_cols);
      s.ps = ps;
      tp.shards.push_back(s.shard_id);
      plan_.shards.push_back(s);
    };
    switch (tp.type) {
      case ShardingType::kTableWise:
        add(0, t.num_embeddings, 0, t.embedding_dim, -1);
        break;
      case ShardingType::kRowWise:
        for (auto [off, n] : EvenSplit(t.num_embeddings, ShardCount(t, static_cast<int>(allowed.size()), t.num_embeddings))) {
          add(off, n, 0, t.embedding_dim, -1);
        }
        break;
      case ShardingType::kColumnWise:
        for (auto [off, n] : EvenSplit(t.embedding_dim, ShardCount(t, static_cast<int>(allowed.size()), t.embedding_dim))) {
          add(0, t.num_embeddings, off, n, -1);
        }
        break;
      case ShardingType::kTableRowWise: {
        // The host whose allowed servers have the most room; rows split over them.
        std::map<std::string, std::vector<int>> hosts;
        for (int s : allowed) hosts[options_.servers[s].host].push_back(s);
        const std::vector<int>* best = nullptr;
        double best_room = -kInf;
        for (const auto& [host, servers] : hosts) {
          double room = 0;
          for (int s : servers) {
            room += options_.servers[s].memory_bytes == 0 ? 1e18 : static_cast<double>(options_.servers[s].memory_bytes);
          }
          room += static_cast<double>(servers.size());  // ties: more servers
          if (room > best_room) {
            best_room = room;
            best = &servers;
          }
        }
        const int k = ShardCount(t, static_cast<int>(best->size()), t.num_embeddings);
        auto parts = EvenSplit(t.num_embeddings, k);
        for (int i = 0; i < k; ++i) add(parts[i].first, parts[i].second, 0, t.embedding_dim, -1);
        group_[index] = *best;
        break;
      }
      case ShardingType::kDataParallel:
        break;
    }
    plan_.tables.push_back(std::move(tp));
    return Status::OK();
  }

  static bool OnlyType(const TableConfig& t, ShardingType type) {
    if (!t.sharding_type.empty()) return t.sharding_type == ShardingTypeName(type);
    return t.constraints.sharding_types.size() == 1 && t.constraints.sharding_types[0] == ShardingTypeName(type);
  }

  StatusOr<ShardingPlan> Place() {
    const int n = static_cast<int>(options_.servers.size());
    // Each server's fair share of bytes: by budget when every server has one,
    // else even. Lookup work is shared evenly.
    std::vector<double> share(n, std::max(1.0, total_bytes_ / n));
    double total_budget = 0;
    bool all_budgets = true;
    for (const ServerInfo& s : options_.servers) {
      total_budget += static_cast<double>(s.memory_bytes);
      all_budgets &= s.memory_bytes > 0;
    }
    if (all_budgets) {
      for (int ps = 0; ps < n; ++ps) {
        share[ps] = std::max(1.0, total_bytes_ * options_.servers[ps].memory_bytes / total_budget);
      }
    }
    const double cost_norm = std::max(1.0, total_cost_ / n);
    std::vector<uint32_t> order(plan_.shards.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return ShardBytes(job_.tables[plan_.shards[a].table], plan_.shards[a]) >
             ShardBytes(job_.tables[plan_.shards[b].table], plan_.shards[b]);
    });
    std::vector<std::set<int>> used(job_.tables.size());
    for (uint32_t id : order) {
      ShardSpec& s = plan_.shards[id];
      const TableConfig& t = job_.tables[s.table];
      const int64_t b = ShardBytes(t, s);
      const double c = ShardLookupBytes(job_, t, s, batch_);
      std::vector<int> candidates = group_.count(s.table) ? group_[s.table] : AllowedServers(t);
      int best = -1;
      double best_score = kInf;
      // Where most of its rows are already, if that keeps the balance.
      int64_t best_kept = 0;
      for (int ps : candidates) {
        const int64_t budget = options_.servers[ps].memory_bytes;
        if (budget > 0 && bytes_[ps] + b > budget) continue;
        if (used[s.table].count(ps)) continue;
        const int64_t kept = KeptElements(s, ps);
        const double limit = 1.0 + options_.stay_tolerance;
        if (kept > best_kept && (bytes_[ps] + b) / share[ps] <= limit && (cost_[ps] + c) / cost_norm <= limit) {
          best_kept = kept;
          best = ps;
        }
      }
      for (int pass = 0; pass < 2 && best < 0; ++pass) {
        for (int ps : candidates) {
          const int64_t budget = options_.servers[ps].memory_bytes;
          if (budget > 0 && bytes_[ps] + b > budget) continue;
          if (pass == 0 && used[s.table].count(ps)) continue;
          // The larger of the two loads this server would then carry, each
          // relative to its fair share.
          const double score = std::max((bytes_[ps] + b) / share[ps], (cost_[ps] + c) / cost_norm);
          if (score < best_score - 1e-12) {
            best_score = score;
            best = ps;
          }
        }
      }
      if (best < 0) {
        std::string free;
        for (int ps : candidates) {
          const int64_t budget = options_.servers[ps].memory_bytes;
          free += (free.empty() ? "" : ", ") + std::string("ps") + std::to_string(ps) + " " +
                  (budget > 0 ? Human(static_cast<double>(budget - bytes_[ps])) : std::string("unlimited"));
        }
        return Status::ResourceExhausted("table " + t.name + " does not fit: its shard of " +
                                         std::to_string(s.num_rows) + " x " + std::to_string(s.num_cols) + " needs " +
                                         Human(static_cast<double>(b)) + " (the table " +
                                         Human(static_cast<double>(t.num_embeddings) * t.RowBytes()) +
                                         "), free capacity: " + free);
      }
      s.ps = best;
      bytes_[best] += b;
      cost_[best] += c;
      used[s.table].insert(best);
    }
    if (job_.cluster.replicas >= 2 && n >= 2) TESSERA_RETURN_IF_ERROR(PlaceBackups(order, share));
    return plan_;
  }

  // A backup of every shard on another server: the one with the most room
  // left relative to its share (a backup costs memory and push traffic, no
  // lookups), keeping the previous plan's backup where it can.
  Status PlaceBackups(const std::vector<uint32_t>& order, const std::vector<double>& share) {
    for (uint32_t id : order) {
      ShardSpec& s = plan_.shards[id];
      const TableConfig& t = job_.tables[s.table];
      const int64_t b = ShardBytes(t, s);
      std::vector<int> candidates = group_.count(s.table) ? group_[s.table] : AllowedServers(t);
      if (candidates.size() < 2) candidates = AllowedServers(t);
      const int previous = PreviousBackup(s);
      int best = -1;
      double best_score = kInf;
      for (int ps : candidates) {
        if (ps == s.ps) continue;
        const int64_t budget = options_.servers[ps].memory_bytes;
        if (budget > 0 && bytes_[ps] + b > budget) continue;
        double score = (bytes_[ps] + b) / share[ps];
        if (ps == previous && score <= 1.0 + options_.stay_tolerance) score = -1;  // stays
        if (score < best_score - 1e-12) {
          best_score = score;
          best = ps;
        }
      }
      if (best < 0) {
        return Status::ResourceExhausted("table " + t.name + ": no server other than ps" + std::to_string(s.ps) +
                                         " has room for the backup of its shard " + std::to_string(s.shard_id) +
                                         " (cluster.replicas is 2)");
      }
      s.backup_ps = best;
      bytes_[best] += b;
    }
    return Status::OK();
  }

  // The new rank of the server that backed up most of `s` under the
  // previous plan, or -1.
  int PreviousBackup(const ShardSpec& s) const {
    if (options_.previous == nullptr) return -1;
    for (int ps = 0; ps < static_cast<int>(options_.previous_rank.size()); ++ps) {
      const int old_rank = options_.previous_rank[ps];
      if (old_rank < 0) continue;
      for (const ShardSpec& o : options_.previous->shards) {
        if (o.table == s.table && o.backup_ps == old_rank && o.row_offset == s.row_offset &&
            o.num_rows == s.num_rows && o.col_offset == s.col_offset && o.num_cols == s.num_cols) {
          return ps;
        }
      }
    }
    return -1;
  }

  // Elements (rows x columns) of `s` that server `ps` of the new plan holds
  // under the previous plan.
  int64_t KeptElements(const ShardSpec& s, int ps) const {
    if (options_.previous == nullptr || ps >= static_cast<int>(options_.previous_rank.size())) return 0;
    const int old_rank = options_.previous_rank[ps];
    if (old_rank < 0) return 0;
    int64_t kept = 0;
    for (const ShardSpec& o : options_.previous->shards) {
      if (o.table != s.table || o.ps != old_rank) continue;
      const int64_t rows = std::min(o.row_offset + o.num_rows, s.row_offset + s.num_rows) -
                           std::max(o.row_offset, s.row_offset);
      const int64_t cols = std::min<int64_t>(o.col_offset + o.num_cols, s.col_offset + s.num_cols) -
                           std::max<int64_t>(o.col_offset, s.col_offset);
      if (rows > 0 && cols > 0) kept += rows * cols;
    }
    return kept;
  }

  const JobConfig& job_;
  const PlannerOptions& options_;
  int64_t batch_ = 0;
  double total_bytes_ = 0, total_cost_ = 0;
  std::vector<int64_t> bytes_;
  std::vector<double> cost_;
  std::map<int, std::vector<int>> group_;  // table_row_wise table -> its host's servers
  ShardingPlan plan_;
};

}  // namespace

PlannerOptions PlannerOptions::Uniform(int n) {
  PlannerOptions o;
  for (int i = 0; i < n; ++i) o.servers.push_back(ServerInfo{"host" + std::to_string(i), 0});
  return o;
}

StatusOr<ShardingPlan> PlanSharding(const JobConfig& job, const PlannerOptions& options) {
  return Planner(job, options).Run();
}

std::vector<int64_t> BytesPerServer(const JobConfig& job, const ShardingPlan& plan) {
  std::vector<int64_t> bytes(plan.num_ps, 0);
  for (const ShardSpec& s : plan.shards) {
    if (s.ps >= 0 && s.ps < plan.num_ps) bytes[s.ps] += ShardBytes(job.tables[s.table], s);
    // A backup holds the same rows and state.
    if (s.backup_ps >= 0 && s.backup_ps < plan.num_ps) bytes[s.backup_ps] += ShardBytes(job.tables[s.table], s);
  }
  return bytes;
}

std::vector<double> LookupBytesPerServer(const JobConfig& job, const ShardingPlan& plan, int64_t global_batch) {
  std::vector<double> out(plan.num_ps, 0.0);
  for (const ShardSpec& s : plan.shards) {
    if (s.ps >= 0 && s.ps < plan.num_ps) out[s.ps] += ShardLookupBytes(job, job.tables[s.table], s, global_batch);
  }
  return out;
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
    ranks += "]";
    if (tp.type == ShardingType::kDataParallel) ranks = "every trainer";
    out << pad(job.tables[tp.table].name, w) << " | " << pad(ShardingTypeName(tp.type), 14) << " | " << ranks << "\n";
  }
  out << "\n" << pad("param", w) << " | " << pad("shard offsets", 20) << " | " << pad("shard sizes", 20)
      << " | placement\n";
  for (const ShardSpec& s : plan.shards) {
    out << pad(job.tables[s.table].name, w) << " | "
        << pad("[" + std::to_string(s.row_offset) + ", " + std::to_string(s.col_offset) + "]", 20) << " | "
        << pad("[" + std::to_string(s.num_rows) + ", " + std::to_string(s.num_cols) + "]", 20) << " | rank:" << s.ps
        << (s.backup_ps >= 0 ? " backup:" + std::to_string(s.backup_ps) : std::string()) << "\n";
  }
  const auto bytes = BytesPerServer(job, plan);
  const auto cost = LookupBytesPerServer(job, plan, job.training.batch_size * job.cluster.num_trainers);
  out << "\n" << pad("server", 6) << " | " << pad("bytes", 12) << " | lookup bytes/step\n";
  for (size_t ps = 0; ps < bytes.size(); ++ps) {
    out << pad("ps" + std::to_string(ps), 6) << " | " << pad(Human(static_cast<double>(bytes[ps])), 12) << " | "
        << Human(cost[ps]) << "\n";
  }
  return out.str();
}

}  // namespace tessera
