// Issue 37, item 5: killing `headroom run --nproc N` left its ranks training on
// as orphans (re-parented to PID 1) to --steps, writing checkpoints beside the
// next job. Each rank now dies with the launcher (cli/rank_launcher.h), and a
// checkpoint directory is locked by the job that writes it (cli/checkpoint_lock.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;  // NOLINT(google-build-using-namespace): test helpers

// The fields of /proc/PID/stat after the command name: state, then parent.
bool read_stat(const std::string& pid, char& state, long& parent) {
  const std::string stat = read_text("/proc/" + pid + "/stat");
  const size_t close = stat.rfind(')');
  if (stat.empty() || close == std::string::npos) return false;
  std::istringstream fields(stat.substr(close + 2));
  return static_cast<bool>(fields >> state >> parent);
}

std::vector<std::string> children_of(pid_t parent) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    char state = 0;
    long ppid = 0;
    if (name.find_first_not_of("0123456789") == std::string::npos && read_stat(name, state, ppid) && ppid == parent) {
      out.push_back(name);
    }
  }
  return out;
}

bool running(const std::string& pid) {
  char state = 0;
  long parent = 0;
  return read_stat(pid, state, parent) && state != 'Z';
}

pid_t start_headroom(const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv = {const_cast<char*>(HEADROOM_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    // As a shell starts it: signals a test runner ignores or blocks (nohup) take effect.
    ::signal(SIGHUP, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(HEADROOM_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

// Plans tiny-llama on 2 GPUs, starts `run PLAN --nproc 2` on the CPU (with
// `extra` flags) as `launcher`, and waits up to 20 s for its two ranks' pids;
// nullopt when the launcher ended before starting them (built without LibTorch:
// the test is skipped).
std::optional<std::vector<std::string>> start_job(const TempDir& dir, const std::vector<std::string>& extra,
                                                  pid_t& launcher) {
  const std::string plan = dir.file("plan.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 --gpus 2 -o " + quoted(plan)).exit_code == 0);
  std::vector<std::string> args = {"run", plan, "--nproc", "2", "--steps", "1000000", "--device", "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  launcher = start_headroom(args);
  REQUIRE(launcher > 0);
  std::vector<std::string> ranks;
  for (int wait = 0; wait < 400 && ranks.size() < 2; ++wait) {
    ranks = children_of(launcher);
    int status = 0;
    if (ranks.size() < 2 && waitpid(launcher, &status, WNOHANG) == launcher) {
      MESSAGE("skipped: the launcher ended before starting ranks (built without LibTorch?)");
#ifdef HEADROOM_TRAINER_BUILT
      FAIL("headroom-train was built, but run --nproc 2 started no ranks");
#endif
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ranks;
}

}  // namespace

namespace {

// Whether the job's lock on `ckpt` is free: an exclusive flock that does not wait.
bool lock_released(const std::string& ckpt) {
  const int fd = ::open((ckpt + "/.headroom.lock").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return free;
}

}  // namespace

TEST_CASE("SIGKILL or SIGTERM or SIGHUP to the launcher of run --nproc 2 ends both ranks within seconds and frees the lock") {
  for (const int signal : {SIGKILL, SIGTERM, SIGHUP}) {
    CAPTURE(std::string(strsignal(signal)));
    TempDir dir;
    const std::string ckpt = dir.file("ckpt");
    pid_t launcher = 0;
    const std::optional<std::vector<std::string>> started = start_job(dir, {"--checkpoint-dir", ckpt}, launcher);
    if (!started) return;
    const std::vector<std::string>& ranks = *started;
    REQUIRE(ranks.size() == 2);
    CHECK_FALSE(lock_released(ckpt));  // the job holds it
    kill(launcher, signal);
    int status = 0;
    waitpid(launcher, &status, 0);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == signal));
    const auto start = std::chrono::steady_clock::now();
    bool ended = false;
    while (!ended && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
      ended = !running(ranks[0]) && !running(ranks[1]);
      if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(ended);
    for (const std::string& rank : ranks) {
      if (running(rank)) kill(std::stoi(rank), SIGKILL);  // never leave them behind
    }
    CHECK(lock_released(ckpt));  // the next job may write there at once
  }
}

TEST_CASE("a hung rank ends the job after --comm-timeout plus 30 s, not a fixed 150 s (issue 37 item 5)") {
  TempDir dir;
  pid_t launcher = 0;
  const std::optional<std::vector<std::string>> started = start_job(dir, {"--comm-timeout", "2"}, launcher);
  if (!started) return;
  const std::vector<std::string>& ranks = *started;
  REQUIRE(ranks.size() == 2);
  std::this_thread::sleep_for(std::chrono::seconds(4));  // both ranks in their steps' collectives
  kill(std::stoi(ranks[1]), SIGSTOP);                     // hung: alive, silent
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  pid_t ended = 0;
  while (ended != launcher && std::chrono::steady_clock::now() - start < std::chrono::seconds(90)) {
    ended = waitpid(launcher, &status, WNOHANG);
    if (ended != launcher) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const std::string& rank : ranks) {
    if (running(rank)) kill(std::stoi(rank), SIGKILL);  // never leave them behind
  }
  if (ended != launcher) {
    kill(launcher, SIGKILL);
    waitpid(launcher, nullptr, 0);
  }
  REQUIRE(ended == launcher);
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // 2 s for the peer's collective to fail, 2 + 30 s of grace for the hung rank.
  CHECK(seconds < 2 + 2 + 30 + 15);
  CHECK(seconds > 2 + 30 - 1);
}

namespace {

// Waits up to 5 s for both ranks to end.
bool ranks_end(const std::vector<std::string>& ranks) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    if (!running(ranks[0]) && !running(ranks[1])) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

TEST_CASE("a second run on the checkpoint directory of a running job is refused naming it and the job's PID") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  pid_t launcher = 0;
  const std::optional<std::vector<std::string>> started = start_job(dir, {"--checkpoint-dir", ckpt}, launcher);
  if (!started) return;
  const std::vector<std::string>& ranks = *started;
  REQUIRE(ranks.size() == 2);
  const std::string plan = quoted(dir.file("plan.json"));
  const std::string expected = ckpt + ": in use by another job (PID " + std::to_string(launcher) + ")";
  for (const std::string flag : {"--checkpoint-dir", "--resume"}) {
    CAPTURE(flag);
    const auto start = std::chrono::steady_clock::now();
    const RunOutput second = run_headroom("run " + plan + " --nproc 2 --steps 1 --device cpu " + flag + " " + quoted(ckpt));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));  // at once, not after training
    CHECK(second.exit_code == 1);
    CHECK_MESSAGE(contains(second.err, flag + " " + expected), second.err);
  }
  kill(launcher, SIGKILL);  // the ranks die with it, and the lock with the last of them
  waitpid(launcher, nullptr, 0);
  CHECK(ranks_end(ranks));
  for (const std::string& rank : ranks) {
    if (running(rank)) kill(std::stoi(rank), SIGKILL);  // never leave them behind
  }
  const RunOutput after_kill = run_headroom("run " + plan + " --nproc 2 --steps 1 --device cpu --checkpoint-dir " +
                                           quoted(ckpt));
  CHECK_MESSAGE(after_kill.exit_code == 0, after_kill.err);
  const RunOutput after_end = run_headroom("run " + plan + " --nproc 2 --steps 2 --device cpu --resume " + quoted(ckpt));
  CHECK_MESSAGE(after_end.exit_code == 0, after_end.err);
}

TEST_CASE("a single-process run locks its checkpoint directory until it ends") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  const std::string plan = dir.file("plan.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 -o " + quoted(plan)).exit_code == 0);
  const pid_t job = start_headroom({"run", plan, "--steps", "1000000", "--device", "cpu", "--checkpoint-dir", ckpt});
  const std::string pid = std::to_string(job);
  bool locked = false;
  for (int wait = 0; wait < 400 && !locked; ++wait) {  // the lock file names the job once it holds it
    locked = read_text(ckpt + "/.headroom.lock") == pid + "\n";
    int status = 0;
    if (!locked && waitpid(job, &status, WNOHANG) == job) {
#ifdef HEADROOM_TRAINER_BUILT
      FAIL("headroom-train was built, but run ended before locking " << ckpt);
#endif
      MESSAGE("skipped: run ended before locking (built without LibTorch?)");
      return;
    }
    if (!locked) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const RunOutput second = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --resume " + quoted(ckpt));
  kill(job, SIGTERM);
  waitpid(job, nullptr, 0);
  REQUIRE(locked);
  CHECK(second.exit_code == 1);
  CHECK_MESSAGE(contains(second.err, "--resume " + ckpt + ": in use by another job (PID " + pid + ")"), second.err);
  const RunOutput after = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --checkpoint-dir " + quoted(ckpt));
  CHECK_MESSAGE(after.exit_code == 0, after.err);
  CHECK(contains(run_headroom("run --help").out, "DIR is locked while the job runs"));
}

}  // namespace headroom
