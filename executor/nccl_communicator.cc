#include "executor/nccl_communicator.h"

#include <exception>

#ifdef HEADROOM_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "executor/c10d_communicator.h"
#endif

namespace headroom::executor {

#ifdef HEADROOM_WITH_NCCL

bool nccl_built() { return true; }

Result<std::unique_ptr<Communicator>> connect_nccl(const Rendezvous& rendezvous, int device_index) {
  const int devices = c10::cuda::device_count();
  if (devices == 0) {
    return Status::unsupported(
        "NCCL: no CUDA device is visible (expected a GPU per rank, or --device cpu for Gloo)");
  }
  if (device_index < 0 || device_index >= devices) {
    return Status::invalid_input("NCCL: LOCAL_RANK " + std::to_string(device_index) +
                                 " has no GPU of its own: " + std::to_string(devices) +
                                 " visible (expected one rank per GPU on each machine)");
  }
  try {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
    c10::intrusive_ptr<c10d::Store> tcp;
    c10::intrusive_ptr<c10d::Store> store = rendezvous_store(rendezvous, &tcp);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = rendezvous.timeout;
    auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rendezvous.rank, rendezvous.world_size, options);
    const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index));
    StageTensor to_device = [device](const at::Tensor& t) { return t.device() == device ? t : t.to(device); };
    return c10d_communicator(tcp, backend, "nccl", to_device);
  } catch (const std::exception& e) {
    return rendezvous_error(rendezvous, e.what());
  }
}

#else

bool nccl_built() { return false; }

Result<std::unique_ptr<Communicator>> connect_nccl(const Rendezvous&, int) {
  return Status::unsupported(
      "NCCL: this headroom was built without CUDA LibTorch or NCCL's header, so several ranks "
      "train on the CPU only "
      "(expected --device cpu, or a build against the CUDA wheel: scripts/setup_torch.sh)");
}

#endif

}  // namespace headroom::executor
