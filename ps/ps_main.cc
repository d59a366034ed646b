// tessera_ps: a parameter server. Registers with the master, then holds the
// embedding shards the master's plan gives it until the job ends.
#include <malloc.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/connection_flags.h"
#include "common/flag_help.h"
#include "common/metrics_http.h"
#include "common/net_address.h"
#include "common/signal_watcher.h"
#include "kernels/device_choice.h"
#include "ps/parameter_server.h"
#include "ps/store_factory.h"

DEFINE_string(keys, "", "The job's key folder (scripts/make_job_keys.sh): CURVE on every socket");
DEFINE_bool(insecure, false, "Run without keys: plain TCP, anyone who reaches a port may give orders");
DEFINE_string(master, "", "The master's address, tcp://HOST:PORT");
DEFINE_string(bind, "tcp://127.0.0.1:0", "Where to listen (port 0: any free port)");
DEFINE_string(advertise_host, "",
              "Host name or address trainers reach this server by (default: the bind host, or with a wildcard bind "
              "the address of the interface the route to the master goes through)");
DEFINE_int32(threads, 2, "Threads serving lookups and pushes");
DEFINE_string(host_group, "", "Host group for table_row_wise placement (default: this machine's host name)");
DEFINE_int64(memory_bytes, -1,
             "Bytes of embedding rows this server may hold, for the planner (0: no limit; default: 80% of this "
             "machine's memory, or no limit with --rocksdb_path)");
DEFINE_string(rocksdb_path, "", "Keep rows that do not fit in --host_bytes in RocksDB under this folder");
DEFINE_int64(host_bytes, int64_t{1} << 30, "With --rocksdb_path: host memory for rows (split among shards by size)");
DEFINE_int64(rocksdb_reserved_bytes, int64_t{64} << 20,
             "With --rocksdb_path: room to leave free on its disk; writes of rows to RocksDB stop short of it "
             "(the rows stay in memory) and resume once there is room");
DEFINE_bool(rocksdb_checkpoint_hard_links, false,
            "With --rocksdb_path: checkpoints on the same file system hard-link RocksDB's files (fast, but a "
            "damaged block of that disk then damages the live rows and those checkpoints at once) instead of "
            "copying each file once");
DEFINE_int64(write_back_bytes, int64_t{32} << 20,
             "With --rocksdb_path: buffer for dirty rows on their way to RocksDB, written in id order by a thread "
             "of its own (split among shards by size; twice this at most; 0: written at eviction)");
DEFINE_bool(huge_pages, false,
            "Without --rocksdb_path: rows on transparent huge pages (faster random rows once they exist; each new "
            "2 MiB of rows dearer to create, much dearer on VMs that return freed memory to their host)");
DEFINE_string(device, "cpu", "cpu, auto (a GPU if usable, else the CPU) or cuda:N");
DEFINE_int64(gpu_bytes, 0,
             "With a GPU: bytes of GPU memory for the hottest rows (the GPU tier), split among shards by size "
             "(0: half the GPU's free memory at start)");
DEFINE_int64(gpu_tier_min_rows, 16384,
             "The GPU tier gives each shard at least this many rows (or all its rows), whatever its share of "
             "--gpu_bytes; a request's distinct rows of a shard must fit at once");
DEFINE_bool(gpu_tier_on_host, false,
            "Testing: run the GPU tier's logic with its rows in host memory (needs --gpu_bytes), no GPU needed");
DEFINE_int32(metrics_port, -1, "Serve Prometheus metrics at http://ADDRESS:PORT/metrics (0: any free port; -1: off)");
DEFINE_string(metrics_address, "", "Where the metrics endpoint listens (default: the host of --bind; 0.0.0.0: all)");
DEFINE_int64(register_timeout_ms, 120000, "How long to keep trying to reach the master at start");
DEFINE_int64(test_data_loss_at_lookup, 0,
             "Fault injection for tests: the Nth lookup finds its rows damaged, as a checksum mismatch of the "
             "RocksDB tier would report it; the server then leaves the job");
