// Issue 37, item 5: one job per checkpoint directory. The lock itself, in this
// process and a child (the jobs that hold it through `headroom run` are in
// run_orphans_test.cc).
#include "cli/checkpoint_lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;  // NOLINT(google-build-using-namespace): test helpers

}  // namespace

TEST_CASE(
    "a locked checkpoint directory is refused naming it and the holder's PID, and free once "
    "released") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  std::optional<cli::CheckpointLock> first;
  {
    Result<cli::CheckpointLock> lock = cli::CheckpointLock::acquire(ckpt, "--checkpoint-dir");
    REQUIRE_MESSAGE(lock.is_ok(), lock.message());
    CHECK(lock->held());
    first = std::move(lock.value());
  }
  CHECK(fs::is_directory(ckpt));  // created for the job
  const Result<cli::CheckpointLock> second = cli::CheckpointLock::acquire(ckpt, "--resume");
  REQUIRE_FALSE(second.is_ok());
  CHECK(second.code() == StatusCode::kRuntime);
  CHECK_MESSAGE(contains(second.message(), "--resume " + ckpt + ": in use by another job (PID " +
                                               std::to_string(getpid()) + ")"),
                second.message());
  first.reset();
  CHECK(cli::CheckpointLock::acquire(ckpt, "--resume").is_ok());
}

TEST_CASE("a job killed with SIGKILL leaves no stale lock on its checkpoint directory") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t job = fork();
  if (job == 0) {
    const Result<cli::CheckpointLock> held = cli::CheckpointLock::acquire(ckpt, "--checkpoint-dir");
    (void)!write(ready[1], held.is_ok() ? "y" : "n", 1);
    pause();  // holds the lock (the object is never destroyed) until killed
    _exit(0);
  }
  close(ready[1]);
  char answer = 0;
  REQUIRE(read(ready[0], &answer, 1) == 1);
  close(ready[0]);
  REQUIRE(answer == 'y');
  {
    const Result<cli::CheckpointLock> refused =
        cli::CheckpointLock::acquire(ckpt, "--checkpoint-dir");
    CHECK_FALSE(refused.is_ok());
    CHECK_MESSAGE(contains(refused.message(), "(PID " + std::to_string(job) + ")"),
                  refused.message());
  }
  kill(job, SIGKILL);
  waitpid(job, nullptr, 0);
  const Result<cli::CheckpointLock> after = cli::CheckpointLock::acquire(ckpt, "--checkpoint-dir");
  CHECK_MESSAGE(after.is_ok(), after.message());
}

TEST_CASE(
    "a run that writes no checkpoints locks nothing, and a missing --resume directory is not "
    "created") {
  TempDir dir;
  executor::RunOptions run;
  Result<cli::CheckpointLock> none = cli::lock_checkpoint_directory(run);
  REQUIRE(none.is_ok());
  CHECK_FALSE(none->held());
  run.resume_dir = dir.file("missing");
  none = cli::lock_checkpoint_directory(run);
  REQUIRE(none.is_ok());
  CHECK_FALSE(none->held());
  CHECK_FALSE(fs::exists(run.resume_dir));
  run.checkpoint_dir = dir.file("out");
  const Result<cli::CheckpointLock> out = cli::lock_checkpoint_directory(run);
  REQUIRE(out.is_ok());
  CHECK(out->held());
  CHECK(fs::exists(dir.file("out/.headroom.lock")));
  // Under a plain file: nothing to lock; the run's own check refuses it, naming it.
  write_text(dir.file("plain"), "a file, not a directory");
  run.checkpoint_dir = dir.file("plain/ckpt");
  const Result<cli::CheckpointLock> unusable = cli::lock_checkpoint_directory(run);
  REQUIRE(unusable.is_ok());
  CHECK_FALSE(unusable->held());
}

}  // namespace headroom
