// SIGINT, SIGTERM and SIGUSR1 as a request to stop cleanly: while an InterruptGuard lives, the
// signals only set a flag that long work polls between its steps (a training loop, after a step;
// kiln compile, after its link), so that it can save or clean up and say so. A second signal acts
// as it normally would (it kills), since the flag is armed once (SA_RESETHAND). The destructor
// restores the previous actions.
//
// SIGUSR1 is there for MPI: mpirun answers SIGINT or SIGTERM by sending SIGTERM to every rank and
// SIGKILL one second later (Open MPI's odls_base_sigkill_timeout), too soon for a step and a save
// of a real model; SIGUSR1 it passes on to the ranks and nothing else, so they stop after a step
// and save with no deadline.
#pragma once

namespace kiln::runtime {

class InterruptGuard {
public:
  // onTerm: a line written to stderr the moment SIGTERM arrives (from the signal handler, so
  // that it is said even when a SIGKILL follows), or null.
  explicit InterruptGuard(const char *onTerm = nullptr);
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard &) = delete;
  InterruptGuard &operator=(const InterruptGuard &) = delete;
  // The signal received (SIGINT, SIGTERM or SIGUSR1) since the guard was made, or 0 (and 0 once
  // it is gone).
  static int received();
  static const char *name(int signal); // "SIGINT" / "SIGTERM" / "SIGUSR1"
};

} // namespace kiln::runtime
