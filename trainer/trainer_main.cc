// tessera_trainer: one trainer. Registers with the master, trains its share
// of every global batch, reports. Exit code 0 when the job finished.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/flag_help.h"
#include "common/metrics_http.h"
#include "common/net_address.h"
#include "kernels/blas_core.h"
#include "kernels/device_choice.h"
#include "trainer/trainer.h"

DEFINE_string(keys, "", "The job's key folder (scripts/make_job_keys.sh): CURVE on every socket");
DEFINE_bool(insecure, false, "Run without keys: plain TCP, anyone who reaches a port may give orders");
DEFINE_string(master, "", "The master's address, tcp://HOST:PORT");
DEFINE_int32(rank, 0, "This trainer's rank in [0, world)");
DEFINE_int32(world, 1, "Number of trainers in the job");
DEFINE_string(metrics_file, "", "Write one JSON line of metrics per step here");
DEFINE_int32(metrics_port, -1, "Serve Prometheus metrics at http://ADDRESS:PORT/metrics (0: any free port; -1: off)");
DEFINE_string(metrics_address, "127.0.0.1", "Where the metrics endpoint listens (0.0.0.0: every interface)");
DEFINE_string(host, "",
              "Address of this trainer for the collective (its peers connect here; default: the address of the "
              "interface the route to the master goes through)");
DEFINE_int32(blas_threads, 1, "BLAS threads for the dense layers");
DEFINE_bool(print_blas_core, false,
            "Print the OpenBLAS kernels (core) the dense layers run on here, and exit (scripts/launch_local.sh gives "
            "PyTorch trainers the same)");
DEFINE_string(device, "cpu", "cpu, auto (a GPU if usable, else the CPU) or cuda:N");
DEFINE_int64(register_timeout_ms, 120000, "How long to keep trying to reach the master at start");
DEFINE_int64(test_stall_at_step, -1, "Fault injection for tests: stop training at this step, heartbeats going on");
DEFINE_int32(test_crash_in_checkpoint, 0,
             "Fault injection for tests: die at the Nth checkpoint barrier, after arriving, while the master snapshots");

int main(int argc, char** argv) {
  // May run this program again, on OpenBLAS kernels that suit the CPU.
  const std::string blas_note = tessera::kernels::RunOnBetterBlasCore(argv);
  gflags::SetUsageMessage("tessera_trainer --master tcp://HOST:PORT --rank R --world W [--metrics_file F]");
  tessera::ShowOwnFlagsIfAsked(argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_print_blas_core) {
    std::printf("%s\n", tessera::kernels::BlasCoreName().c_str());
    return 0;
  }
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (!blas_note.empty()) LOG(WARNING) << blas_note;

  auto device = tessera::kernels::ChooseDevice(FLAGS_device, "trainer", tessera::Trainer::GpuPathMissing());
  if (!device.ok()) {
    LOG(ERROR) << "trainer failed to start: " << device.status();
    return 1;
  }

  auto keys = tessera::KeysFromFlags(FLAGS_keys, FLAGS_insecure, tessera::Role::kTrainer);
  if (!keys.ok()) {
    LOG(ERROR) << "trainer failed to start: " << keys.status();
    return 1;
  }
  if (!*keys) LOG(WARNING) << tessera::kInsecureWarning;
  tessera::TrainerOptions options;
  options.member.keys = *keys;
  options.member.master = FLAGS_master;
  options.member.rank = FLAGS_rank;
  options.member.world = FLAGS_world;
  options.metrics_file = FLAGS_metrics_file;
  auto host = FLAGS_master.empty() ? tessera::StatusOr<std::string>(FLAGS_host)
                                   : tessera::AdvertisedHost(FLAGS_host, "", FLAGS_master);
  if (!host.ok()) {
    LOG(ERROR) << "trainer failed to start: " << host.status();
    return 1;
  }
  options.host = *host;
  options.blas_threads = FLAGS_blas_threads;
  options.device = *device;
  options.member.register_timeout_ms = FLAGS_register_timeout_ms;
  options.test_stall_at_step = FLAGS_test_stall_at_step;
  options.test_crash_in_checkpoint = FLAGS_test_crash_in_checkpoint;
  options.crash_hook = [] {
    google::FlushLogFiles(google::GLOG_INFO);
    std::_Exit(9);
  };
  // The job is over for this trainer: Run() returns once its thread is free;
  // should that thread be stuck with a dead peer (a collective has no way to
  // be interrupted), the process ends anyway after a grace period.
  options.member.on_fatal = [](const tessera::Status& why) {
    const int code = why.code() == tessera::StatusCode::kAborted ? 2 : 1;
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      LOG(ERROR) << "trainer " << FLAGS_rank << ": still busy 3 s after the job ended for it; exiting";
      google::FlushLogFiles(google::GLOG_INFO);
      std::_Exit(code);
    }).detach();
  };
  // Before registering: a port in use fails the start, not a joined job.
  tessera::MetricsRegistry registry("trainer");
  auto metrics = tessera::MaybeServeMetrics(FLAGS_metrics_address, FLAGS_metrics_port, &registry);
  if (!metrics.ok()) {
    LOG(ERROR) << "trainer failed to start: " << metrics.status();
    return 1;
  }
  auto trainer = tessera::Trainer::Start(options);
  if (!trainer.ok()) {
    LOG(ERROR) << "trainer failed to start: " << trainer.status();
    return 1;
  }
  tessera::Trainer* t = trainer->get();
  registry.Add([t](tessera::PrometheusText* out) { t->WriteMetrics(out); });
  tessera::Status st = (*trainer)->Run();
  metrics->reset();  // no scrape may reach the trainer once it is gone
  if (st.code() == tessera::StatusCode::kAborted) {
    LOG(ERROR) << "trainer " << FLAGS_rank << ": " << st;
    return 2;
  }
  if (!st.ok()) {
    LOG(ERROR) << "trainer " << FLAGS_rank << " failed: " << st;
    return 1;
  }
  LOG(INFO) << "trainer " << FLAGS_rank << " done";
  return 0;
}
