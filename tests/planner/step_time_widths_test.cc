// The time model moves and steps each tensor at the width the memory model stores
// it: under PyTorch AMP (autocast over fp32 weights) parameters and gradients are
// fp32, so collectives and the optimizer step move 4 bytes where bf16 mixed
// precision moves 2.
#include <doctest/doctest.h>

#include "planner/settings/hardware.h"
#include "planner/memory/model_states.h"
#include "planner/time/step_time.h"

namespace headroom::planner {
namespace {

RunSettings eight_gpus(Precision precision) {
  RunSettings s;
  s.precision = precision;
  s.gpus_per_node = 8;
  s.overlap_comm = false;  // every collective exposed
  return s;
}

ModelStates one_billion() {
  ModelStates states;
  states.trainable_params = states.total_params = 1'000'000'000;
  return states;
}

double comm_ms(Precision precision, int zero_stage) {
  GlobalConfig config;
  config.zero_stage = zero_stage;
  return step_time(eight_gpus(precision), config, find_gpu("h100-sxm").value(), one_billion(), StepTimeInputs{})
      .comm_exposed_ms;
}

TEST_CASE("DDP all-reduces AMP's fp32 gradients: twice the bytes of bf16 mixed precision") {
  const GpuSpec gpu = find_gpu("h100-sxm").value();
  const double ring = 2.0 * 7 / 8 * 1e9;  // all-reduce: two phases of (N-1)/N
  CHECK(comm_ms(Precision::kBf16Mixed, 0) == doctest::Approx(transfer_ms(ring * 2, gpu.nvlink_gbps)));
  CHECK(comm_ms(Precision::kBf16Amp, 0) == doctest::Approx(transfer_ms(ring * 4, gpu.nvlink_gbps)));
  CHECK(comm_ms(Precision::kFp16Amp, 0) == doctest::Approx(transfer_ms(ring * 4, gpu.nvlink_gbps)));
  CHECK(comm_ms(Precision::kFp32, 0) == doctest::Approx(transfer_ms(ring * 4, gpu.nvlink_gbps)));
}

TEST_CASE("ZeRO-1 all-gathers the updated parameters in their stored dtype") {
  const GpuSpec gpu = find_gpu("h100-sxm").value();
  const double all_reduce = 2.0 * 7 / 8 * 1e9;
  const double all_gather = 7.0 / 8 * 1e9;
  // bf16 mixed: 16-bit gradients reduced, 16-bit parameters gathered.
  CHECK(comm_ms(Precision::kBf16Mixed, 1) ==
        doctest::Approx(transfer_ms(all_reduce * 2, gpu.nvlink_gbps) + transfer_ms(all_gather * 2, gpu.nvlink_gbps)));
  // fp32: both at 4 bytes (the gather took 2 before).
  CHECK(comm_ms(Precision::kFp32, 1) ==
        doctest::Approx(transfer_ms(all_reduce * 4, gpu.nvlink_gbps) + transfer_ms(all_gather * 4, gpu.nvlink_gbps)));
}

TEST_CASE("ZeRO-3 gathers fp32 parameters under AMP and 16-bit ones under mixed precision") {
  // Two gathers per micro-step (forward, backward) plus the reduce-scatter.
  const GpuSpec gpu = find_gpu("h100-sxm").value();
  const double ring = 7.0 / 8 * 1e9;
  CHECK(comm_ms(Precision::kBf16Mixed, 3) == doctest::Approx(transfer_ms(ring * 2 + 2 * ring * 2, gpu.nvlink_gbps)));
  CHECK(comm_ms(Precision::kFp32, 3) == doctest::Approx(transfer_ms(ring * 4 + 2 * ring * 4, gpu.nvlink_gbps)));
}

TEST_CASE("the GPU optimizer step reads AMP's fp32 parameters and gradients") {
  const GpuSpec gpu = find_gpu("a100-80g").value();
  GlobalConfig config;
  RunSettings amp;
  amp.precision = Precision::kBf16Amp;
  RunSettings mixed;
  mixed.precision = Precision::kBf16Mixed;
  const double rate = gpu.memory_bandwidth_gbps * 0.7;
  // AMP: fp32 parameter read and written (8), fp32 gradient read (4), two fp32
  // moments read and written (16), no master copy: 28 bytes.
  CHECK(step_time(amp, config, gpu, one_billion(), StepTimeInputs{}).optimizer_ms ==
        doctest::Approx(transfer_ms(1e9 * 28, rate)));
  // bf16 mixed: 16-bit parameter written back (2 + 2), 16-bit gradient (2), fp32
  // master read and written (8), moments (16): 30 bytes.
  CHECK(step_time(mixed, config, gpu, one_billion(), StepTimeInputs{}).optimizer_ms ==
        doctest::Approx(transfer_ms(1e9 * 30, rate)));
}

}  // namespace
}  // namespace headroom::planner
