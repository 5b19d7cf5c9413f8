// One job per checkpoint directory (issue 37, item 5): the job that writes
// checkpoints into DIR holds an exclusive flock(2) on DIR/.headroom.lock for its
// whole life, so a second `headroom run` on DIR is refused at once instead of
// training beside it and deleting its in-progress save. The kernel releases the
// lock when the last process holding it ends, however it ends (SIGKILL included),
// so a killed job never leaves a stale lock. The file holds the PID of the job
// that locked it last, for the refusal's message only; it decides nothing.
#pragma once

#include <string>

#include "executor/run.h"
#include "graph/status.h"

namespace headroom::cli {

// The lock file's name inside a checkpoint directory (the checkpoint store
// ignores it: it is neither a step-N checkpoint nor a leftover of one).
inline constexpr const char* kCheckpointLockName = ".headroom.lock";

// An exclusive lock on one checkpoint directory, held until destroyed. Its file
// descriptor is inherited by the ranks the launcher starts (no close-on-exec),
// so the directory stays locked until the last of them has ended too.
class CheckpointLock {
 public:
  CheckpointLock() = default;  // holds nothing
  ~CheckpointLock();
  CheckpointLock(CheckpointLock&& other) noexcept;
  CheckpointLock& operator=(CheckpointLock&& other) noexcept;
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;
  bool held() const { return fd_ >= 0; }

  // Locks `directory` (created when missing), `flag` naming it in messages
  // ("--checkpoint-dir"). A directory another job holds is a runtime error
  // naming the directory and, when the file says it, that job's PID. One that
  // cannot be created or written gives a lock that holds nothing: no job can
  // write checkpoints there, and the run refuses it itself before step 1.
  static Result<CheckpointLock> acquire(const std::string& directory, const std::string& flag);

 private:
  explicit CheckpointLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// The lock on the directory `run` writes checkpoints into: --checkpoint-dir,
// else --resume's directory when it exists (a missing one is the run's own
// error later); holds nothing when the run writes no checkpoints.
Result<CheckpointLock> lock_checkpoint_directory(const executor::RunOptions& run);

}  // namespace headroom::cli
