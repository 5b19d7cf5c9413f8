// FSDP1's CPUOffload(offload_params=True) and its whole-model wrapping (no
// auto_wrap_policy): what stays on the GPU, what goes to the host, and how the
// time model treats one unit. Read from torch 2.11's torch/distributed/fsdp/
// (_flat_param.py, _runtime_utils.py); docs/memory-model.md, "FSDP1".
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "planner/memory/fsdp_units.h"
#include "planner/settings/hardware.h"
#include "planner/predict/model_context.h"
#include "planner/memory/model_states.h"
#include "planner/predict/simulator.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/step_time.h"
#include "tests/planner/predict_as_given.h"
#include "tests/planner/two_layer_graph.h"

namespace headroom::planner {
namespace {

RunSettings offloaded_fsdp1() {
  RunSettings s;
  s.precision = Precision::kBf16Mixed;
  s.gpus_per_node = 8;
  s.sharding = Sharding::kFsdp1;
  s.zero_stage = 3;
  s.offload_param = Offload::kCpu;
  s.offload_optimizer = Offload::kCpu;
  return s;
}

// A real model through the whole prediction: Llama 3.2 1B, bf16 mixed, 8 GPUs.
RunSettings llama_1b_fsdp1(bool offload) {
  RunSettings s = torchtune_llama_1b();
  s.stack = Stack::kUnspecified;
  s.precision = Precision::kBf16Mixed;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp1;
  s.host_ram_bytes = int64_t{1} << 40;
  if (offload) {
    s.offload_param = Offload::kCpu;
    s.offload_optimizer = Offload::kCpu;
  }
  return s;
}

}  // namespace

TEST_CASE("FSDP1 CPUOffload: the fp32 shards, their gradients and AdamW's states on the host") {
  const graph::LayerGraph graph = two_layers();
  const RunSettings s = offloaded_fsdp1();
  const GlobalConfig config = user_config(s);
  REQUIRE(fsdp_cpu_offload(s, config));
  const ModelStates states = model_states(graph, s, config, Accounting::kAllocated);
  // Nothing of the model's states stays on the GPU between steps, and no DeepSpeed bucket.
  CHECK(states.params == 0);
  CHECK(states.grads_full == 0);
  CHECK(states.optimizer == 0);
  CHECK(states.master == 0);
  CHECK(states.comm_buckets == 0);
  // Per unit the pinned _local_shard and _cpu_grad, fp32 (the FlatParameter keeps
  // the model's dtype; MixedPrecision casts only a copy): 125,000,001 elements a
  // layer and 126 for the root (1,001 padded to 1,008).
  CHECK(states.host_shard_bytes == (2 * 125'000'001 + 126) * 4);
  CHECK(states.host_grad_bytes == (2 * 125'000'001 + 126) * 4);
  // Each unit's sharded gradient stays on the GPU from its reduce-scatter to the
  // final callback (_saved_grad_shard), in the shard's dtype.
  REQUIRE(states.offload_grad_shards.size() == 3);
  CHECK(states.offload_grad_shards[0] == 0);  // the embeddings are the root's
  CHECK(states.offload_grad_shards[1] == rounded(125'000'001 * 4));
  CHECK(states.offload_grad_shards[2] == rounded(125'000'001 * 4));
  CHECK(states.root_offload_grad_shard == rounded(126 * 4));
  // Host RAM for the node's 8 ranks: per rank the fp32 shard (4 B), its fp32
  // gradient (4 B) and two fp32 AdamW moments (8 B), shard by parameter:
  // 1,000,000,505 B of shards, as many of gradients, 2,000,001,007 of states.
  CHECK(states.host_offload == (1'000'000'505LL * 2 + 2'000'001'007LL) * 8);
  // The host AdamW reads and writes the fp32 shards in place: 28 B a parameter, nothing copied back.
  CHECK(host_adam_bytes_per_param(s, config) == 28);
}

TEST_CASE("FSDP1 CPUOffload frees the GPU of the sharded states, and pays for shard copies and held gradient shards") {
  const Prediction kept = predict_as_given(llama_1b_fsdp1(false));
  const Prediction offloaded = predict_as_given(llama_1b_fsdp1(true));
  // 1.24 B parameters over 8 ranks: 0.62 GB of fp32 shards and as much of gradients,
  // 1.24 GB of AdamW states, all on the host now.
  const Result<ModelContext> context = prepare_context(llama_1b_fsdp1(true));
  REQUIRE(context.is_ok());
  const ModelStates on_gpu =
      model_states(context->graph, llama_1b_fsdp1(false), user_config(llama_1b_fsdp1(false)), Accounting::kAllocated);
  const int64_t states_bytes = on_gpu.params + on_gpu.grads_full + on_gpu.optimizer;
  const int64_t saved = kept.peak_allocated - offloaded.peak_allocated;
  CHECK(saved > states_bytes / 2);
  CHECK(saved <= states_bytes);  // held gradient shards and shard copies may count at the peak

  // The final callback: every unit's gradient shard is still on the GPU when the
  // root's reduce-scatter is done, and all of them go once the copies are synchronised.
  const RunSettings s = llama_1b_fsdp1(true);
  const GlobalConfig config = user_config(s);
  const ModelStates states = model_states(context->graph, s, config, Accounting::kAllocated);
  int64_t held = states.root_offload_grad_shard;
  for (int64_t shard : states.offload_grad_shards) held += shard;
  CHECK(held > 0);
  const std::vector<BlockChoice> choices = user_block_choices(context.value(), s).value();
  const Simulation sim = simulate(context.value(), s, config, choices);
  int64_t at_callback = -1, after_callback = -1;
  for (const MemorySample& sample : sim.memory) {
    if (sample.label == "reduce-scatter root group") at_callback = sample.allocated;
    if (sample.label == "gradients to host") after_callback = sample.allocated;
  }
  REQUIRE(at_callback >= 0);
  REQUIRE(after_callback >= 0);
  CHECK(at_callback - after_callback == held);
  // Under MixedPrecision the root's shard is copied in and cast again at its
  // pre-backward; without it (autocast over fp32 FlatParameters) the root is already there.
  const auto restaged = [](const Simulation& run) {
    for (const MemorySample& sample : run.memory) {
      if (sample.label == "copy in root shard for backward") return true;
    }
    return false;
  };
  CHECK(restaged(sim));
  RunSettings amp = s;
  amp.precision = Precision::kBf16Amp;
  const Result<ModelContext> amp_context = prepare_context(amp);
  REQUIRE(amp_context.is_ok());
  CHECK_FALSE(restaged(simulate(amp_context.value(), amp, user_config(amp), user_block_choices(amp_context.value(), amp).value())));
  // The time: the shards are copied in twice a step and the gradients out once,
  // and AdamW runs on the host.
  CHECK(offloaded.time.optimizer_ms > kept.time.optimizer_ms);
  CHECK(offloaded.host_ram > kept.host_ram);
}

TEST_CASE("FSDP1 without an auto_wrap_policy: the whole model is the root unit, gathered once and never hidden") {
  const graph::LayerGraph graph = two_layers();
  RunSettings s = offloaded_fsdp1();
  s.fsdp_wrap = FsdpWrap::kModel;
  const std::vector<FlatParamUnit> units = flat_param_units(graph, s);
  REQUIRE(units.size() == 1);
  CHECK(units[0].root);
  CHECK(units[0].elements == 2'000'001'007);
  const GlobalConfig config = user_config(s);
  const ModelStates states = model_states(graph, s, config, Accounting::kAllocated);
  // Every parameter is the root's: gathered at its pre-forward, kept through
  // backward (_post_forward_reshard skips the root), one gradient shard at the end.
  CHECK(states.fsdp2_root_params == rounded(2'000'001'007LL * 2));
  CHECK(states.gathered_params == states.fsdp2_root_params);  // no layer unit in flight beside it
  CHECK(states.root_offload_grad_shard == rounded(250'000'126LL * 4));
  CHECK(states.offload_grad_shards[1] == 0);
  CHECK(states.host_shard_bytes == 250'000'126LL * 4);

  // One unit: its all-gather precedes all compute and its reduce-scatter follows it.
  const GpuSpec gpu = find_gpu("a100-80g").value();
  StepTimeInputs in;
  in.seq_len = 2048;
  in.micro_fwd_ms = 1e6;  // compute long enough to hide any communication of a layer-wrapped model
  in.micro_bwd_ms = 2e6;
  CHECK(step_time(s, config, gpu, states, in).comm_exposed_ms > 0);
  RunSettings layers = offloaded_fsdp1();
  const ModelStates layer_states = model_states(graph, layers, config, Accounting::kAllocated);
  CHECK(step_time(layers, config, gpu, layer_states, in).comm_exposed_ms == 0);
  // The root is all-gathered once a micro-step: half the traffic of gathering for forward and backward.
  RunSettings exposed = s;
  exposed.overlap_comm = false;
  RunSettings no_offload = exposed;
  no_offload.offload_param = Offload::kNone;
  no_offload.offload_optimizer = Offload::kNone;
  const ModelStates kept = model_states(graph, no_offload, user_config(no_offload), Accounting::kAllocated);
  const double gather_and_reduce = step_time(no_offload, user_config(no_offload), gpu, kept, in).comm_exposed_ms;
  const double gathered = 2'000'001'007.0 * 2;
  const double reduced = 2'000'001'007.0 * 4;  // fp32 reduce under mixed precision
  CHECK(gather_and_reduce == doctest::Approx(transfer_ms(7.0 / 8 * (gathered + reduced), gpu.nvlink_gbps)));
}

TEST_CASE("FSDP1's wrapping is a setting of FSDP1 at stage 3, and round-trips through settings JSON") {
  RunSettings s = offloaded_fsdp1();
  s.fsdp_wrap = FsdpWrap::kModel;
  REQUIRE(validate_settings(s, "t.json").is_ok());
  const nlohmann::json j = settings_to_json(s);
  CHECK(j["fsdp_wrap"] == "model");
  const Result<RunSettings> back = settings_from_json(j, "t.json");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  CHECK(back->fsdp_wrap == FsdpWrap::kModel);
  CHECK_FALSE(settings_to_json(offloaded_fsdp1()).contains("fsdp_wrap"));
  nlohmann::json bad = j;
  bad["fsdp_wrap"] = "size";
  CHECK(settings_from_json(bad, "t.json").message().find("t.json: settings.fsdp_wrap") != std::string::npos);
  RunSettings fsdp2 = s;
  fsdp2.sharding = Sharding::kFsdp2;
  CHECK(validate_settings(fsdp2, "t.json").message().find("t.json: fsdp_wrap: ") == 0);
}

}  // namespace headroom::planner
