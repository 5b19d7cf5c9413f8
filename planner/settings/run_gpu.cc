#include "planner/settings/run_gpu.h"

#include <string>

namespace headroom::planner {
namespace {

bool is_fp16(Precision precision) {
  return precision == Precision::kFp16Mixed || precision == Precision::kFp16Amp;
}

bool is_bf16(Precision precision) {
  return precision == Precision::kBf16Mixed || precision == Precision::kBf16Pure ||
         precision == Precision::kBf16Amp;
}

}  // namespace

Status check_gpu_precision(const GpuSpec& gpu, Precision precision) {
  if (!is_bf16(precision) || supports_bf16(gpu)) return Status::ok();
  // bf16 tensor cores arrived with Ampere (sm_80); torch.cuda.is_bf16_supported()
  // is false on Volta (sm_70) and Turing (sm_75) without emulation.
  return Status::invalid_input("precision: " + std::string(precision_name(precision)) + " needs bf16, which " +
                               gpu.name + " (" + gpu.architecture +
                               ") does not have; expected fp16 mixed precision: --precision fp16-amp "
                               "(PyTorch AMP, the Trainer's fp16=True) or fp16-mixed (16-bit weights "
                               "with fp32 master copies, DeepSpeed's fp16)");
}

Result<GpuSpec> run_gpu(const RunSettings& settings) {
  GpuSpec gpu;
  if (settings.gpu_spec) {
    gpu = *settings.gpu_spec;
  } else {
    Result<GpuSpec> found = find_gpu(settings.gpu);
    if (!found.is_ok()) return found.status();
    gpu = found.value();
  }
  if (settings.gpu_memory_bytes) gpu = with_memory(gpu, *settings.gpu_memory_bytes);
  if (Status status = check_gpu_precision(gpu, settings.precision); !status.is_ok()) return status;
  return gpu;
}

double tensor16_tflops(const GpuSpec& gpu, Precision precision) {
  return is_fp16(precision) ? gpu.fp16_tflops : gpu.bf16_tflops;
}

}  // namespace headroom::planner
