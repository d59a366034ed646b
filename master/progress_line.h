// The master's progress on its standard output (step of the total, loss,
// examples/s, ETA): on a terminal one live line, redrawn in place; to a file
// or a pipe, one log line per reported step (scripts/launch_local.sh, which
// shows master.log, redraws those in place itself on a terminal).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>

namespace tessera {

// What the progress line says after `steps` steps of `total_steps` (0:
// unknown, and then there is no ETA), in epoch `epoch` (-1: not known).
std::string FormatProgressLine(int64_t steps, int64_t total_steps, int64_t epoch, double loss,
                               double examples_per_s, double steps_per_s);

class ProgressLine {
 public:
  // live: `out` is a terminal (see StdoutIsTerminal). While it lives, this
  // watches what else is written to `out` (it wraps its buffer), so that a
  // live line is redrawn in place only when nothing was printed after it.
  ProgressLine(std::ostream& out, bool live);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool live() const { return live_; }
  // Live: replaces the last live line when it is still the last thing on
  // the screen, else prints it below; otherwise prints it as a log line.
  void Show(const std::string& line);

  static bool StdoutIsTerminal();

 private:
  class CountingBuf;
  std::ostream& out_;
  const bool live_;
  std::unique_ptr<CountingBuf> buf_;
  std::streambuf* original_ = nullptr;
  int64_t written_after_line_ = -1;  // bytes written when the live line ended; -1: none shown
};

}  // namespace tessera
