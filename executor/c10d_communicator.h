// The Communicator over any c10d process group (Gloo on CPUs, NCCL on GPUs),
// and the TCPStore rendezvous both use: rank 0 serves the store, every group's
// keys under a prefix of their own. Only built with LibTorch.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <memory>
#include <string>

#include "executor/communicator.h"

namespace headroom::executor {

// Runs on the tensor a collective is handed and on what it hands back: the NCCL
// group works on CUDA tensors, so CPU tensors (a plan digest, a loss) take a
// device copy in and back. Empty for Gloo.
using StageTensor = std::function<at::Tensor(const at::Tensor&)>;

// `backend` over `store` (kept alive: rank 0 serves it). `to_group` moves a
// tensor where the group computes, `from_group` back to the caller's device.
std::unique_ptr<Communicator> c10d_communicator(c10::intrusive_ptr<c10d::Store> store,
                                                c10::intrusive_ptr<c10d::Backend> backend, std::string name,
                                                StageTensor to_group = {});

// The rendezvous store: a c10d::TCPStore at MASTER_ADDR:MASTER_PORT, served by
// rank 0. Throws c10 errors as c10d does; the callers catch them.
c10::intrusive_ptr<c10d::Store> rendezvous_store(const Rendezvous& rendezvous,
                                                 c10::intrusive_ptr<c10d::Store>* raw = nullptr);

// "rendezvous at ADDR:PORT as rank R of N: WHY (expected ...)".
Status rendezvous_error(const Rendezvous& rendezvous, const std::string& why);

}  // namespace headroom::executor
