// SIGINT, SIGTERM and SIGUSR1 as a flag (see interrupt.h).
#include "runtime/interrupt.h"

#include <csignal>
#include <cstring>
#include <iterator>
#include <string_view>
#include <unistd.h>

namespace kiln::runtime {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1};
volatile std::sig_atomic_t interrupted = 0;
struct sigaction previous[std::size(kSignals)];
// Set before the handlers are installed and read only by them.
const char *termNote = nullptr;
size_t termNoteSize = 0;
bool holding = false; // holdStopRequests was called: a SIGUSR1 before the guard is its request

extern "C" void onInterrupt(int signal) {
  interrupted = signal;
  if (signal == SIGTERM && termNote) { // (write(2) is async-signal-safe; nothing to do if it fails)
    ssize_t written = ::write(STDERR_FILENO, termNote, termNoteSize);
    (void)written;
  }
}

} // namespace

InterruptGuard::InterruptGuard(const char *onTerm) {
  if (!holding || interrupted != SIGUSR1)
    interrupted = 0;
  termNote = onTerm;
  termNoteSize = onTerm ? std::strlen(onTerm) : 0;
  struct sigaction act {};
  act.sa_handler = onInterrupt;
  sigemptyset(&act.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    act.sa_flags = kSignals[i] == SIGUSR1 ? 0 : SA_RESETHAND;
    sigaction(kSignals[i], &act, &previous[i]);
  }
}

void InterruptGuard::holdStopRequestsOfTraining(int argc, char **argv) {
  if (argc < 2 || std::string_view(argv[1]) != "train")
    return;
  holding = true;
  struct sigaction act {};
  act.sa_handler = onInterrupt;
  sigemptyset(&act.sa_mask);
  sigaction(SIGUSR1, &act, nullptr);
}

InterruptGuard::~InterruptGuard() {
  for (size_t i = 0; i < std::size(kSignals); ++i)
    sigaction(kSignals[i], &previous[i], nullptr);
  termNote = nullptr;
  interrupted = 0; // (what polls it polls for this guard's signals only: meanLoss)
}

int InterruptGuard::received() {
  return interrupted;
}

const char *InterruptGuard::name(int signal) {
  switch (signal) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGUSR1:
    return "SIGUSR1";
  default:
    return "a signal";
  }
}

} // namespace kiln::runtime
