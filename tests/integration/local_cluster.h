// Starts real Tessera processes on 127.0.0.1 for integration tests and ends
// every one of them (by pid) when the test is over, whatever happened.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera::testing {

class LocalCluster {
 public:
  // Creates a fresh work directory for logs, metrics and dumps.
  explicit LocalCluster(const std::string& name);
  ~LocalCluster();  // SIGKILLs and reaps whatever still runs

  const std::string& dir() const { return dir_; }
  // The job's keys (written by the constructor), which every process started
  // here is given unless its arguments have --insecure or --keys.
  std::string keys_dir() const { return dir_ + "/keys"; }

  // Writes `config` to dir/job.json and starts the master on a free port;
  // returns once it listens.
  Status StartMaster(const nlohmann::json& config, const std::vector<std::string>& extra_args = {});
  // Starts another master on the first one's address and config (after that
  // one died), named `name` (its log name.log): with --recover it takes the
  // job over.
  Status RestartMaster(const std::string& name, const std::vector<std::string>& extra_args);
  // {i} in an argument becomes the server's index (a folder per server).
  Status StartPs(int index, const std::vector<std::string>& extra_args = {});
  // `name` names the process and its log (default "trainer<rank>"; another
  // for a replacement); the metrics always go to trainer<rank>.jsonl.
  Status StartTrainer(int rank, int world, const std::string& name = "",
                      const std::vector<std::string>& extra_args = {});
  // The whole job: master, num_ps servers, num_trainers trainers.
  Status StartJob(const nlohmann::json& config, int num_ps, int num_trainers,
                  const std::vector<std::string>& master_args = {}, const std::vector<std::string>& ps_args = {});

  // Exit code of `name` ("master", "ps0", "trainer1"), waiting up to
  // `timeout`; -1 if it is still running then, 128+N if killed by signal N.
  int Wait(const std::string& name, std::chrono::milliseconds timeout);
  // Runs `tessera_master --control COMMAND ARGS... --master <the master>` to
  // its end (10 s at most); its exit code, and its output in *output.
  int Control(const std::vector<std::string>& command, std::string* output = nullptr);
  // Waits until `name`'s log contains `text`; false after `timeout`.
  bool WaitForLog(const std::string& name, const std::string& text, std::chrono::milliseconds timeout);
  // Waits until trainer `rank` has written metrics of `steps` steps.
  bool WaitForSteps(int rank, size_t steps, std::chrono::milliseconds timeout);
  void Kill(const std::string& name, int signal);
  // How many files `name` holds open now whose /proc link contains `kind`
  // ("eventfd": one per ZeroMQ socket; "": all); -1 if it does not run.
  int OpenFiles(const std::string& name, const std::string& kind = "") const;
  bool Running(const std::string& name);

  std::string Log(const std::string& name) const;
  // Per-step metrics of a trainer (its JSON lines).
  std::vector<nlohmann::json> Metrics(int rank) const;

 private:
  // To stderr: the end of every process's log, and with gdb, the stacks of
  // those still running.
  void ReportForFailure();
  Status Spawn(const std::string& name, const std::string& binary, const std::vector<std::string>& args);

  std::string dir_;
  std::string master_;
  std::map<std::string, pid_t> pids_;
  std::map<std::string, int> exit_codes_;
  int controls_ = 0;
};

}  // namespace tessera::testing
