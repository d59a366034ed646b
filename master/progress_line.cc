#include "master/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera {

// Forwards to the stream's own buffer and counts the bytes that pass.
class ProgressLine::CountingBuf : public std::streambuf {
 public:
  explicit CountingBuf(std::streambuf* inner) : inner_(inner) {}
  int64_t count() const { return count_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    ++count_;
    return inner_->sputc(static_cast<char>(c));
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    count_ += n;
    return inner_->sputn(s, n);
  }
  int sync() override { return inner_->pubsync(); }

 private:
  std::streambuf* inner_;
  int64_t count_ = 0;
};

std::string FormatProgressLine(int64_t step, int64_t total_steps, int64_t epoch, double loss,
                               double examples_per_s, double steps_per_s) {
  char text[240];
  const std::string in_epoch = epoch >= 0 ? "  epoch " + std::to_string(epoch) : "";
  if (total_steps > 0) {
    const double percent = 100.0 * static_cast<double>(step) / static_cast<double>(total_steps);
    std::string eta = "--";
    if (steps_per_s > 0) {
      const int64_t s = std::llround(static_cast<double>(std::max<int64_t>(0, total_steps - step)) / steps_per_s);
      char buf[32];
      if (s >= 3600) {
        std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                      static_cast<long long>(s / 60 % 60));
      } else {
        std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                      static_cast<long long>(s % 60));
      }
      eta = buf;
    }
    std::snprintf(text, sizeof(text), "[master] step %lld/%lld (%.1f%%)%s  loss %.5f  examples/s %.0f  ETA %s",
                  static_cast<long long>(step), static_cast<long long>(total_steps), percent, in_epoch.c_str(), loss,
                  examples_per_s, eta.c_str());
  } else {
    std::snprintf(text, sizeof(text), "[master] step %lld%s  loss %.5f  examples/s %.0f", static_cast<long long>(step),
                  in_epoch.c_str(), loss, examples_per_s);
  }
  return text;
}

ProgressLine::ProgressLine(std::ostream& out, bool live) : out_(out), live_(live) {
  if (!live_) return;
  original_ = out_.rdbuf();
  buf_ = std::make_unique<CountingBuf>(original_);
  out_.rdbuf(buf_.get());
}

ProgressLine::~ProgressLine() {
  if (original_ != nullptr) {
    out_.flush();
    out_.rdbuf(original_);
  }
}

void ProgressLine::Show(const std::string& line) {
  if (!live_) {
    out_ << line << std::endl;
    return;
  }
  // Up one line and clear it: the previous live line, when nothing came
  // after it.
  if (written_after_line_ >= 0 && written_after_line_ == buf_->count()) out_ << "\033[1A\033[2K";
  out_ << line << std::endl;
  written_after_line_ = buf_->count();
}

bool ProgressLine::StdoutIsTerminal() { return ::isatty(STDOUT_FILENO) == 1; }

}  // namespace tessera
