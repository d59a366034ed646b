#include "common/prometheus_text.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace tessera {
namespace {

// Label values escape backslash, quote and newline; nothing else.
std::string Escape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integers (counters of rows, bytes) print exactly; others in the
  // shortest form that reads back as the same double.
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[40];
  const auto end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
  return std::string(buf, end);
}

std::string Sample(std::string_view name, const MetricLabels& labels, double value) {
  std::string line(name);
  if (!labels.empty()) {
    line += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) line += ',';
      line += labels[i].first + "=\"" + Escape(labels[i].second) + '"';
    }
    line += '}';
  }
  line += ' ';
  line += FormatValue(value);
  return line;
}

}  // namespace

PrometheusText::Family& PrometheusText::Declare(std::string_view name, std::string_view type,
                                                std::string_view help) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    order_.emplace_back(name);
    it = families_.emplace(std::string(name), Family{std::string(type), std::string(help), {}}).first;
  }
  return it->second;
}

void PrometheusText::Counter(std::string_view name, std::string_view help, const MetricLabels& labels,
                             double value) {
  Declare(name, "counter", help).lines.push_back(Sample(name, labels, value));
}

void PrometheusText::Gauge(std::string_view name, std::string_view help, const MetricLabels& labels, double value) {
  Declare(name, "gauge", help).lines.push_back(Sample(name, labels, value));
}

void PrometheusText::Histogram(std::string_view name, std::string_view help, const MetricLabels& labels,
                               const std::vector<double>& bounds, const std::vector<uint64_t>& cumulative,
                               double sum, uint64_t count) {
  Family& f = Declare(name, "histogram", help);
  const std::string base(name);
  for (size_t i = 0; i < bounds.size() && i < cumulative.size(); ++i) {
    MetricLabels with_le = labels;
    with_le.emplace_back("le", FormatValue(bounds[i]));
    f.lines.push_back(Sample(base + "_bucket", with_le, static_cast<double>(cumulative[i])));
  }
  if (bounds.empty() || !std::isinf(bounds.back())) {
    MetricLabels with_le = labels;
    with_le.emplace_back("le", "+Inf");
    f.lines.push_back(Sample(base + "_bucket", with_le, static_cast<double>(count)));
  }
  f.lines.push_back(Sample(base + "_sum", labels, sum));
  f.lines.push_back(Sample(base + "_count", labels, static_cast<double>(count)));
}

std::string PrometheusText::Render() const {
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.find(name)->second;
    out += "# HELP " + name + ' ' + f.help + '\n';
    out += "# TYPE " + name + ' ' + f.type + '\n';
    for (const std::string& line : f.lines) {
      out += line;
      out += '\n';
    }
  }
  return out;
}

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(seconds, std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  // Read the buckets first and count from them, so that the +Inf bucket and
  // _count agree even while requests are observed.
  Snapshot s;
  uint64_t running = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  running += buckets_[kBounds.size()].load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  s.count = running;
  return s;
}

void LatencyHistogram::Write(PrometheusText* out, std::string_view name, std::string_view help,
                             const MetricLabels& labels, const Snapshot& snapshot) {
  out->Histogram(name, help, labels, std::vector<double>(kBounds.begin(), kBounds.end()), snapshot.cumulative,
                 snapshot.sum, snapshot.count);
}

void MetricsRegistry::Add(Collector collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  PrometheusText text;
  WriteProcessMetrics(&text, role_);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Collector& c : collectors_) c(&text);
  return text.Render();
}

void WriteProcessMetrics(PrometheusText* out, std::string_view role) {
  const MetricLabels labels = {{"role", std::string(role)}};
  // statm's second field: resident pages.
  std::ifstream statm("/proc/self/statm");
  long long size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    out->Gauge("tessera_process_resident_memory_bytes", "Resident memory of this process.", labels,
               static_cast<double>(resident_pages) * static_cast<double>(sysconf(_SC_PAGESIZE)));
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
    out->Counter("tessera_process_cpu_seconds_total", "User and system CPU time of this process.", labels, cpu);
  }
}

}  // namespace tessera
