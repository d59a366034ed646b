#include "tests/integration/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <glog/logging.h>
#include <gtest/gtest.h>

#include "common/job_keys.h"

extern char** environ;

namespace tessera::testing {

using std::chrono::milliseconds;

LocalCluster::LocalCluster(const std::string& name) {
  dir_ = (std::filesystem::temp_directory_path() /
          ("tessera_" + name + "_" + std::to_string(getpid()) + "_" +
           std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())))
             .string();
  std::filesystem::create_directories(dir_);
  // Jobs run as in production: with keys.
  Status keys = JobKeys::Write(keys_dir());
  CHECK(keys.ok()) << keys;
}

LocalCluster::~LocalCluster() {
  // A failed test tells what each process was doing: the end of every log,
  // and the threads' stacks of whatever still runs (a hang shows where).
  if (::testing::Test::HasFailure()) ReportForFailure();
  for (auto& [name, pid] : pids_) {
    if (exit_codes_.count(name)) continue;
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
  }
  // Logs of a failed test stay for a look; a passed test leaves nothing.
  if (!::testing::Test::HasFailure() && getenv("TESSERA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

namespace {

std::string LastLines(const std::string& text, size_t lines) {
  size_t at = text.size();
  for (size_t n = 0; n <= lines && at > 0; ++n) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) return text;
  }
  return text.substr(at + 1);
}

// Output of a shell command (empty where it cannot run).
std::string CommandOutput(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  pclose(pipe);
  return out;
}

}  // namespace

void LocalCluster::ReportForFailure() {
  const bool have_gdb = system("command -v gdb >/dev/null 2>&1") == 0;
  for (const auto& [name, pid] : pids_) {
    const bool running = Running(name);
    std::cerr << "==== " << name << " (pid " << pid << ", "
              << (running ? std::string("still running") : "exit " + std::to_string(exit_codes_[name]))
              << "): the end of " << dir_ << "/" << name << ".log\n"
              << LastLines(Log(name), 40) << "\n";
    if (running && have_gdb) {
      std::cerr << "==== " << name << ": threads\n"
                << CommandOutput("timeout 60 gdb -p " + std::to_string(pid) +
                                 " -batch -nx -ex 'set pagination off' -ex 'thread apply all bt' 2>&1 | "
                                 "grep -E '^(Thread|#)'")
                << "\n";
    }
  }
  if (!have_gdb) std::cerr << "(no gdb here: no stacks of the processes that still ran)\n";
}

Status LocalCluster::Spawn(const std::string& name, const std::string& binary, const std::vector<std::string>& args) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = dir_ + "/" + name + ".log";
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  // Every process gets the job's keys, unless the test chose (--insecure, or
  // other keys).
  auto chose = [](const std::string& a) { return a.rfind("--insecure", 0) == 0 || a.rfind("--keys", 0) == 0; };
  if (std::none_of(args.begin(), args.end(), chose)) {
    all.push_back("--keys");
    all.push_back(keys_dir());
  }
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Status::Internal("cannot start " + binary + ": " + strerror(rc));
  pids_[name] = pid;
  return Status::OK();
}

