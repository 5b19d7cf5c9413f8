// The CUDA compute capability (major.minor) of each catalogued GPU: what
// torch.cuda.get_device_properties reports as major and minor, which bitsandbytes'
// gemm_4bit dispatch reads (mechanisms/bnb_gemm_dispatch.h). Kept beside the
// catalogue rather than in GpuSpec: only that dispatch reads it.
#pragma once

#include <optional>
#include <string_view>

namespace headroom::planner {

struct ComputeCapability {
  int major = 0;
  int minor = 0;
};

// The capability of the catalogue GPU with id `gpu_id` (GpuSpec::id, exact), or
// nullopt for an id the table does not hold (a --gpu-file GPU's own id).
std::optional<ComputeCapability> compute_capability(std::string_view gpu_id);

}  // namespace headroom::planner
