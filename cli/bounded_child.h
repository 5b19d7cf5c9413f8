// Runs a program whose behaviour headroom does not control (the MMEngine loader,
// which runs a config's Python code) within bounds: a wall-clock limit, an
// address-space limit (RLIMIT_AS), a cap on what it prints, and its own process
// group, which is killed when it ends, overruns or exits leaving children behind
// (and, on request, those that left the group). The child also dies with
// headroom (PR_SET_PDEATHSIG).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/status.h"

namespace headroom::cli {

struct ChildLimits {
  int64_t timeout_ms = 60'000;          // wall clock, from the fork
  int64_t address_space_bytes = 0;      // RLIMIT_AS of the child; 0: inherited
  size_t max_stdout_bytes = 16u << 20;  // more is an error: the child is killed
  size_t max_stderr_bytes = 64u << 10;  // only the last this many bytes are kept
  // Also end the descendants that left the child's process group (setsid): this
  // process becomes a child subreaper (PR_SET_CHILD_SUBREAPER, and stays one),
  // so they are re-parented to it when their parents end, and those carrying
  // this run's mark in their environment, or started no earlier than the child
  // (one that cleared its environment), are killed and reaped once the child
  // has ended. Only for a process whose children are all its own to end (the
  // `headroom` command), never inside someone else's (the Python package).
  bool end_escaped_descendants = false;
};

struct ChildOutcome {
  int exit_code = -1;            // -1: ended by a signal (term_signal says which)
  int term_signal = 0;
  bool timed_out = false;        // killed at timeout_ms
  bool stdout_overflow = false;  // killed for printing more than max_stdout_bytes
  std::string out;
  std::string err;
};

// Runs argv (argv[0] looked up on PATH) with stdin closed and
// HEADROOM_BOUNDED_CHILD=<mark of this run> added to its environment. An error only when
// it cannot start (pipe, fork); the outcome says how it ended.
Result<ChildOutcome> run_bounded(const std::vector<std::string>& argv, const ChildLimits& limits);

}  // namespace headroom::cli
