// SIGINT, SIGTERM and SIGUSR1 as a request to stop cleanly: while an InterruptGuard lives, the
// signals only set a flag that long work polls between its steps (a training loop, after a step;
// kiln compile, after its link), so that it can save or clean up and say so. A second SIGINT or
// SIGTERM acts as it normally would (it kills), since their flag is armed once (SA_RESETHAND); a
// second SIGUSR1, which only asks, asks again (it killed a rank that was saving). The destructor
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
  // From now on SIGUSR1 is held as a request to stop, which the next guard takes: kiln and the
  // executables call it first, for their `train` command (argv[1]), so that a stop asked while the
  // run starts (compiling, loading: seconds for a large model) stops it before its first step,
  // with a save, instead of killing it.
  static void holdStopRequestsOfTraining(int argc, char **argv);
  static const char *name(int signal); // "SIGINT" / "SIGTERM" / "SIGUSR1"
};

} // namespace kiln::runtime
