// tessera_master: creates the job's tables, plans their sharding, drives
// training and reports. Exit code 0 when the job finished, 1 when it failed.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/connection_flags.h"
#include "common/flag_help.h"
#include "common/job_keys.h"
#include "common/control_messages.h"
#include "common/messages.h"
#include "common/metrics_http.h"
#include "common/replace_file.h"
#include "common/rpc_client.h"
#include "common/signal_watcher.h"
#include "common/status.h"
#include "master/config_check.h"
#include "master/master.h"
#include "master/planner.h"
#include "master/storage_summary.h"

DEFINE_string(keys, "", "The job's key folder (with --control: the operator's) (scripts/make_job_keys.sh): CURVE on every socket");
DEFINE_bool(insecure, false, "Run without keys: plain TCP, anyone who reaches a port may give orders");
DEFINE_string(make_keys, "", "Write a new job's key pairs into this folder and exit (scripts/make_job_keys.sh)");
DEFINE_string(config, "", "Job config (JSON), see docs/configuration.md");
DEFINE_string(bind, "tcp://127.0.0.1:5555", "Where to listen (port 0: any free port)");
DEFINE_string(advertise_host, "", "Host name servers and trainers reach the master by");
DEFINE_string(endpoint_file, "", "Write the master's address here once listening (for launchers)");
DEFINE_int32(num_ps, 0, "Parameter servers (overrides cluster.num_ps)");
DEFINE_int32(num_trainers, 0, "Trainers (overrides cluster.num_trainers)");
DEFINE_int32(metrics_port, -1, "Serve Prometheus metrics at http://ADDRESS:PORT/metrics (0: any free port; -1: off)");
DEFINE_string(metrics_address, "", "Where the metrics endpoint listens (default: the host of --bind; 0.0.0.0: all)");
DEFINE_int64(register_timeout_ms, 600000, "How long to wait for all members to register");
DEFINE_string(dump_dir, "", "At the end, servers dump shards and trainer 0 its dense model here");
DEFINE_string(summary_file, "", "Write the job summary (JSON) here");
DEFINE_bool(print_plan, false, "Print the sharding plan for --num_ps servers and exit");
DEFINE_string(check_config, "",
              "Validate this job config, print every error in it at once (or what the job would create: tables, "
              "rows, bytes, the sharding plan for --num_ps servers) and exit: 0 valid, 1 not");
DEFINE_bool(resume, false, "Start from the newest complete checkpoint under the config's checkpoint.dir");
DEFINE_bool(recover, false,
            "Take over a running job whose master died (bind the same address): its servers and trainers "
            "re-register and the job goes on from its newest checkpoint (step 0 without one)");
DEFINE_string(control, "",
              "Send a command to a running master (--master) and exit: checkpoint, or remove_ps ID (drain "
              "parameter server ID to the others and shut it down)");
DEFINE_string(master, "", "With --control: the running master's address");
DEFINE_int32(test_crash_in_checkpoint, 0, "Fault injection for tests: die in the middle of the Nth checkpoint");
DEFINE_int32(test_crash_in_migration, 0,
             "Fault injection for tests: die in the middle of the Nth change of servers (after the servers took the "
             "new plan, before the trainers heard of it)");
DEFINE_int64(ps_memory_bytes, 0, "With --print_plan: each server's budget for embedding rows (0: no limit)");
DEFINE_string(ps_hosts, "", "With --print_plan: comma-separated host of each server (default: one host each)");