Status LocalCluster::StartMaster(const nlohmann::json& config, const std::vector<std::string>& extra_args) {
  const std::string config_path = dir_ + "/job.json";
  std::ofstream(config_path) << config.dump(2);
  const std::string endpoint_file = dir_ + "/master.endpoint";
  std::vector<std::string> args = {"--config",        config_path,   "--bind",        "tcp://127.0.0.1:0",
                                   "--endpoint_file", endpoint_file, "--summary_file", dir_ + "/summary.json"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  TESSERA_RETURN_IF_ERROR(Spawn("master", TESSERA_MASTER_BIN, args));
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(endpoint_file);
    if (in >> master_ && !master_.empty()) return Status::OK();
    if (!Running("master")) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return Status::Unavailable("the master did not start:\n" + Log("master"));
}

Status LocalCluster::StartPs(int index, const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {"--master", master_};
  for (std::string a : extra_args) {
    const size_t at = a.find("{i}");
    if (at != std::string::npos) a.replace(at, 3, std::to_string(index));
    args.push_back(a);
  }
  return Spawn("ps" + std::to_string(index), TESSERA_PS_BIN, args);
}

Status LocalCluster::RestartMaster(const std::string& name, const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {"--config", dir_ + "/job.json", "--bind", master_,
                                   "--summary_file", dir_ + "/summary.json"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return Spawn(name, TESSERA_MASTER_BIN, args);
}

Status LocalCluster::StartTrainer(int rank, int world, const std::string& name,
                                  const std::vector<std::string>& extra_args) {
  const std::string trainer = "trainer" + std::to_string(rank);
  std::vector<std::string> args = {"--master", master_, "--rank", std::to_string(rank), "--world",
                                   std::to_string(world), "--metrics_file", dir_ + "/" + trainer + ".jsonl"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return Spawn(name.empty() ? trainer : name, TESSERA_TRAINER_BIN, args);
}

Status LocalCluster::StartJob(const nlohmann::json& config, int num_ps, int num_trainers,
                              const std::vector<std::string>& master_args, const std::vector<std::string>& ps_args) {
  // The job's counts are the ones started here, whatever the config said.
  nlohmann::json job = config;
  job["cluster"]["num_ps"] = num_ps;
  job["cluster"]["num_trainers"] = num_trainers;
  TESSERA_RETURN_IF_ERROR(StartMaster(job, master_args));
  for (int i = 0; i < num_ps; ++i) TESSERA_RETURN_IF_ERROR(StartPs(i, ps_args));
  for (int r = 0; r < num_trainers; ++r) TESSERA_RETURN_IF_ERROR(StartTrainer(r, num_trainers));
  return Status::OK();
}

int LocalCluster::Wait(const std::string& name, milliseconds timeout) {
  auto code = exit_codes_.find(name);
  if (code != exit_codes_.end()) return code->second;
  auto it = pids_.find(name);
  if (it == pids_.end()) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(it->second, &status, WNOHANG);
    if (r == it->second) {
      const int c = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      exit_codes_[name] = c;
      return c;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

int LocalCluster::Control(const std::vector<std::string>& command, std::string* output) {
  const std::string name = "control" + std::to_string(controls_++);
  std::vector<std::string> args = {"--control"};
  args.insert(args.end(), command.begin(), command.end());
  args.push_back("--master");
  args.push_back(master_);
  if (!Spawn(name, TESSERA_MASTER_BIN, args).ok()) return -1;
  const int code = Wait(name, milliseconds(10000));
  if (code == -1) Kill(name, SIGKILL);
  if (output != nullptr) *output = Log(name);
  return code;
}

bool LocalCluster::WaitForLog(const std::string& name, const std::string& text, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Log(name).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

bool LocalCluster::WaitForSteps(int rank, size_t steps, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Metrics(rank).size() < steps) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

bool LocalCluster::Running(const std::string& name) { return Wait(name, milliseconds(0)) == -1; }

void LocalCluster::Kill(const std::string& name, int signal) {
  auto it = pids_.find(name);
  if (it != pids_.end() && !exit_codes_.count(name)) kill(it->second, signal);
}

int LocalCluster::OpenFiles(const std::string& name, const std::string& kind) const {
  auto it = pids_.find(name);
  if (it == pids_.end() || exit_codes_.count(name)) return -1;
  std::error_code ec;
  int n = 0;
  for (auto e = std::filesystem::directory_iterator("/proc/" + std::to_string(it->second) + "/fd", ec);
       !ec && e != std::filesystem::directory_iterator(); e.increment(ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(e->path(), link_ec).string();
    if (!link_ec && target.find(kind) != std::string::npos) ++n;
  }
  return ec ? -1 : n;
}

std::string LocalCluster::Log(const std::string& name) const {
  std::ifstream in(dir_ + "/" + name + ".log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<nlohmann::json> LocalCluster::Metrics(int rank) const {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir_ + "/trainer" + std::to_string(rank) + ".jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

}  // namespace tessera::testing
