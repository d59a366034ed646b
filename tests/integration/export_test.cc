// tessera_export on a real checkpoint: a sync job on 2 servers (row-wise,
// column-wise, table-wise and data-parallel tables, optimizer state of every
// kind) takes checkpoints; a second job resumes the newest and, training no
// further, dumps what its servers and trainer 0 loaded. Every exported row,
// optimizer state and dense parameter must equal that dump bit for bit, rows
// no server stored their initial value; damaged inputs must be clear errors.
// tests/integration/export_check.py then loads the files from Python.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/job_config.h"
#include "common/param_file.h"
#include "kernels/config_conversion.h"
#include "kernels/row_init.h"
#include "master/checkpoint_export.h"
#include "ps/row_layout.h"
#include "tests/integration/dump_reader.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/test_jobs.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a command; its exit code and its output (stdout and stderr).
int RunCommand(const std::string& command, std::string* output) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 4096> buf;
  output->clear();
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) output->append(buf.data(), n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int Export(const std::string& args, std::string* output) {
  return RunCommand(std::string(TESSERA_EXPORT_BIN) + " " + args, output);
}

// The exported tensors, read back from the files model.json names (a reader
// of both formats, from their specs).
struct Tensor {
  std::vector<int64_t> shape;
  std::string bytes;
  const float* f32() const { return reinterpret_cast<const float*>(bytes.data()); }
  const int64_t* i64() const { return reinterpret_cast<const int64_t*>(bytes.data()); }
};

std::map<std::string, Tensor> LoadExport(const std::string& dir) {
  const json desc = json::parse(ReadFile(dir + "/model.json"));
  std::map<std::string, std::string> files;
  std::map<std::string, Tensor> out;
  for (const json& t : desc["tensors"]) {
    const std::string file = t["file"];
    if (!files.count(file)) files[file] = ReadFile(dir + "/" + file);
    const std::string& f = files[file];
    Tensor& x = out[t["name"]];
    x.shape = t["shape"].get<std::vector<int64_t>>();
    if (desc["format"] == "npy") {
      const size_t data = 10 + (static_cast<uint8_t>(f[8]) | static_cast<uint8_t>(f[9]) << 8);
      x.bytes = f.substr(data);
    } else {
      uint64_t n = 0;
      std::memcpy(&n, f.data(), 8);
      const json h = json::parse(f.substr(8, n));
      const auto off = h[t["name"].get<std::string>()]["data_offsets"];
      x.bytes = f.substr(8 + n + off[0].get<size_t>(), off[1].get<size_t>() - off[0].get<size_t>());
    }
  }
  return out;
}

// Job A: 6 steps, checkpoints at steps 2 and 4 under root/ckpt; job B
// resumes the newest and, training no further, dumps what it loaded into
// root/dump. tiered: servers keep rows past a few KiB in RocksDB, so their
// snapshots are RocksDB checkpoints rather than rows.bin files.
void CheckpointAndDump(const std::string& root, const std::string& name, bool tiered) {
  auto ps_args = [&](const std::string& job) {
    return tiered ? std::vector<std::string>{"--rocksdb_path", root + "/rocks_" + job + "{i}", "--host_bytes", "2048"}
                  : std::vector<std::string>{};
  };
  testing::LocalCluster a(name + "_a");
  ASSERT_TRUE(a.StartJob(testing::StatefulSyncJob("export-test", root + "/ckpt", 6, 2), 2, 2, {}, ps_args("a")).ok());
  ASSERT_EQ(a.Wait("master", milliseconds(60000)), 0) << a.Log("master");
  testing::LocalCluster b(name + "_b");
  ASSERT_TRUE(b.StartJob(testing::StatefulSyncJob("export-test", root + "/ckpt", 4, 0), 2, 2,
                         {"--resume", "--dump_dir", root + "/dump"}, ps_args("b"))
                  .ok());
  ASSERT_EQ(b.Wait("master", milliseconds(60000)), 0) << b.Log("master");
}

class ExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("tessera_export_" + std::to_string(getpid()));
    fs::remove_all(root_);
    CheckpointAndDump(root_, "export", false);
    auto job = ParseJobConfigJson(testing::StatefulSyncJob("export-test", "", 4, 0), "");
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = new JobConfig(*job);
  }
  static void TearDownTestSuite() {
    delete job_;
    fs::remove_all(root_);
  }
  void SetUp() override { ASSERT_NE(job_, nullptr) << "the jobs did not run"; }

  static std::string root_;
  static JobConfig* job_;
};
std::string ExportTest::root_;
JobConfig* ExportTest::job_ = nullptr;

