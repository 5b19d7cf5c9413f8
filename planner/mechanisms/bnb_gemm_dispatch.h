// bitsandbytes' CUDA gemm_4bit dispatch (from 0.50.0): whether a 4-bit linear's forward
// runs the fused kernel, which allocates only its output, or dequantizes the whole
// weight to a 16-bit [N, K] tensor and runs F.linear (docs/stacks.md, "bitsandbytes
// releases"). A pure function of the GPU's compute capability and SM count, the
// input's dtype and the GEMM's M, N, K: the GPU side is resolved by the caller.
#pragma once

#include <cstdint>

#include "graph/dtype.h"

namespace headroom::planner {

// What torch.cuda.get_device_properties gives the dispatch (_gpu_dispatch_props):
// compute capability major.minor and the multiprocessor count (sm_count > 0).
struct GemmArch {
  int major = 0;
  int minor = 0;
  int sm_count = 0;
};

// The shape of one gemm_4bit: M rows of A (A.numel() / K), N = out_features,
// K = in_features, and the NF4 quantization blocksize.
struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t blocksize = 64;
};

// True when bitsandbytes 0.50.2's CUDA gemm_4bit runs the fused kernel for `shape`
// with an input of `dtype` (kBF16, kF16 or kF32) on `arch`; false when it falls back
// to the dequantized weight.
bool bnb_gemm_4bit_fused(const GemmArch& arch, graph::DType dtype, const GemmShape& shape);

}  // namespace headroom::planner
