// tessera_collective_bench: what sealing the trainers' allreduce costs. The
// CPU collective of a job with keys (the sealed ring, trainer/
// sealed_ring_collective.h) against Gloo's own allreduce (an --insecure
// job's), ranks as threads of this process over 127.0.0.1, the same sizes,
// rounds alternating so both see the same machine.
//
//   tessera_collective_bench [--world 2] [--floats 394753] [--rounds 5] [--reps 40]
//
// --floats defaults to W2's dense gradients (bench/configs/w2.json). Prints
// one JSON line per round and mode, then a summary: medians of ms per
// allreduce (wall) and of CPU ms per allreduce per rank (the process's CPU
// time, Gloo's I/O threads included), and sealed / plain.
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_stats.h"
#include "common/memory_store.h"
#include "trainer/collective.h"

DEFINE_int32(world, 2, "ranks (threads)");
DEFINE_int64(floats, 394753, "floats per allreduce (W2's dense gradients)");
DEFINE_int32(rounds, 5, "rounds; each times both modes");
DEFINE_int32(reps, 40, "allreduces per mode and round");

namespace tessera {
namespace {

using bench::Median;
using bench::ProcessCpuSeconds;

void OnThreads(int ranks, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

struct Timing {
  double wall_ms = 0;  // per allreduce
  double cpu_ms = 0;   // per allreduce and rank
};

int Main() {
  const int world = FLAGS_world;
  const size_t n = static_cast<size_t>(FLAGS_floats);
  MemoryStore store;
  std::vector<std::unique_ptr<Collective>> modes[2];  // [0] plain, [1] sealed
  const char* names[2] = {"plain", "sealed"};
  for (int m = 0; m < 2; ++m) {
    modes[m].resize(static_cast<size_t>(world));
    std::vector<Status> st(static_cast<size_t>(world));
    OnThreads(world, [&](int r) {
      GlooCollectiveOptions o;
      o.rank = r;
      o.world = world;
      o.prefix = std::string("bench/") + names[m];
      o.timeout = std::chrono::milliseconds(60000);
      if (m == 1) o.seal_secret = std::string(32, '\x42');
      auto c = NewGlooCollective(o, &store);
      st[r] = c.status();
      if (c.ok()) modes[m][r] = std::move(c).value();
    });
    for (int r = 0; r < world; ++r) {
      if (!st[r].ok()) {
        std::cerr << "tessera_collective_bench: " << names[m] << " rank " << r << ": " << st[r] << "\n";
        return 1;
      }
    }
  }
  std::vector<std::vector<float>> data(static_cast<size_t>(world), std::vector<float>(n));
  std::vector<double> wall[2], cpu[2];
  for (int round = 0; round < FLAGS_rounds; ++round) {
    for (int m = 0; m < 2; ++m) {
      for (int r = 0; r < world; ++r) std::fill(data[r].begin(), data[r].end(), 1e-3f * static_cast<float>(r + 1));
      const double cpu0 = ProcessCpuSeconds();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Status> st(static_cast<size_t>(world));
      OnThreads(world, [&](int r) {
        for (int i = 0; i < FLAGS_reps && st[r].ok(); ++i) st[r] = modes[m][r]->AllReduceSum(data[r]);
      });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cpu_secs = ProcessCpuSeconds() - cpu0;
      for (int r = 0; r < world; ++r) {
        if (!st[r].ok()) {
          std::cerr << "tessera_collective_bench: " << names[m] << " rank " << r << ": " << st[r] << "\n";
          return 1;
        }
      }
      Timing t{1e3 * secs / FLAGS_reps, 1e3 * cpu_secs / FLAGS_reps / world};
      wall[m].push_back(t.wall_ms);
      cpu[m].push_back(t.cpu_ms);
      std::printf("{\"round\": %d, \"mode\": \"%s\", \"world\": %d, \"floats\": %zu, \"ms_per_allreduce\": %.3f, "
                  "\"cpu_ms_per_allreduce_per_rank\": %.3f}\n",
                  round, names[m], world, n, t.wall_ms, t.cpu_ms);
    }
  }
  const double pw = Median(wall[0]), sw = Median(wall[1]), pc = Median(cpu[0]), sc = Median(cpu[1]);
  std::printf("{\"summary\": true, \"world\": %d, \"floats\": %zu, \"plain_ms\": %.3f, \"sealed_ms\": %.3f, "
              "\"sealed_over_plain_ms\": %.3f, \"plain_cpu_ms_per_rank\": %.3f, \"sealed_cpu_ms_per_rank\": %.3f, "
              "\"sealed_over_plain_cpu\": %.3f}\n",
              world, n, pw, sw, sw / pw, pc, sc, sc / pc);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return tessera::Main();
}
