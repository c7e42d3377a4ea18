// Progress of long work (training, generation): on a terminal, one status line redrawn in place
// (a bar, step/total, the latest figures, the rate and the time left); elsewhere (a pipe, a file)
// nothing is redrawn and the caller's log lines are the record. Lines the caller prints through
// line() appear above the bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kiln::runtime {

// Whether `out` shows on a terminal, where lines are redrawn in place. Under mpirun a rank's
// stdout is always a pseudo-terminal of mpirun's, whatever mpirun's own is (a file, a pipe), so
// there the answer is mpirun's: its stdout, as /proc shows the rank's parent's.
bool onTerminal(std::FILE *out);

// "[=====>    ] 120/1000  loss 2.3100  val 2.4000  15.2k tok/s  ETA 0:42", cut to `width`
// columns. `figures` is the text after the count; `rate` units per second (< 0: not known yet)
// of `unit`; `eta` seconds (< 0: not known).
std::string progressLine(int64_t done, int64_t total, const std::string &figures, double rate,
                         const std::string &unit, double eta, int width);

class Progress {
public:
  // Draws on `out` only if it is a terminal (onTerminal, or `force`).
  explicit Progress(int64_t total, std::string unit, std::FILE *out = stdout, bool force = false);
  ~Progress();
  Progress(const Progress &) = delete;
  Progress &operator=(const Progress &) = delete;

  bool drawing() const { return drawing_; }
  // `done` of total; `units` processed so far (for the rate); the figures to show.
  void update(int64_t done, double units, const std::string &figures);
  // A line of the record, printed above the bar (or plainly when not drawing).
  void line(const std::string &text);
  // Leaves the last bar on screen and ends its line.
  void finish();

private:
  void clear();
  int64_t total_;
  std::string unit_;
  std::FILE *out_;
  bool drawing_, shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

// A status line for work without a count (compiling a model): on a terminal, show() replaces the
// line with "TEXT  (1.2 s)", the seconds since the line was made; clear() (or the destructor)
// removes it. Nothing is drawn elsewhere.
class StatusLine {
public:
  explicit StatusLine(std::FILE *out = stdout, bool force = false);
  ~StatusLine();
  StatusLine(const StatusLine &) = delete;
  StatusLine &operator=(const StatusLine &) = delete;

  bool drawing() const { return drawing_; }
  void show(const std::string &text);
  void clear();

private:
  std::FILE *out_;
  bool drawing_, shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

} // namespace kiln::runtime
