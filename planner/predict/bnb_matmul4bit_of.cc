#include "planner/predict/bnb_matmul4bit_of.h"

#include "planner/settings/bnb_release.h"
#include "planner/settings/gpu_compute_capability.h"
#include "planner/settings/hardware.h"

namespace headroom::planner {
namespace {

// The dispatch's (multiprocessor count, major, minor) for the run's GPU: only a catalogue
// GPU as catalogued; a user's own (--gpu-file) or resized (--gpu-mem) one may be another part.
std::optional<GemmArch> catalogue_arch(const RunSettings& settings) {
  if (settings.gpu_spec || settings.gpu_memory_bytes) return std::nullopt;
  const Result<GpuSpec> gpu = find_gpu(settings.gpu);
  if (!gpu.is_ok() || gpu.value().sm_count <= 0) return std::nullopt;
  const std::optional<ComputeCapability> capability = compute_capability(gpu.value().id);
  if (!capability) return std::nullopt;
  return GemmArch{capability->major, capability->minor, gpu.value().sm_count};
}

// bitsandbytes 0.50.2 nn/modules.py Linear4bit.forward casts x to compute_dtype before
// matmul_4bit: A's dtype is the compute dtype transformers passes
// (bnb_4bit_compute_dtype), the run's 16-bit dtype; fp32 only for an fp32 run.
graph::DType input_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return graph::DType::kF32;
    case Precision::kFp16Mixed:
    case Precision::kFp16Amp: return graph::DType::kF16;
    default: return graph::DType::kBF16;
  }
}

}  // namespace

// Over an fp32 model (AMP, fp32) dequantize_4bit returns fp32 in every release.
BnbMatmul4bit bnb_matmul4bit_of(const RunSettings& settings, std::optional<int64_t> seq) {
  const BnbRegime regime = bnb_regime(settings);
  const bool sixteen_bit = !is_autocast(settings.precision) && settings.precision != Precision::kFp32;
  BnbMatmul4bit out;
  out.keeps_input = regime.keeps_input;
  out.fp32_compute = regime.fp32_compute;
  out.sixteen_bit_weights = sixteen_bit;
  out.gemm_4bit_op = regime.gemm_dispatch;
  out.compute_dtype = input_dtype(settings.precision);
  if (!regime.gemm_dispatch || !seq) return out;
  if (const std::optional<GemmArch> arch = catalogue_arch(settings)) {
    out.gemm_dispatch = BnbMatmul4bit::GemmDispatch{*arch, settings.micro_batch, *seq};
  }
  return out;
}

}  // namespace headroom::planner
