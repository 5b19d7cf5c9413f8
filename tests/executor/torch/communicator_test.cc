// The communication seam (executor/communicator.h): the one-process identity,
// torchrun's environment, and c10d's Gloo group across real processes started
// as torchrun starts them (tests/executor/torch/comm_worker_main.cc).
#include <doctest/doctest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/cuda.h>

#include "executor/communicator.h"
#include "executor/nccl_communicator.h"
#include "tests/executor/torch/run_test_support.h"

// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

extern char** environ;

namespace headroom::executor {
namespace {


struct JobResult {
  std::vector<int> exit_codes;  // per rank
  double seconds = 0;           // until every rank but the last had ended
};

// Starts `world` comm_worker processes with torchrun's variables and waits for all.
JobResult run_job(int world, const std::string& scenario, int timeout_ms) {
  const int port = run_test::free_port();
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.starts_with("RANK=") || entry.starts_with("WORLD_SIZE=") || entry.starts_with("MASTER_")) continue;
      env_strings.push_back(entry);
    }
    env_strings.push_back("RANK=" + std::to_string(rank));
    env_strings.push_back("WORLD_SIZE=" + std::to_string(world));
    env_strings.push_back("MASTER_ADDR=127.0.0.1");
    env_strings.push_back("MASTER_PORT=" + std::to_string(port));
    env_strings.push_back("HEADROOM_COMM_TIMEOUT_MS=" + std::to_string(timeout_ms));
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string program = HEADROOM_COMM_WORKER;
    std::string argument = scenario;
    char* argv[] = {program.data(), argument.data(), nullptr};
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
    pids.push_back(pid);
  }
  JobResult out;
  const auto wait_for = [&](pid_t pid) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    out.exit_codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  };
  for (size_t r = 0; r + 1 < pids.size(); ++r) wait_for(pids[r]);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A hanging last rank is stopped once the others have given up on it.
  if (scenario == "hang") ::kill(pids.back(), SIGKILL);
  wait_for(pids.back());
  return out;
}

}  // namespace

TEST_CASE("one process: every collective is the identity") {
  std::unique_ptr<Communicator> comm = single_process_communicator();
  CHECK(comm->rank() == 0);
  CHECK(comm->world_size() == 1);
  at::Tensor t = at::arange(4, at::kFloat);
  CHECK(comm->all_reduce_sum(t).is_ok());
  CHECK(at::equal(t, at::arange(4, at::kFloat)));
  at::Tensor out = at::zeros({4});
  CHECK(comm->reduce_scatter_sum(t, out).is_ok());
  CHECK(at::equal(out, t));
  at::Tensor gathered = at::zeros({4});
  CHECK(comm->all_gather(t, gathered).is_ok());
  CHECK(at::equal(gathered, t));
  CHECK(comm->broadcast(t, 0).is_ok());
  CHECK_FALSE(comm->broadcast(t, 1).is_ok());
  CHECK(comm->barrier().is_ok());
}

TEST_CASE("torchrun's environment: all four variables, or none for one process") {
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(name);
  Result<Rendezvous> alone = rendezvous_from_environment();
  REQUIRE(alone.is_ok());
  CHECK(alone->world_size == 1);
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("MASTER_ADDR", "10.0.0.2", 1);
  Result<Rendezvous> partial = rendezvous_from_environment();
  REQUIRE_FALSE(partial.is_ok());
  CHECK(partial.message().find("environment: MASTER_PORT: not set") == 0);
  ::setenv("MASTER_PORT", "29501", 1);
  Result<Rendezvous> full = rendezvous_from_environment();
  REQUIRE_MESSAGE(full.is_ok(), full.message());
  CHECK(full->rank == 1);
  CHECK(full->world_size == 4);
  CHECK(full->master_addr == "10.0.0.2");
  CHECK(full->master_port == 29501);
  ::setenv("RANK", "4", 1);
  Result<Rendezvous> out_of_range = rendezvous_from_environment();
  REQUIRE_FALSE(out_of_range.is_ok());
  CHECK(out_of_range.message().find("environment: RANK=\"4\": expected a whole number in [0, 3]") == 0);
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(name);
}

TEST_CASE("Gloo: every collective on 2 and 4 processes, fp32 and bf16") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    const JobResult job = run_job(world, "collectives", 30'000);
    CHECK(job.exit_codes == std::vector<int>(world, 0));
  }
}

TEST_CASE("Gloo: a rank that dies ends the others' collective with an error at once") {
  const JobResult job = run_job(3, "die", 30'000);
  CHECK(job.exit_codes == std::vector<int>{0, 0, 3});  // the survivors saw an error; the victim exited 3
  CHECK(job.seconds < 60);
}

TEST_CASE("Gloo: a rank that hangs ends the others' collective with an error at the timeout") {
  // The victim sleeps 120 s; the survivors must give up after the 3 s timeout.
  const JobResult job = run_job(2, "hang", 3'000);
  CHECK(job.exit_codes == std::vector<int>{0, 128 + SIGKILL});
  CHECK(job.seconds < 30);
}

TEST_CASE("the NCCL group is built against CUDA LibTorch, and without a GPU joining it says so") {
#ifdef USE_C10D_NCCL
  // torch_cuda defines USE_C10D_NCCL: this build found NCCL's header beside it.
  CHECK(nccl_built());
#endif
  if (torch::cuda::is_available()) return;  // the GPU path itself runs in bench/gpu_validation.sh
  Rendezvous alone;
  alone.world_size = 2;
  Result<std::unique_ptr<Communicator>> joined = connect_nccl(alone, 0);
  REQUIRE_FALSE(joined.is_ok());
  CHECK(joined.message().find(nccl_built() ? "no CUDA device is visible" : "built without") != std::string::npos);
}

}  // namespace headroom::executor
