// The GPU a run plans for: the catalogue's `gpu`, or the user's own GPU from
// --gpu-file, with --gpu-mem applied. One resolver, used by the planner and the
// command-line front end alike, so that a plan file's GPU is read one way.
#pragma once

#include "graph/status.h"
#include "planner/settings/hardware.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// settings.gpu_spec if given, else the catalogue entry named settings.gpu; then
// settings.gpu_memory_bytes replaces its memory. Refuses an unknown id and a
// 16-bit precision the GPU cannot run (check_gpu_precision).
Result<GpuSpec> run_gpu(const RunSettings& settings);

// Refuses bf16 precisions (bf16-mixed, bf16, bf16-amp) on a GPU without bf16
// (T4, V100): the message names the GPU and the fp16 choices to use instead.
Status check_gpu_precision(const GpuSpec& gpu, Precision precision);

// The dense tensor-core peak, TFLOPS, that 16-bit matmuls of `precision` run at:
// fp16_tflops for the fp16 precisions, bf16_tflops otherwise.
double tensor16_tflops(const GpuSpec& gpu, Precision precision);

}  // namespace headroom::planner
