// Progress lines (see progress.h).
#include "runtime/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

namespace kiln::runtime {

namespace {

std::string clock(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(seconds));
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string human(double v) {
  return v >= 1e6   ? fmt::format("{:.1f}M", v / 1e6)
         : v >= 1e4 ? fmt::format("{:.1f}k", v / 1e3)
                    : fmt::format("{:.0f}", v);
}

int terminalWidth(std::FILE *out) {
  winsize w{};
  return ioctl(fileno(out), TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? w.ws_col : 80;
}

} // namespace

bool onTerminal(std::FILE *out) {
  if (!isatty(fileno(out)))
    return false;
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) // (Open MPI's; its mpirun starts the ranks itself)
    return true;
  char target[256];
  const std::string fd = fmt::format("/proc/{}/fd/1", getppid());
  const ssize_t n = readlink(fd.c_str(), target, sizeof target - 1);
  if (n <= 0)
    return false;
  const std::string_view name(target, static_cast<size_t>(n));
  return name.starts_with("/dev/pts/") || name.starts_with("/dev/tty");
}

std::string progressLine(int64_t done, int64_t total, const std::string &figures, double rate,
                         const std::string &unit, double eta, int width) {
  constexpr int kBar = 20;
  const double f = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 0;
  const int filled = static_cast<int>(f * kBar);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kBar)
    bar += '>' + std::string(static_cast<size_t>(kBar - filled - 1), ' ');
  std::string s = fmt::format("[{}] {}/{}", bar, done, total);
  if (!figures.empty())
    s += "  " + figures;
  if (rate >= 0)
    s += fmt::format("  {} {}/s", human(rate), unit);
  if (eta >= 0)
    s += "  ETA " + clock(eta);
  if (static_cast<int>(s.size()) > width)
    s.resize(static_cast<size_t>(std::max(width, 0)));
  return s;
}

Progress::Progress(int64_t total, std::string unit, std::FILE *out, bool force)
    : total_(total), unit_(std::move(unit)), out_(out), drawing_(force || onTerminal(out)) {}

Progress::~Progress() {
  if (shown_)
    finish();
}

void Progress::clear() {
  if (shown_)
    std::fputs("\r\033[K", out_);
}

void Progress::update(int64_t done, double units, const std::string &figures) {
  if (!drawing_)
    return;
  const auto now = std::chrono::steady_clock::now();
  // At most 10 redraws a second, and always the last.
  if (shown_ && done < total_ && now - last_ < std::chrono::milliseconds(100))
    return;
  last_ = now;
  const double s = std::chrono::duration<double>(now - start_).count();
  const double rate = s > 0 ? units / s : -1;
  const double eta = done > 0 && s > 0 ? s * static_cast<double>(total_ - done) / done : -1;
  clear();
  std::fputs(progressLine(done, total_, figures, rate, unit_, eta, terminalWidth(out_) - 1).c_str(),
             out_);
  std::fflush(out_);
  shown_ = true;
}

void Progress::line(const std::string &text) {
  clear();
  std::fputs((text + "\n").c_str(), out_);
  shown_ = false;
  std::fflush(out_);
}

void Progress::finish() {
  if (shown_)
    std::fputc('\n', out_);
  shown_ = false;
  std::fflush(out_);
}

StatusLine::StatusLine(std::FILE *out, bool force)
    : out_(out), drawing_(force || onTerminal(out)) {}

StatusLine::~StatusLine() {
  clear();
}

void StatusLine::show(const std::string &text) {
  if (!drawing_)
    return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = fmt::format("{}  ({:.1f} s)", text, s);
  const auto width = static_cast<size_t>(std::max(terminalWidth(out_) - 1, 0));
  if (line.size() > width)
    line.resize(width);
  std::fputs(("\r\033[K" + line).c_str(), out_);
  std::fflush(out_);
  shown_ = true;
}

void StatusLine::clear() {
  if (!shown_)
    return;
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
  shown_ = false;
}

} // namespace kiln::runtime