DEFINE_string(test_crash_on, "",
              "Fault injection for tests: OP:N ends the process (exit 9) when the Nth request OP "
              "(create_shards, snapshot, migrate) arrives, before it is handled");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("tessera_ps --master tcp://HOST:PORT [--bind tcp://0.0.0.0:0 --advertise_host HOST]");
  tessera::ShowOwnFlagsIfAsked(argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // Request and gradient buffers (a few MB) come from malloc's heap and are
  // reused: were they over the mmap threshold, each would be a fresh mmap,
  // zeroed page by page and unmapped after the reply (a third of the
  // server's CPU on W2 at 128 KiB). malloc's own threshold starts at 128 KiB
  // and rises only once a large mmapped block happens to be freed, so the
  // server sets it where that rise would end (32 MiB; the heap is trimmed
  // only past twice that). Row slabs come from ps/page_memory.h, so dropped
  // shards return their rows at once; one malloc arena, so that
  // ReturnFreedHeapMemory (malloc_trim) can return the rest too: it cannot
  // shrink the heaps of per-thread arenas.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_ARENA_MAX, 1);
  // Taken from the start, whichever thread they reach (a library's threads
  // may predate main): they wait for the watcher below.
  auto signals = tessera::SignalWatcher::Start({SIGTERM, SIGINT});
  if (!signals.ok()) {
    LOG(ERROR) << "parameter server failed to start: " << signals.status();
    return 1;
  }

  auto device = tessera::kernels::ChooseDevice(FLAGS_device, "parameter server");
  if (!device.ok()) {
    LOG(ERROR) << "parameter server failed to start: " << device.status();
    return 1;
  }
  tessera::ParameterServerOptions options;
  tessera::Status gpu =
      tessera::ConfigureGpuTier(FLAGS_device, *device, FLAGS_gpu_bytes, FLAGS_gpu_tier_on_host, &options.storage);
  options.storage.gpu_min_slots = FLAGS_gpu_tier_min_rows;
  if (!gpu.ok()) {
    LOG(ERROR) << "parameter server failed to start: " << gpu;
    return 1;
  }
  auto keys = tessera::KeysFromFlags(FLAGS_keys, FLAGS_insecure, tessera::Role::kPs);
  if (!keys.ok()) {
    LOG(ERROR) << "parameter server failed to start: " << keys.status();
    return 1;
  }
  if (!*keys) LOG(WARNING) << tessera::kInsecureWarning;
  options.keys = *keys;
  options.master = FLAGS_master;
  options.bind_address = FLAGS_bind;
  options.connections = tessera::ConnectionLimitsFromFlags();
  // Given, the bind host, or (a wildcard bind) the interface toward the master.
  auto advertise = tessera::AdvertisedHost(FLAGS_advertise_host, FLAGS_bind, FLAGS_master);
  if (!advertise.ok()) {
    LOG(ERROR) << "parameter server failed to start: " << advertise.status();
    return 1;
  }
  options.advertise_host = *advertise;
  options.threads = FLAGS_threads;
  options.register_timeout_ms = FLAGS_register_timeout_ms;
  options.host_group = FLAGS_host_group;
  options.storage.rocksdb_path = FLAGS_rocksdb_path;
  if (FLAGS_host_bytes < 0) {
    LOG(ERROR) << "parameter server failed to start: --host_bytes " << FLAGS_host_bytes << " is negative";
    return 1;
  }
  options.storage.host_bytes = FLAGS_host_bytes;
  options.storage.huge_pages = FLAGS_huge_pages;
  if (FLAGS_write_back_bytes < 0) {
    LOG(ERROR) << "parameter server failed to start: --write_back_bytes " << FLAGS_write_back_bytes << " is negative";
    return 1;
  }
  options.storage.write_back_bytes = FLAGS_write_back_bytes;
  if (FLAGS_rocksdb_reserved_bytes < 0) {
    LOG(ERROR) << "parameter server failed to start: --rocksdb_reserved_bytes " << FLAGS_rocksdb_reserved_bytes
               << " is negative";
    return 1;
  }
  options.storage.rocksdb_reserved_bytes = FLAGS_rocksdb_reserved_bytes;
  options.storage.rocksdb_checkpoint_hard_links = FLAGS_rocksdb_checkpoint_hard_links;
  // After the storage options: a server over RocksDB has no default limit.
  options.memory_bytes = FLAGS_memory_bytes >= 0 ? FLAGS_memory_bytes : tessera::DefaultMemoryBudget(options.storage);
  options.test_data_loss_at_lookup = FLAGS_test_data_loss_at_lookup;
  if (!FLAGS_test_crash_on.empty()) {
    const size_t colon = FLAGS_test_crash_on.find(':');
    const std::string name = FLAGS_test_crash_on.substr(0, colon);
    const int nth = colon == std::string::npos ? 0 : std::atoi(FLAGS_test_crash_on.c_str() + colon + 1);
    const tessera::Opcode op = name == "create_shards" ? tessera::Opcode::kCreateShards
                               : name == "migrate"     ? tessera::Opcode::kMigrate
                                                       : tessera::Opcode::kSnapshot;
    if ((name != "create_shards" && name != "snapshot" && name != "migrate") || nth < 1) {
      LOG(ERROR) << "--test_crash_on: expected create_shards:N, snapshot:N or migrate:N, not '" << FLAGS_test_crash_on
                 << "'";
      return 1;
    }
    auto seen = std::make_shared<std::atomic<int>>(0);
    options.before_control = [op, nth, seen, name](tessera::Opcode got) {
      if (got != op || ++*seen != nth) return;
      LOG(ERROR) << "--test_crash_on " << name << ":" << nth << ": exiting";
      google::FlushLogFiles(google::GLOG_INFO);
      std::_Exit(9);
    };
  }
  // Before registering: a port in use fails the start, not a joined job.
  tessera::MetricsRegistry registry("ps");
  auto metrics =
      tessera::MaybeServeMetrics(tessera::MetricsAddress(FLAGS_metrics_address, FLAGS_bind), FLAGS_metrics_port, &registry);
  if (!metrics.ok()) {
    LOG(ERROR) << "parameter server failed to start: " << metrics.status();
    return 1;
  }
  auto ps = tessera::ParameterServer::Start(options);
  if (!ps.ok()) {
    LOG(ERROR) << "parameter server failed to start: " << ps.status();
    return 1;
  }
  tessera::ParameterServer* ps_server = ps->get();
  registry.Add([ps_server](tessera::PrometheusText* out) { ps_server->WriteMetrics(out); });
  // SIGTERM (or SIGINT) drains this server's rows to the others through the
  // master; the master then shuts it down and it exits 0. Where the master
  // cannot (the last server) it stops at once, exit 1.
  std::atomic<bool> done{false};
  tessera::ParameterServer* server = ps->get();
  tessera::SignalWatcher* watched = signals->get();
  std::thread watcher([&done, server, watched] {
    bool asked = false;
    while (!done) {
      const int sig = watched->Next(std::chrono::milliseconds(100));
      if (sig <= 0) continue;
      if (asked) {
        server->Stop(tessera::Status::Cancelled(std::string("a second ") + strsignal(sig) + " while draining"));
        continue;
      }
      asked = true;
      LOG(INFO) << strsignal(sig) << ": asking the master to drain this server";
      tessera::Status st = server->Leave();
      if (!st.ok()) {
        LOG(ERROR) << "the master cannot drain this server: " << st;
        server->Stop(st.WithContext(std::string("stopping on ") + strsignal(sig) + " without draining"));
      }
    }
  });
  tessera::Status st = (*ps)->Run();
  metrics->reset();  // no scrape may reach the server once it is gone
  done = true;
  watcher.join();
  if (st.code() == tessera::StatusCode::kAborted) {
    LOG(ERROR) << "job aborted: " << st.message();
    return 2;
  }
  if (!st.ok()) {
    LOG(ERROR) << "parameter server stopped: " << st;
    return 1;
  }
  return 0;
}
