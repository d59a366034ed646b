// tessera_curve_cost_bench: the CPU that libzmq's CURVE adds per byte a job
// moves, alone: no job, no model, just messages of a job's sizes sent over
// 127.0.0.1 from one ZeroMQ context to another (each its own I/O thread, as
// two processes have), once in plain TCP and once with CURVE, rounds
// alternating so both see the same machine.
//
//   tessera_curve_cost_bench [--bytes 344064,1048576] [--mb_per_round 256] [--rounds 5]
//
// --bytes defaults to W2's messages with float32 values (bench/configs/
// w2.json: a trainer step's lookup ids to one server, and a server's pooled
// rows, which a push's gradients match in size). The process's CPU time
// counts both ends: the sender's copy into a message, both I/O threads, the
// receiver. Prints one JSON line per round, size and mode, then per size the
// medians and `curve_extra_cpu_ms_per_mb`: what CURVE adds per MB (10^6
// bytes) moved, sealing and opening together. bench/README.md ("What CURVE
// must cost W2") turns that into the least CURVE can cost a job.
#include <gflags/gflags.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "bench/bench_stats.h"

DEFINE_string(bytes, "344064,1048576", "message sizes, comma-separated (W2's lookup ids and pooled rows)");
DEFINE_int64(mb_per_round, 256, "MB (10^6 bytes) sent per size, mode and round");
DEFINE_int32(rounds, 5, "rounds; each times both modes");

namespace tessera {
namespace {

using bench::Median;
using bench::ProcessCpuSeconds;

struct Keys {
  char server_public[41], server_secret[41], client_public[41], client_secret[41];
};

struct Timing {
  double cpu_ms_per_mb = 0;
  double wall_ms_per_mb = 0;
};

// Sends `count` messages of `bytes` from a PUSH socket in one context to a
// PULL socket in another and waits for the last; `keys` null: plain TCP.
// No ZAP handler: the CURVE server takes any client key. The job's servers
// ask one per connection, once, at the handshake, which is not timed here.
Timing Move(size_t bytes, int64_t count, const Keys* keys) {
  zmq::context_t receiver_context(1), sender_context(1);
  zmq::socket_t pull(receiver_context, zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  if (keys != nullptr) {
    pull.set(zmq::sockopt::curve_server, 1);
    pull.set(zmq::sockopt::curve_secretkey, keys->server_secret);
  }
  pull.bind("tcp://127.0.0.1:*");
  const std::string endpoint = pull.get(zmq::sockopt::last_endpoint);
  zmq::socket_t push(sender_context, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  if (keys != nullptr) {
    push.set(zmq::sockopt::curve_serverkey, keys->server_public);
    push.set(zmq::sockopt::curve_publickey, keys->client_public);
    push.set(zmq::sockopt::curve_secretkey, keys->client_secret);
  }
  push.connect(endpoint);
  // One message through first, so that the handshake is not timed.
  std::vector<char> payload(bytes, '\x5a');
  push.send(zmq::buffer(payload), zmq::send_flags::none);
  zmq::message_t got;
  (void)pull.recv(got);

  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread sender([&] {
    for (int64_t i = 0; i < count; ++i) push.send(zmq::buffer(payload), zmq::send_flags::none);
  });
  for (int64_t i = 0; i < count; ++i) {
    (void)pull.recv(got);
    if (got.size() != bytes) {
      std::cerr << "tessera_curve_cost_bench: got " << got.size() << " bytes, sent " << bytes << "\n";
      std::exit(1);
    }
  }
  sender.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = ProcessCpuSeconds() - cpu0;
  const double mb = static_cast<double>(bytes) * static_cast<double>(count) / 1e6;
  return Timing{1e3 * cpu / mb, 1e3 * wall / mb};
}

int Main() {
  std::vector<size_t> sizes;
  std::stringstream list(FLAGS_bytes);
  for (std::string item; std::getline(list, item, ',');) {
    const long long v = std::atoll(item.c_str());
    if (v <= 0) {
      std::cerr << "tessera_curve_cost_bench: --bytes wants positive sizes, got '" << item << "'\n";
      return 1;
    }
    sizes.push_back(static_cast<size_t>(v));
  }
  if (sizes.empty() || FLAGS_rounds < 1 || FLAGS_mb_per_round < 1) {
    std::cerr << "tessera_curve_cost_bench: --bytes, --rounds and --mb_per_round must be non-empty and positive\n";
    return 1;
  }
  Keys keys;
  if (zmq_curve_keypair(keys.server_public, keys.server_secret) != 0 ||
      zmq_curve_keypair(keys.client_public, keys.client_secret) != 0) {
    std::cerr << "tessera_curve_cost_bench: this libzmq has no CURVE: " << zmq_strerror(zmq_errno()) << "\n";
    return 1;
  }
  const char* names[2] = {"plain", "curve"};
  for (size_t bytes : sizes) {
    const int64_t count = std::max<int64_t>(1, FLAGS_mb_per_round * 1000000 / static_cast<int64_t>(bytes));
    std::vector<double> cpu[2], wall[2];
    for (int round = 0; round < FLAGS_rounds; ++round) {
      for (int m = 0; m < 2; ++m) {
        const Timing t = Move(bytes, count, m == 1 ? &keys : nullptr);
        cpu[m].push_back(t.cpu_ms_per_mb);
        wall[m].push_back(t.wall_ms_per_mb);
        std::printf("{\"round\": %d, \"mode\": \"%s\", \"bytes\": %zu, \"messages\": %lld, \"cpu_ms_per_mb\": %.4f, "
                    "\"wall_ms_per_mb\": %.4f}\n",
                    round, names[m], bytes, static_cast<long long>(count), t.cpu_ms_per_mb, t.wall_ms_per_mb);
      }
    }
    const double pc = Median(cpu[0]), cc = Median(cpu[1]);
    std::printf("{\"summary\": true, \"bytes\": %zu, \"plain_cpu_ms_per_mb\": %.4f, \"curve_cpu_ms_per_mb\": %.4f, "
                "\"curve_extra_cpu_ms_per_mb\": %.4f, \"plain_wall_ms_per_mb\": %.4f, \"curve_wall_ms_per_mb\": %.4f}\n",
                bytes, pc, cc, cc - pc, Median(wall[0]), Median(wall[1]));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return tessera::Main();
}