namespace {

// Turns SIGINT/SIGTERM into an orderly abort (servers are told, exit code 1)
// and SIGUSR1 into a checkpoint request, on a thread of its own.
class SignalHandling {
 public:
  SignalHandling(tessera::SignalWatcher* signals, tessera::Master* master) {
    thread_ = std::thread([this, signals, master] {
      while (!stop_) {
        const int sig = signals->Next(std::chrono::milliseconds(100));
        if (sig == SIGUSR1) {
          tessera::Status st = master->RequestCheckpoint("SIGUSR1");
          if (!st.ok()) LOG(ERROR) << "no checkpoint: " << st;
        } else if (sig > 0) {
          master->RequestAbort(std::string("master received ") + strsignal(sig));
        }
      }
    });
  }
  ~SignalHandling() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("tessera_master --config job.json [--bind tcp://0.0.0.0:5555]");
  tessera::ShowOwnFlagsIfAsked(argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  if (!FLAGS_make_keys.empty()) {
    tessera::Status st = tessera::JobKeys::Write(FLAGS_make_keys);
    if (!st.ok()) {
      LOG(ERROR) << "no keys written: " << st;
      return 1;
    }
    std::cout << "wrote the job's keys to " << FLAGS_make_keys << std::endl;
    return 0;
  }
  if (!FLAGS_control.empty()) {
    // A one-shot client of a running master.
    auto keys = tessera::KeysFromFlags(FLAGS_keys, FLAGS_insecure, tessera::Role::kOperator);
    if (!keys.ok()) {
      LOG(ERROR) << "--control: " << keys.status();
      return 1;
    }
    auto client = tessera::RpcClient::Create(*keys);
    auto peer =
        client.ok() ? (*client)->Connect(FLAGS_master, tessera::Role::kMaster) : tessera::StatusOr<int>(client.status());
    if (!peer.ok()) {
      LOG(ERROR) << "cannot reach the master: " << peer.status();
      return 1;
    }
    tessera::Command command;
    command.command = FLAGS_control;
    if (FLAGS_control == "remove_ps") {
      char* end = nullptr;
      const long id = argc == 2 ? std::strtol(argv[1], &end, 10) : -1;
      if (argc != 2 || end == argv[1] || *end != '\0' || id < 0) {
        LOG(ERROR) << "--control remove_ps takes the server's id: tessera_master --control remove_ps ID --master ADDR";
        return 1;
      }
      command.ps = static_cast<int>(std::min<long>(id, INT32_MAX));
    }
    // The master's own check, here: a mistyped command is named at once,
    // whether or not a master answers.
    if (auto valid = tessera::Command::Parse(command.ToJson()); !valid.ok()) {
      LOG(ERROR) << "--control: " << valid.status();
      return 1;
    }
    auto reply = (*client)->CallSync(*peer, tessera::EncodeJson(tessera::Opcode::kCommand, command.ToJson()),
                                     std::chrono::milliseconds(10000));
    if (!reply.ok()) {
      LOG(ERROR) << FLAGS_control << ": " << reply.status();
      return 1;
    }
    std::cout << FLAGS_control << ": accepted" << std::endl;
    return 0;
  }
  if (!FLAGS_check_config.empty()) {
    return tessera::CheckConfigMain(FLAGS_check_config, FLAGS_num_ps, FLAGS_ps_memory_bytes, std::cout);
  }
  if (FLAGS_config.empty()) {
    LOG(ERROR) << "--config is required";
    return 1;
  }
  auto job = tessera::LoadJobConfig(FLAGS_config);
  if (!job.ok()) {
    LOG(ERROR) << "bad job config: " << job.status();
    return 1;
  }
  std::string note;
  tessera::Status data = tessera::ResolveDataFiles(&*job, &note);
  if (!data.ok()) {
    LOG(ERROR) << "bad job config: " << data;
    return 1;
  }
  if (!note.empty()) {
    // The job trains on other data than its config names: never quietly.
    LOG(WARNING) << note;
    std::cout << "[master] WARNING: " << note << std::endl;
  }
  if (FLAGS_num_ps < 0 || FLAGS_num_trainers < 0) {
    LOG(ERROR) << "--num_ps " << FLAGS_num_ps << " --num_trainers " << FLAGS_num_trainers
               << ": negative (0 takes the config's cluster counts)";
    return 1;
  }
  if (FLAGS_num_ps > 0) job->cluster.num_ps = FLAGS_num_ps;
  if (FLAGS_num_trainers > 0) job->cluster.num_trainers = FLAGS_num_trainers;

  if (FLAGS_print_plan) {
    tessera::PlannerOptions planner = tessera::PlannerOptions::Uniform(job->cluster.num_ps);
    std::stringstream hosts(FLAGS_ps_hosts);
    std::string host;
    for (auto& server : planner.servers) {
      server.memory_bytes = FLAGS_ps_memory_bytes;
      if (std::getline(hosts, host, ',')) server.host = host;
    }
    auto plan = tessera::PlanSharding(*job, planner);
    if (!plan.ok()) {
      LOG(ERROR) << "no plan: " << plan.status();
      return 1;
    }
    std::cout << tessera::FormatPlan(*job, *plan) << plan->ToJson().dump(2) << std::endl;
    return 0;
  }

  // Taken from here on, whichever thread they reach (a library's threads
  // may predate main): they wait for SignalHandling below.
  auto signals = tessera::SignalWatcher::Start({SIGINT, SIGTERM, SIGUSR1});
  if (!signals.ok()) {
    LOG(ERROR) << "master failed to start: " << signals.status();
    return 1;
  }

  auto keys = tessera::KeysFromFlags(FLAGS_keys, FLAGS_insecure, tessera::Role::kMaster);
  if (!keys.ok()) {
    LOG(ERROR) << "master failed to start: " << keys.status();
    return 1;
  }
  if (!*keys) {
    LOG(WARNING) << tessera::kInsecureWarning;
    std::cout << "[master] " << tessera::kInsecureWarning << std::endl;
  }
  // Found out now, not after the job trained (the summary) or while a
  // launcher waits for the address (the endpoint file).
  for (const std::string& file : {FLAGS_summary_file, FLAGS_endpoint_file}) {
    if (file.empty()) continue;
    const std::filesystem::path dir = std::filesystem::path(file).parent_path();
    if (access(dir.empty() ? "." : dir.c_str(), W_OK) != 0) {
      LOG(ERROR) << "master failed to start: " << tessera::ErrnoStatus("cannot write " + file);
      return 1;
    }
  }
  tessera::MasterOptions options;
  options.keys = *keys;
  options.bind_address = FLAGS_bind;
  options.connections = tessera::ConnectionLimitsFromFlags();
  options.advertise_host = FLAGS_advertise_host;
  options.register_timeout_ms = FLAGS_register_timeout_ms;
  options.dump_dir = FLAGS_dump_dir;
  options.live_progress = tessera::ProgressLine::StdoutIsTerminal();
  options.resume = FLAGS_resume;
  options.recover = FLAGS_recover;
  options.crash_in_checkpoint = FLAGS_test_crash_in_checkpoint;
  options.crash_in_migration = FLAGS_test_crash_in_migration;
  options.crash_hook = [] {
    google::FlushLogFiles(google::GLOG_INFO);
    std::_Exit(9);
  };
  auto master = tessera::Master::Start(options, *job);
  if (!master.ok()) {
    LOG(ERROR) << "master failed to start: " << master.status();
    return 1;
  }
  std::cout << "[master] listening on " << (*master)->endpoint()
            << (*keys ? " (CURVE: encrypted, the job's keys only)" : " (INSECURE: plain TCP)") << std::endl;
  if (!FLAGS_endpoint_file.empty()) {
    // Whole or not at all: a launcher reads it as soon as it appears.
    tessera::Status written = tessera::ReplaceFile(FLAGS_endpoint_file, (*master)->endpoint() + "\n");
    if (!written.ok()) {
      std::cout << "[master] JOB FAILED: " << written << std::endl;
      return 1;
    }
  }
  tessera::MetricsRegistry registry("master");
  tessera::Master* m = master->get();
  registry.Add([m](tessera::PrometheusText* out) { m->WriteMetrics(out); });
  auto metrics =
      tessera::MaybeServeMetrics(tessera::MetricsAddress(FLAGS_metrics_address, FLAGS_bind), FLAGS_metrics_port, &registry);
  if (!metrics.ok()) {
    std::cout << "[master] JOB FAILED: " << metrics.status() << std::endl;
    return 1;
  }
  if (*metrics) std::cout << "[master] metrics on " << (*metrics)->url() << std::endl;
  SignalHandling handling(signals->get(), master->get());
  auto summary = (*master)->Run();
  if (!summary.ok()) {
    std::cout << "[master] JOB FAILED: " << summary.status() << std::endl;
    if (!*keys) std::cout << "[master] " << tessera::kInsecureWarning << std::endl;
    if (!FLAGS_summary_file.empty()) {
      std::ofstream(FLAGS_summary_file) << nlohmann::json{{"ok", false}, {"error", summary.status().ToString()}}.dump(2);
    }
    return 1;
  }
  const auto& s = summary->json;
  std::cout << "[master] job '" << s["job"].get<std::string>() << "' finished in " << s["wall_s"].get<double>()
            << " s, " << static_cast<int64_t>(s["examples_per_s"].get<double>()) << " examples/s in all\n";
  for (const auto& t : s["trainers"]) {
    // A trainer that brings its own model reports a loss only if its program says one.
    std::cout << "[master]   trainer " << t.value("rank", -1) << ": " << t.value("steps", 0) << " steps, "
              << (t.contains("final_loss") ? "final loss " + std::to_string(t.value("final_loss", 0.0))
                                          : std::string("no loss reported"))
              << ", " << static_cast<int64_t>(t.value("examples_per_s", 0.0)) << " examples/s\n";
  }
  if (s.contains("storage")) std::cout << tessera::FormatStorageSummary(s["storage"]);
  if (s.contains("eval")) std::cout << "[master]   eval: " << s["eval"].dump() << "\n";
  if (!*keys) std::cout << "[master] " << tessera::kInsecureWarning << "\n";
  std::cout << std::flush;
  if (!FLAGS_summary_file.empty()) {
    std::ofstream out(FLAGS_summary_file);
    out << s.dump(2) << "\n";
    out.close();
    if (!out) {
      LOG(ERROR) << "the job finished, but its summary was not written: "
                 << tessera::ErrnoStatus("writing " + FLAGS_summary_file);
      return 1;
    }
  }
  return 0;
}
