// SIGINT and SIGTERM as a flag (see interrupt.h).
#include "runtime/interrupt.h"

#include <csignal>

namespace kiln::runtime {
namespace {

volatile std::sig_atomic_t interrupted = 0;
struct sigaction previousInt {
}, previousTerm{};

extern "C" void onInterrupt(int signal) {
  interrupted = signal;
}

} // namespace

InterruptGuard::InterruptGuard() {
  interrupted = 0;
  struct sigaction act {};
  act.sa_handler = onInterrupt;
  act.sa_flags = SA_RESETHAND;
  sigemptyset(&act.sa_mask);
  sigaction(SIGINT, &act, &previousInt);
  sigaction(SIGTERM, &act, &previousTerm);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &previousInt, nullptr);
  sigaction(SIGTERM, &previousTerm, nullptr);
}

int InterruptGuard::received() {
  return interrupted;
}

const char *InterruptGuard::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

} // namespace kiln::runtime
