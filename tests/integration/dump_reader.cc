#include "tests/integration/dump_reader.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kernels/config_conversion.h"

namespace tessera::testing {

using nlohmann::json;

StatusOr<Dump> ReadDump(const std::string& dir, const JobConfig& job) {
  Dump d;
  auto table_index = [&](const std::string& name) {
    for (size_t t = 0; t < job.tables.size(); ++t) {
      if (job.tables[t].name == name) return static_cast<int>(t);
    }
    return -1;
  };
  for (const TableConfig& t : job.tables) {
    d.initial[t.name] = {kernels::ToRowInitializer(t.initializer, t.seed), t.embedding_dim};
  }
  std::error_code ec;
  std::filesystem::directory_iterator entries(dir, ec);
  if (ec) return Status::NotFound("cannot read the dump folder " + dir + ": " + ec.message());
  for (const auto& entry : entries) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard", 0) != 0) continue;
    TESSERA_ASSIGN_OR_RETURN(auto arrays, ReadParamFile(entry.path().string()));
    const json meta = json::parse(FindParam(arrays, "meta")->bytes);
    const std::string table = meta["table"];
    const int t = table_index(table);
    if (t < 0) return Status::DataLoss("dump names unknown table " + table);
    const int col_offset = meta["col_offset"], num_cols = meta["num_cols"], width = meta["row_width"];
    const ParamArray* ids = FindParam(arrays, "ids");
    const ParamArray* rows = FindParam(arrays, "rows");
    for (size_t i = 0; i < ids->i64.size(); ++i) {
      auto& row = d.rows[table][ids->i64[i]];
      row.resize(job.tables[t].embedding_dim, NAN);
      for (int c = 0; c < num_cols; ++c) row[col_offset + c] = rows->f32[i * width + c];
    }
  }
  if (std::filesystem::exists(dir + "/dp.params")) {
    TESSERA_ASSIGN_OR_RETURN(auto dp, ReadParamFile(dir + "/dp.params"));
    for (const ParamArray& a : dp) {
      const std::string table = a.name.substr(3, a.name.size() - 3 - 5);  // "dp.<table>.rows"
      const int t = table_index(table);
      if (t < 0) return Status::DataLoss("dump names unknown table " + table);
      const int dim = job.tables[t].embedding_dim;
      for (int64_t row = 0; row < a.rows; ++row) {
        d.rows[table][row].assign(a.f32.begin() + row * a.cols, a.f32.begin() + row * a.cols + dim);
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(d.dense, ReadParamFile(dir + "/dense.params"));
  return d;
}

double MaxDifference(const Dump& a, const Dump& b, std::string* where) {
  double worst = 0;
  auto note = [&](double diff, const std::string& what) {
    if (!(diff <= worst)) {  // NaN counts as worst
      worst = std::isnan(diff) ? INFINITY : diff;
      *where = what;
    }
  };
  // Every row either dump holds, against the other's row or, where that
  // dump lacks it, its initial value.
  auto compare = [&](const Dump& x, const Dump& y, bool both_ways) {
    for (const auto& [table, rows] : x.rows) {
      auto other = y.rows.find(table);
      auto init = x.initial.find(table);
      for (const auto& [id, row] : rows) {
        const std::vector<float>* o = nullptr;
        std::vector<float> initial;
        if (other != y.rows.end()) {
          auto it = other->second.find(id);
          if (it != other->second.end()) o = &it->second;
        }
        if (o != nullptr && !both_ways) continue;  // compared from the other side
        if (o == nullptr) {
          if (init == x.initial.end()) {
            note(INFINITY, table + " row " + std::to_string(id) + " missing from one dump (table unknown)");
            continue;
          }
          initial.resize(init->second.second);
          kernels::InitRow(init->second.first, id, 0, init->second.second, initial.data());
          o = &initial;
        }
        if (o->size() != row.size()) {
          note(INFINITY, table + " row " + std::to_string(id) + " has another width in the other dump");
          continue;
        }
        for (size_t c = 0; c < row.size(); ++c) {
          note(std::fabs(row[c] - (*o)[c]), table + " row " + std::to_string(id) + " col " + std::to_string(c) +
                                                (o == &initial ? " (absent from one dump: its initial value)" : ""));
        }
      }
    }
  };
  compare(a, b, true);
  compare(b, a, false);
  for (const ParamArray& p : a.dense) {
    const ParamArray* q = FindParam(b.dense, p.name);
    if (q == nullptr || q->f32.size() != p.f32.size()) {
      note(INFINITY, "dense " + p.name + " missing");
      continue;
    }
    for (size_t k = 0; k < p.f32.size(); ++k) note(std::fabs(p.f32[k] - q->f32[k]), "dense " + p.name);
  }
  return worst;
}

}  // namespace tessera::testing
