// A Communicator over PyTorch's c10d NCCL process group: the GPU path of a
// job of several ranks (issue 11), the ranks meeting at the same TCPStore as
// Gloo's. Built when LibTorch has CUDA (torch_cuda, which defines
// USE_C10D_NCCL) and NCCL's header of the version torch was built with is
// found (the wheel's nvidia-nccl package); docs/executor.md, "Several processes".
#pragma once

#include <memory>

#include "executor/communicator.h"

namespace headroom::executor {

// Whether this build has the NCCL group.
bool nccl_built();

// Joins the group on CUDA device `device_index` (LOCAL_RANK): sets it as the
// current device, then blocks until every rank has joined or the rendezvous
// timeout passes. Tensors handed to a collective may live on the CPU; they take
// a copy on the device in and back. Without a CUDA device, or in a build
// without NCCL, an error saying which.
Result<std::unique_ptr<Communicator>> connect_nccl(const Rendezvous& rendezvous, int device_index);

}  // namespace headroom::executor