bool SameBits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Every row of every table against the dump (its full stored row: weights
// and optimizer state), rows the dump lacks against their initial value.
void CheckTables(const JobConfig& job, const std::string& dump, const std::map<std::string, Tensor>& x,
                 bool materialized_only) {
  auto d = testing::ReadDump(dump, job);
  ASSERT_TRUE(d.ok()) << d.status();
  int64_t untouched = 0;  // rows no server stored: initial values, or left out
  for (const TableConfig& t : job.tables) {
    const std::string p = "tables." + t.name + ".";
    const Tensor& w = x.at(p + "weight");
    const int dim = t.embedding_dim;
    std::vector<int64_t> ids;
    if (materialized_only) {
      const Tensor& idt = x.at(p + "ids");
      ids.assign(idt.i64(), idt.i64() + idt.shape[0]);
      EXPECT_EQ(ids.size(), d->rows[t.name].size()) << t.name;
      untouched += t.num_embeddings - static_cast<int64_t>(ids.size());
    } else {
      ASSERT_EQ(w.shape, (std::vector<int64_t>{t.num_embeddings, dim}));
      for (int64_t r = 0; r < t.num_embeddings; ++r) ids.push_back(r);
    }
    const auto init = kernels::ToRowInitializer(t.initializer, t.seed);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = d->rows[t.name].find(ids[i]);
      std::vector<float> want(dim);
      if (it == d->rows[t.name].end()) {
        ASSERT_FALSE(materialized_only) << t.name << " row " << ids[i] << " exported but not stored";
        kernels::InitRow(init, ids[i], 0, dim, want.data());
        ++untouched;
      } else {
        want = it->second;
      }
      ASSERT_TRUE(SameBits(w.f32() + i * dim, want.data(), dim)) << t.name << " row " << ids[i];
    }
  }
  EXPECT_GT(untouched, 0) << "every row was used: the test must also see rows never stored";
}

