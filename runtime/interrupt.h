// SIGINT and SIGTERM as a request to stop cleanly: while an InterruptGuard lives, the signals only
// set a flag that long work polls between its steps (a training loop, after a step; kiln compile,
// after its link), so that it can save or clean up and say so. A second signal acts as it normally
// would (it kills), since the flag is armed once (SA_RESETHAND). The destructor restores the
// previous actions.
#pragma once

namespace kiln::runtime {

class InterruptGuard {
public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard &) = delete;
  InterruptGuard &operator=(const InterruptGuard &) = delete;
  // The signal received (SIGINT or SIGTERM) since the guard was made, or 0.
  static int received();
  static const char *name(int signal); // "SIGINT" / "SIGTERM"
};

} // namespace kiln::runtime
