// A Communicator over PyTorch's c10d Gloo process group (CPU tensors), the
// ranks meeting at a c10d::TCPStore that rank 0 serves: what
// `torchrun --no-python --nproc-per-node N headroom run` and `--nproc N` start.
// Only built with LibTorch and gloo's headers (docs/executor.md, "Several processes").
#pragma once

#include <memory>

#include "executor/communicator.h"

namespace headroom::executor {

// Joins the group: blocks until every rank has joined, or fails after the
// rendezvous timeout with a message naming the address and the ranks missing.
Result<std::unique_ptr<Communicator>> connect_gloo(const Rendezvous& rendezvous);

}  // namespace headroom::executor
