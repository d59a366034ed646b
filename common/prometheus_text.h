// What every role serves on --metrics_port: Prometheus' text exposition
// format (version 0.0.4), built from figures the roles already keep.
//
// Roles do not count twice. A scrape runs the role's collectors, each of
// which reads its own state (under that state's lock, so the figures of one
// collector are from one moment) and writes samples here; the only metric
// kept for the scrape alone is the latency histogram, which no other figure
// of a role holds.
//
// Names follow Prometheus' conventions: tessera_<role>_<what>_<unit>, with
// _total on counters and base units (seconds, bytes); labels for what varies
// (table=, tier=, op=).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// One scrape's samples, grouped by family as the format requires (a family's
// samples follow its HELP and TYPE lines, whichever collector wrote them).
class PrometheusText {
 public:
  // `type`: "counter", "gauge" or "histogram". Declaring a family again
  // (another shard's collector) keeps the first help text.
  void Counter(std::string_view name, std::string_view help, const MetricLabels& labels, double value);
  void Gauge(std::string_view name, std::string_view help, const MetricLabels& labels, double value);
  // Cumulative counts per upper bound (the last bound may be +Inf), their
  // sum and total count.
  void Histogram(std::string_view name, std::string_view help, const MetricLabels& labels,
                 const std::vector<double>& bounds, const std::vector<uint64_t>& cumulative, double sum,
                 uint64_t count);

  std::string Render() const;

 private:
  struct Family {
    std::string type, help;
    std::vector<std::string> lines;
  };
  Family& Declare(std::string_view name, std::string_view type, std::string_view help);
  std::vector<std::string> order_;
  std::map<std::string, Family, std::less<>> families_;
};

// Latencies in seconds, in buckets from 100 µs to 10 s. Lock-free: observed
// on request paths by many threads.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 12> kBounds = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                      1e-2, 2.5e-2, 5e-2, 0.1,   1.0,    10.0};
  void Observe(double seconds);
  // Its figures at one moment: cumulative buckets (bounds, then +Inf: the
  // count), sum and count, read so that +Inf and the count agree.
  struct Snapshot {
    std::vector<uint64_t> cumulative;
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;
  void Write(PrometheusText* out, std::string_view name, std::string_view help, const MetricLabels& labels) const {
    Write(out, name, help, labels, Read());
  }
  // A snapshot's figures: a family that must agree with the histogram (a
  // count of requests) is written from the same snapshot.
  static void Write(PrometheusText* out, std::string_view name, std::string_view help, const MetricLabels& labels,
                    const Snapshot& snapshot);

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};  // last: above every bound
  std::atomic<double> sum_{0.0};  // the count is the buckets' sum (Read)
};

// A role's collectors. Thread-safe.
class MetricsRegistry {
 public:
  using Collector = std::function<void(PrometheusText*)>;
  // `role`: "master", "ps" or "trainer", the process figures' label.
  explicit MetricsRegistry(std::string role) : role_(std::move(role)) {}
  void Add(Collector collector);
  // Runs every collector; process figures (resident memory, CPU time) first.
  std::string Render() const;

 private:
  const std::string role_;
  mutable std::mutex mu_;
  std::vector<Collector> collectors_;  // GUARDED_BY(mu_)
};

// tessera_process_resident_memory_bytes and _cpu_seconds_total of this
// process, labelled with its role.
void WriteProcessMetrics(PrometheusText* out, std::string_view role);

}  // namespace tessera
