// One rank of a communicator test job, started by communicator_test.cc as
// torchrun would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). argv[1] names the
// scenario; the exit status says whether this rank saw what it should:
//   collectives  every collective in fp32 and bf16 gives the exact expected values
//   die          the last rank exits at once; the others must get an error back
//   hang         the last rank sleeps; the others must get an error within the timeout
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "executor/communicator.h"
#include "executor/gloo_communicator.h"

namespace {

using headroom::Status;
using headroom::executor::Communicator;

bool same(const at::Tensor& got, const at::Tensor& want, const char* what) {
  if (at::equal(got.to(at::kFloat), want.to(at::kFloat))) return true;
  std::fprintf(stderr, "comm_worker: %s: wrong values\n", what);
  return false;
}

bool ok(const Status& status) {
  if (!status.is_ok()) std::fprintf(stderr, "comm_worker: %s\n", status.message().c_str());
  return status.is_ok();
}

// Small whole numbers, exact in bf16 as well as fp32.
bool collectives(Communicator& comm, at::ScalarType dtype) {
  const int r = comm.rank();
  const int w = comm.world_size();
  const auto options = at::TensorOptions().dtype(dtype);
  const int64_t n = 6;
  bool good = true;
  at::Tensor sum = at::full({n}, r + 1, options);
  good &= ok(comm.all_reduce_sum(sum)) && same(sum, at::full({n}, w * (w + 1) / 2, options), "all_reduce");
  // Chunk j of rank r holds r + j: rank r receives the sum over ranks of (rank + r).
  at::Tensor input = (at::arange(w, options).repeat_interleave(n) + r).contiguous();
  at::Tensor mine = at::empty({n}, options);
  good &= ok(comm.reduce_scatter_sum(input, mine)) &&
          same(mine, at::full({n}, w * (w - 1) / 2 + w * r, options), "reduce_scatter");
  at::Tensor gathered = at::empty({w * n}, options);
  good &= ok(comm.all_gather(at::full({n}, 10 + r, options), gathered)) &&
          same(gathered, (at::arange(w, options) + 10).repeat_interleave(n), "all_gather");
  at::Tensor from_last = at::full({n}, r == w - 1 ? 7 : 0, options);
  good &= ok(comm.broadcast(from_last, w - 1)) && same(from_last, at::full({n}, 7, options), "broadcast");
  good &= ok(comm.barrier());
  return good;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "collectives";
  at::set_num_threads(1);
  headroom::Result<headroom::executor::Rendezvous> rendezvous = headroom::executor::rendezvous_from_environment();
  if (!rendezvous.is_ok()) {
    std::fprintf(stderr, "comm_worker: %s\n", rendezvous.message().c_str());
    return 2;
  }
  if (const char* ms = std::getenv("HEADROOM_COMM_TIMEOUT_MS")) {
    rendezvous->timeout = std::chrono::milliseconds(std::atoll(ms));
  }
  auto connected = headroom::executor::connect_gloo(rendezvous.value());
  if (!connected.is_ok()) {
    std::fprintf(stderr, "comm_worker: %s\n", connected.message().c_str());
    return 2;
  }
  Communicator& comm = *connected.value();
  const bool victim = comm.rank() == comm.world_size() - 1;
  if (scenario == "collectives") {
    const bool good = collectives(comm, at::kFloat) && collectives(comm, at::kBFloat16);
    return good ? 0 : 1;
  }
  if (scenario == "die" && victim) std::_Exit(3);
  if (scenario == "hang" && victim) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    std::_Exit(4);
  }
  if (scenario != "die" && scenario != "hang") return 2;
  at::Tensor t = at::ones({1 << 20});
  const Status status = comm.all_reduce_sum(t);
  if (status.is_ok()) {
    std::fprintf(stderr, "comm_worker: all_reduce succeeded with a rank gone\n");
    return 1;
  }
  std::fprintf(stderr, "comm_worker: as expected: %s\n", status.message().c_str());
  return 0;
}