// The dump's shard files hold whole stored rows; each must be in the export.
void CheckOptimizerState(const JobConfig& job, const std::string& dump, const std::string& out,
                         const std::map<std::string, Tensor>& x, bool materialized_only) {
  const json desc = json::parse(ReadFile(out + "/model.json"));
  int checked = 0;
  for (const auto& e : fs::directory_iterator(dump)) {
    if (e.path().filename().string().rfind("shard", 0) != 0) continue;
    auto arrays = ReadParamFile(e.path().string());
    ASSERT_TRUE(arrays.ok()) << arrays.status();
    const json meta = json::parse(FindParam(*arrays, "meta")->bytes);
    const TableConfig* t = nullptr;
    for (const TableConfig& c : job.tables) {
      if (c.name == meta["table"]) t = &c;
    }
    ASSERT_NE(t, nullptr);
    const RowLayout layout = RowLayout::For(t->optimizer.type);
    const int col0 = meta["col_offset"], cols = meta["num_cols"], width = meta["row_width"];
    const bool column_split = cols != t->embedding_dim;
    const std::string p = "tables." + t->name + ".";
    std::vector<std::string> blocks, per_row;
    if (t->optimizer.type == "adagrad") blocks = {"sum"};
    if (t->optimizer.type == "adam") blocks = {"exp_avg", "exp_avg_sq"}, per_row = {"step"};
    if (t->optimizer.type == "rowwise_adagrad") per_row = {"sum"};
    const ParamArray* ids = FindParam(*arrays, "ids");
    const ParamArray* rows = FindParam(*arrays, "rows");
    std::vector<int64_t> exported_ids;
    if (materialized_only) {
      const Tensor& idt = x.at(p + "ids");
      exported_ids.assign(idt.i64(), idt.i64() + idt.shape[0]);
    }
    for (size_t i = 0; i < ids->i64.size(); ++i) {
      int64_t r = ids->i64[i];
      if (materialized_only) {
        auto it = std::lower_bound(exported_ids.begin(), exported_ids.end(), r);
        ASSERT_TRUE(it != exported_ids.end() && *it == r) << t->name << " row " << r << " not exported";
        r = it - exported_ids.begin();
      }
      const float* row = rows->f32.data() + i * width;
      ASSERT_TRUE(SameBits(x.at(p + "weight").f32() + r * t->embedding_dim + col0, row, cols));
      for (size_t b = 0; b < blocks.size(); ++b) {
        ASSERT_TRUE(SameBits(x.at(p + blocks[b]).f32() + r * t->embedding_dim + col0, row + (b + 1) * cols, cols))
            << t->name << "." << blocks[b] << " row " << r;
      }
      for (size_t s = 0; s < per_row.size(); ++s) {
        const Tensor& st = x.at(p + per_row[s]);
        const int64_t ranges = st.shape.size() == 2 ? st.shape[1] : 1;
        EXPECT_EQ(ranges > 1, column_split);
        int64_t range = 0;
        for (const json& tj : desc["tables"]) {
          if (tj["name"] != t->name) continue;
          for (size_t k = 0; k < tj["column_ranges"].size(); ++k) {
            if (tj["column_ranges"][k][0] == col0) range = static_cast<int64_t>(k);
          }
        }
        ASSERT_TRUE(SameBits(st.f32() + r * ranges + range, row + (1 + layout.per_column_blocks) * cols + s, 1))
            << t->name << "." << per_row[s] << " row " << r;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

void CheckDense(const std::string& dump, const std::map<std::string, Tensor>& x) {
  auto dense = ReadParamFile(dump + "/dense.params");
  ASSERT_TRUE(dense.ok()) << dense.status();
  for (const ParamArray& a : *dense) {
    ASSERT_TRUE(x.count(a.name)) << a.name;
    const Tensor& t = x.at(a.name);
    ASSERT_EQ(t.bytes.size(), a.f32.size() * 4) << a.name;
    EXPECT_TRUE(SameBits(t.f32(), a.f32.data(), a.f32.size())) << a.name;
    // Biases are [out] (nn.Linear's), the dump's [1 x out].
    if (a.name.ends_with(".bias")) {
      EXPECT_EQ(t.shape, std::vector<int64_t>{a.cols}) << a.name;
    }
  }
}

TEST_F(ExportTest, FullTablesSafetensorsMatchTheDumpBitForBit) {
  const std::string out = root_ + "/full_st";
  std::string output;
  ASSERT_EQ(Export("--checkpoint " + root_ + "/ckpt --format safetensors --out " + out, &output), 0) << output;
  // Given the root, the newest checkpoint, named.
  EXPECT_NE(output.find("ckpt-000000000004 (step 4)"), std::string::npos) << output;
  const auto x = LoadExport(out);
  CheckTables(*job_, root_ + "/dump", x, false);
  CheckOptimizerState(*job_, root_ + "/dump", out, x, false);
  CheckDense(root_ + "/dump", x);
  EXPECT_TRUE(x.count("dense.step"));
  EXPECT_TRUE(x.count("top.0.weight.exp_avg"));
  const json desc = json::parse(ReadFile(out + "/model.json"));
  EXPECT_EQ(desc["step"], 4);
  EXPECT_EQ(desc["tables"][1]["sharding"], "column_wise");
  EXPECT_EQ(desc["tables"][1]["column_ranges"].size(), 2u);
  EXPECT_EQ(desc["tables"][0]["feature_names"][0], "rows_f");
  EXPECT_EQ(desc["features"]["hashing"]["kind"], "identity");

  // The Python side: numpy / safetensors load it (skipped there when absent;
  // TESSERA_EXPORT_PYTHON names another interpreter, a venv's with them).
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/tests/integration/export_check.py";
  const char* python = std::getenv("TESSERA_EXPORT_PYTHON");
  const int rc = RunCommand(std::string(python != nullptr ? python : "/usr/bin/python3") + " " + script + " " + out + " " + root_ + "/dump", &output);
  std::cout << output;
  EXPECT_EQ(rc, 0) << output;
}

TEST_F(ExportTest, MaterializedNpyWithoutOptimizerState) {
  const std::string out = root_ + "/mat_npy";
  std::string output;
  ASSERT_EQ(Export("--checkpoint " + root_ + "/ckpt/ckpt-000000000004 --format npy --materialized_only "
                   "--no_optimizer_state --memory_mb 1 --out " + out,
                   &output),
            0)
      << output;
  const auto x = LoadExport(out);
  CheckTables(*job_, root_ + "/dump", x, true);
  EXPECT_FALSE(x.count("tables.rows.sum"));
  EXPECT_FALSE(x.count("dense.step"));
  EXPECT_FALSE(fs::exists(out + "/optimizer.safetensors"));
  CheckDense(root_ + "/dump", x);
  // Full-table npy with state too (the other combination of the formats).
  ASSERT_EQ(Export("--checkpoint " + root_ + "/ckpt --format npy --materialized_only --out " + out + "2", &output), 0)
      << output;
  CheckOptimizerState(*job_, root_ + "/dump", out + "2", LoadExport(out + "2"), true);
}

// Servers with a RocksDB tier: their snapshots are databases, read in id order.
TEST_F(ExportTest, TieredServersSnapshotsExportTheSame) {
  const std::string root = root_ + "/tiered";
  CheckpointAndDump(root, "export_tiered", true);
  bool rocks = false;
  for (const auto& e : fs::recursive_directory_iterator(root + "/ckpt/ckpt-000000000004")) {
    rocks = rocks || e.path().extension() == ".sst";
  }
  EXPECT_TRUE(rocks) << "no server wrote a RocksDB snapshot";
  std::string output;
  ASSERT_EQ(Export("--checkpoint " + root + "/ckpt --out " + root + "/out", &output), 0) << output;
  const auto x = LoadExport(root + "/out");
  CheckTables(*job_, root + "/dump", x, false);
  CheckOptimizerState(*job_, root + "/dump", root + "/out", x, false);
  CheckDense(root + "/dump", x);
}

// Windows of a row or two (the path a table larger than memory takes) write
// the same bytes as one window for the whole table.
TEST_F(ExportTest, SmallWindowsWriteTheSameFiles) {
  for (const bool materialized : {false, true}) {
    std::string output;
    const std::string whole = root_ + "/whole_" + std::to_string(materialized);
    const std::string small = root_ + "/small_" + std::to_string(materialized);
    ASSERT_EQ(Export("--checkpoint " + root_ + "/ckpt/ckpt-000000000004 --out " + whole +
                         (materialized ? " --materialized_only" : ""),
                     &output),
              0)
        << output;
    ExportOptions o;
    o.checkpoint = root_ + "/ckpt/ckpt-000000000004";
    o.out = small;
    o.materialized_only = materialized;
    o.window_bytes = 100;
    auto r = ExportCheckpoint(o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "model.json"}) {
      EXPECT_TRUE(ReadFile(whole + "/" + f) == ReadFile(small + "/" + f)) << f << " materialized " << materialized;
    }
  }
}

TEST_F(ExportTest, BadInputIsAClearErrorNeverACrash) {
  std::string output;
  const std::string out = root_ + "/bad_out";
  EXPECT_EQ(Export("--checkpoint " + root_ + "/nowhere --out " + out, &output), 1);
  EXPECT_NE(output.find("no folder"), std::string::npos) << output;
  EXPECT_EQ(Export("--checkpoint " + root_ + "/ckpt --format pickle --out " + out, &output), 1);
  EXPECT_NE(output.find("unknown format 'pickle'"), std::string::npos) << output;

  // An OUT with something else in it is refused; an earlier export is
  // replaced only with --overwrite.
  fs::create_directories(root_ + "/busy");
  std::ofstream(root_ + "/busy/notes.txt") << "mine\n";
  EXPECT_EQ(Export("--checkpoint " + root_ + "/ckpt --out " + root_ + "/busy", &output), 1);
  EXPECT_NE(output.find("is not empty"), std::string::npos) << output;
  EXPECT_EQ(Export("--checkpoint " + root_ + "/ckpt --out " + root_ + "/busy --overwrite", &output), 1);
  ASSERT_EQ(Export("--checkpoint " + root_ + "/ckpt --no_optimizer_state --out " + out, &output), 0) << output;
  EXPECT_EQ(Export("--checkpoint " + root_ + "/ckpt --out " + out, &output), 1);
  EXPECT_EQ(Export("--checkpoint " + root_ + "/ckpt --out " + out + " --overwrite", &output), 0) << output;

  // Damage a copy of the checkpoints.
  const std::string copy = root_ + "/damaged";
  fs::copy(root_ + "/ckpt", copy, fs::copy_options::recursive);
  const std::string newest = copy + "/ckpt-000000000004", older = copy + "/ckpt-000000000002";
  std::string rows_file;
  for (const auto& e : fs::recursive_directory_iterator(newest)) {
    if (e.path().filename() == "rows.bin") rows_file = e.path().string();
  }
  ASSERT_FALSE(rows_file.empty());
  const auto size = fs::file_size(rows_file);
  fs::resize_file(rows_file, size - 8);
  EXPECT_EQ(Export("--checkpoint " + newest + " --out " + root_ + "/o1", &output), 1);
  EXPECT_NE(output.find(rows_file + " has " + std::to_string(size - 8) + " bytes"), std::string::npos) << output;
  fs::remove(rows_file);
  EXPECT_EQ(Export("--checkpoint " + newest + " --out " + root_ + "/o2", &output), 1);
  EXPECT_NE(output.find(rows_file + " is missing"), std::string::npos) << output;
  // Given the root, the damaged newest is passed over, and said so.
  ASSERT_EQ(Export("--checkpoint " + copy + " --out " + root_ + "/o3", &output), 0) << output;
  EXPECT_NE(output.find("passed over damaged " + newest), std::string::npos) << output;
  EXPECT_NE(output.find("(step 2)"), std::string::npos) << output;
  fs::resize_file(older + "/manifest.json", 50);
  EXPECT_EQ(Export("--checkpoint " + older + " --out " + root_ + "/o4", &output), 1);
  EXPECT_NE(output.find("manifest"), std::string::npos) << output;
  EXPECT_EQ(Export("--checkpoint " + copy + " --out " + root_ + "/o5", &output), 1);
  EXPECT_NE(output.find("no usable checkpoint"), std::string::npos) << output;
}

}  // namespace
}  // namespace tessera
