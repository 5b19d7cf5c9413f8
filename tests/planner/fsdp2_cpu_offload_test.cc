// FSDP2 with CPUOffloadPolicy (torch/distributed/fsdp/_fully_shard, torchtune
// fsdp_cpu_offload): sharded parameters, their gradients and the optimizer on
// the host; no DeepSpeed buckets on the GPU; the host AdamW in the parameters'
// dtype. docs/stacks.md, "FSDP2".
#include <doctest/doctest.h>

#include <string>

#include "planner/memory/allocator_rounding.h"
#include "planner/predict/model_context.h"
#include "planner/memory/model_states.h"
#include "planner/predict/simulator.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/step_time.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// torchtune's 70B full recipe with fsdp_cpu_offload, on the 1B config: pure bf16,
// 8 GPUs, FSDP2 with parameters and optimizer offloaded.
RunSettings torchtune_offload() {
  RunSettings s = torchtune_llama_1b();
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.offload_param = Offload::kCpu;
  s.offload_optimizer = Offload::kCpu;
  s.host_ram_bytes = int64_t{1} << 40;
  return s;
}

}  // namespace

TEST_CASE("FSDP2 CPU offload: shards, gradients and AdamW states on the host in bf16, none of them on the GPU") {
  const RunSettings s = torchtune_offload();
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const GlobalConfig config = user_config(s);
  CHECK(fsdp_cpu_offload(s, config));
  const ModelStates states = model_states(context->graph, s, config, Accounting::kAllocated);
  // Only the buffers stay on the GPU: torchtune's one shared RoPE cache (fully_shard
  // moves buffers to the device and offloads parameters only).
  CHECK(states.params == states.buffers);
  CHECK(states.optimizer == 0);
  CHECK(states.master == 0);
  CHECK(states.grads_full == 0);
  // No DeepSpeed reduce bucket: FSDP2 reduce-scatters each group's gradients itself.
  CHECK(states.comm_buckets == 0);
  // Per rank: the bf16 shard (2 B), its bf16 gradient (2 B: foreach_reduce casts the
  // reduce output to the parameter's dtype) and two bf16 AdamW moments (4 B), so 8 B
  // per parameter over the 8 ranks of the node; shards rounded up per tensor.
  const double total = static_cast<double>(states.total_params);
  CHECK(static_cast<double>(states.host_offload) == doctest::Approx(8.0 * total).epsilon(0.001));
  CHECK(static_cast<double>(states.host_shard_bytes) == doctest::Approx(2.0 * total / 8).epsilon(0.001));
  CHECK(static_cast<double>(states.host_grad_bytes) == doctest::Approx(2.0 * total / 8).epsilon(0.001));
  // The GPU still all-gathers two layers ahead and the root group, as without offload.
  CHECK(states.gathered_params > 0);
}

TEST_CASE("FSDP2 CPU offload steps torch AdamW on bf16 host shards and copies nothing back") {
  const RunSettings s = torchtune_offload();
  CHECK(host_adam_bytes_per_param(s, user_config(s)) == 14);  // 7 x 2 B: p, g, two moments
  RunSettings zero_offload = s;
  zero_offload.stack = Stack::kDeepspeed;
  CHECK(host_adam_bytes_per_param(zero_offload, user_config(zero_offload)) == 28);
}

TEST_CASE("FSDP2 offloads parameters and the optimizer together or not at all") {
  RunSettings s = torchtune_offload();
  s.offload_optimizer = Offload::kNone;
  const Status params_only = validate_settings(s, "test");
  REQUIRE_FALSE(params_only.is_ok());
  CHECK(params_only.message().find("offload_optimizer") != std::string::npos);
  CHECK(params_only.message().find("CPUOffloadPolicy") != std::string::npos);
  s.offload_optimizer = Offload::kCpu;
  s.offload_param = Offload::kNone;
  const Status optimizer_only = validate_settings(s, "test");
  REQUIRE_FALSE(optimizer_only.is_ok());
  CHECK(optimizer_only.message().find("offload_param") != std::string::npos);
  // DeepSpeed's ZeRO-3 offloads them separately.
  s.stack = Stack::kDeepspeed;
  CHECK(validate_settings(s, "test").is_ok());
}

TEST_CASE("FSDP2 CPU offload predicts less GPU memory than keeping the shards on the GPU") {
  RunSettings on_gpu = torchtune_offload();
  on_gpu.offload_param = Offload::kNone;
  on_gpu.offload_optimizer = Offload::kNone;
  const Prediction kept = predict_as_given(on_gpu);
  const Prediction offloaded = predict_as_given(torchtune_offload());
  CHECK(offloaded.peak_allocated < kept.peak_allocated);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("under CPU offload with the fp8 all-gather, a shard is staged as fp32 and cast to fp8") {
  // torchtitan's 8B recipe shape on Llama 3.2 1B: bf16-mixed (fp32 shards), FSDP2 with
  // CPUOffloadPolicy on 8 GPUs, Float8Linear weights all-gathered in fp8.
  RunSettings s = torchtune_llama_1b();
  s.stack = Stack::kTorchtitan;
  s.gpu = "h100-sxm";
  s.precision = Precision::kBf16Mixed;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.offload_param = Offload::kCpu;
  s.offload_optimizer = Offload::kCpu;
  s.host_ram_bytes = int64_t{1} << 40;
  s.float8 = Float8Recipe::kTensorwise;
  s.float8_all_gather = true;
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const std::vector<BlockChoice> keep(context->graph.blocks.size(), BlockChoice::kKeep);
  const Simulation sim = simulate(context.value(), s, user_config(s), keep, SimulatorOptions{});
  // Layer 3: its fp32 shard (4 B per weight, its 16-bit storage twice) copied in, plus
  // that shard cast to what is gathered (fp8 for the linears, bf16 for the norms).
  int layer = -1;
  for (size_t b = 0; b < context->graph.blocks.size(); ++b) {
    if (context->graph.blocks[b].name == "model.layers.3") layer = static_cast<int>(b);
  }
  REQUIRE(layer >= 0);
  const int64_t stored = (block_param_bytes(context->graph, s.precision)[layer] + 7) / 8;
  const int64_t gathered = (block_gathered_bytes(context->graph, s)[layer] + 7) / 8;
  REQUIRE(gathered < stored);  // the fp8 linears gather half their bf16 bytes
  const int64_t staged = allocated_bytes_for_request(2 * stored + gathered);
  const int64_t old_formula = allocated_bytes_for_request(3 * gathered);  // the bf16-cast staging
  bool found = false;
  bool old_found = false;
  for (size_t i = 1; i < sim.memory.size(); ++i) {
    const int64_t delta = sim.memory[i].allocated - sim.memory[i - 1].allocated;
    found = found || delta == staged;
    old_found = old_found || delta == old_formula;
  }
  CHECK(found);
  CHECK_FALSE(old_found);
}

}  // namespace headroom::planner
