// `headroom run PLAN --nproc N`: the ranks of a job on this machine, started
// as torchrun starts them (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT in each one's environment), each one this trainer
// executable with the same arguments. Each rank dies with the launcher
// (PR_SET_PDEATHSIG): killing `headroom run` ends the job. Torch-free; used by
// headroom-train.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"

namespace headroom::cli {

// Seconds the launcher gives the other ranks, beyond their collectives'
// timeout (--comm-timeout), to stop on their own once one has failed (each ends
// its collective with an error as soon as a peer is gone, or at the timeout);
// then it kills them.
inline constexpr int kRankGraceSeconds = 30;

// Set in each rank's environment to the launcher's PID: the rank shares the
// launcher's lock on the checkpoint directory (cli/checkpoint_lock.h) and does
// not take its own.
inline constexpr const char* kLauncherPidVariable = "HEADROOM_LAUNCHER_PID";

// Starts `nproc` ranks of `executable` with `arguments` and waits for all of
// them. Exit status: 0 when every rank succeeded, else the first failing
// rank's (1 for a rank killed by a signal), with a line naming that rank.
// `comm_timeout_s`: the ranks' collective timeout, which the grace adds to.
int launch_local_ranks(const std::string& executable, const std::vector<std::string>& arguments, int nproc,
                       int comm_timeout_s, Terminal& terminal);

}  // namespace headroom::cli
