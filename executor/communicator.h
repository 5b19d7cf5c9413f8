// The collectives a data-parallel trainer needs among the ranks of one job
// (issue 11): one process alone, or PyTorch's c10d process groups (Gloo on
// CPUs, executor/gloo_communicator.h), the same engine DeepSpeed and FSDP use.
// Only built with LibTorch.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "graph/status.h"

namespace headroom::executor {

// Every collective works on contiguous tensors of the same dtype on every rank
// and blocks until this rank's part is done. A failure (a peer gone or silent
// beyond the timeout) comes back as an error naming the collective; the group
// is unusable afterwards.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Sums `tensor` over the ranks, in place.
  virtual Status all_reduce_sum(at::Tensor& tensor) = 0;
  // `input` holds world_size() equal chunks; rank r receives the sum of every
  // rank's chunk r in `output` (input.numel() == world_size() * output.numel()).
  virtual Status reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) = 0;
  // Rank r's `input` lands in chunk r of `output` on every rank
  // (output.numel() == world_size() * input.numel()).
  virtual Status all_gather(const at::Tensor& input, at::Tensor& output) = 0;
  // `tensor` takes rank `root`'s values on every rank.
  virtual Status broadcast(at::Tensor& tensor, int root) = 0;
  virtual Status barrier() = 0;
};

// The job of one process: every collective is the identity.
std::unique_ptr<Communicator> single_process_communicator();

// Where the ranks of a job meet, as torchrun describes it in the environment.
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // this rank's GPU on its machine (LOCAL_RANK; RANK when unset)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // How long a collective (and joining the group) may wait for a peer.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// Reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun sets them
// (and LOCAL_RANK, optional);
// none of them set means one process. Some set without the others, or values
// out of range, is an error naming the variable.
Result<Rendezvous> rendezvous_from_environment();

}  // namespace headroom::executor
