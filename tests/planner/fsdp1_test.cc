// FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel) as a ZeRO-3 flavour
// (planner/memory/fsdp_units.h, docs/memory-model.md "FSDP1"), who picks it (the
// sharding setting, the composer stack), the reduce dtype in memory and time,
// and llm-foundry's fused cross-entropy.
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "models/zoo.h"
#include "planner/memory/fsdp_units.h"
#include "planner/settings/hardware.h"
#include "planner/mechanisms/loss_variants.h"
#include "planner/mechanisms/trainability.h"
#include "planner/memory/model_states.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/step_time.h"
#include "tests/planner/predict_as_given.h"
#include "tests/planner/two_layer_graph.h"

namespace headroom::planner {
namespace {

RunSettings eight_gpus(Sharding sharding) {
  RunSettings settings;
  settings.precision = Precision::kBf16Mixed;
  settings.gpus_per_node = 8;
  settings.sharding = sharding;
  return settings;
}

}  // namespace

TEST_CASE("a FlatParameter is padded to a multiple of the world size and split evenly") {
  CHECK(flat_param_shard_elements(16, 8) == 2);
  CHECK(flat_param_shard_elements(17, 8) == 3);  // padded to 24
  CHECK(flat_param_shard_elements(1'000'000'003, 8) == 125'000'001);
  CHECK(flat_param_shard_elements(5, 1) == 5);
  const std::vector<FlatParamUnit> units = flat_param_units(two_layers(), eight_gpus(Sharding::kFsdp1));
  REQUIRE(units.size() == 3);  // the two layers, then the root
  CHECK(units[0].elements == 1'000'000'003);
  CHECK(units[2].elements == 1'001);
}

TEST_CASE("who shards at ZeRO-3: the composer stack means FSDP1, a setting overrides any stack") {
  RunSettings s;
  CHECK(sharding_of(s) == Sharding::kDeepspeed);
  s.stack = Stack::kComposer;
  CHECK(sharding_of(s) == Sharding::kFsdp1);
  s.stack = Stack::kTorchtitan;
  CHECK(sharding_of(s) == Sharding::kFsdp2);
  s.sharding = Sharding::kFsdp1;
  CHECK(sharding_of(s) == Sharding::kFsdp1);
  // Composer's mixed_precision DEFAULT reduces in fp32, PURE in the compute dtype.
  s.precision = Precision::kBf16Mixed;
  CHECK(reduce_dtype_of(s) == ReduceDtype::kFp32);
  s.reduce_dtype = ReduceDtype::kParam;
  CHECK(reduce_dtype_of(s) == ReduceDtype::kParam);
  s.reduce_dtype.reset();
  s.precision = Precision::kBf16Pure;
  CHECK(reduce_dtype_of(s) == ReduceDtype::kParam);
  CHECK(parse_sharding("fsdp1") == Sharding::kFsdp1);
  CHECK_FALSE(parse_sharding("zero3").has_value());
  CHECK(parse_reduce_dtype("param") == ReduceDtype::kParam);
}

TEST_CASE("FSDP1 holds one fp32 FlatParameter shard and one fp32 gradient shard per unit") {
  const graph::LayerGraph graph = two_layers();
  GlobalConfig config;
  config.zero_stage = 3;
  const ModelStates fsdp1 = model_states(graph, eight_gpus(Sharding::kFsdp1), config, Accounting::kAllocated);
  const int64_t layer_shard = rounded(125'000'001 * 4);
  const int64_t root_shard = rounded(126 * 4);  // 1001 padded to 1008
  CHECK(fsdp1.params == 2 * layer_shard + root_shard);
  CHECK(fsdp1.grads_full == 2 * layer_shard + root_shard);
  CHECK(fsdp1.master == 0);  // the fp32 shard is the master copy
  CHECK(fsdp1.comm_buckets == 0);
  // The root kept unsharded; in a layer's backward the unit computing and the one
  // prefetched, bf16 (fsdp_in_flight); in its forward only the unit computing.
  CHECK(fsdp1.gathered_params == rounded(2'002));
  CHECK(*std::max_element(fsdp1.gathered_bwd_block.begin(), fsdp1.gathered_bwd_block.end()) ==
        2 * rounded(2'000'000'006));
  CHECK(*std::max_element(fsdp1.gathered_fwd_block.begin(), fsdp1.gathered_fwd_block.end()) == rounded(2'000'000'006));
  // DEFAULT: the bf16 unsharded gradient, its fp32 copy, the F.pad copy of the
  // odd-sized unit to 8 x 125000001 elements; the fp32 reduce-scatter output is the
  // unit's new sharded gradient (among grads_full) in a step of one micro-step.
  const int64_t default_buffers = rounded(2'000'000'006) + rounded(4'000'000'012) + rounded(1'000'000'008LL * 4);
  CHECK(fsdp1.reduce_scatter_bytes == default_buffers);
  CHECK(fsdp1.fsdp1_post_backward_block[1] == default_buffers - rounded(2'000'000'006));
  // Accumulating, a later micro-step's output is added into the shard kept before.
  GlobalConfig accumulating = config;
  accumulating.grad_accum = 2;
  const ModelStates fsdp1_accumulating = model_states(graph, eight_gpus(Sharding::kFsdp1), accumulating,
                                                      Accounting::kAllocated);
  CHECK(fsdp1_accumulating.reduce_scatter_bytes == default_buffers + layer_shard);
  // PURE: reduced in bf16 without a cast; the bf16 shard's fp32 cast is the sharded gradient.
  RunSettings pure = eight_gpus(Sharding::kFsdp1);
  pure.reduce_dtype = ReduceDtype::kParam;
  const ModelStates fsdp1_pure = model_states(graph, pure, config, Accounting::kAllocated);
  CHECK(fsdp1_pure.reduce_scatter_bytes == rounded(2'000'000'006) + rounded(1'000'000'008LL * 2) +
                                               rounded(125'000'001 * 2));
  // FSDP2 shards each parameter on its own: the same bytes up to rounding.
  const ModelStates fsdp2 = model_states(graph, eight_gpus(Sharding::kFsdp2), config, Accounting::kAllocated);
  CHECK(fsdp2.gathered_params == fsdp1.gathered_params);
  CHECK(fsdp2.params / 1'000'000 == fsdp1.params / 1'000'000);
}

TEST_CASE("FSDP1 reduce-scatters in fp32 under Composer's DEFAULT: twice the bytes of PURE") {
  const GpuSpec gpu = find_gpu("h100-sxm").value();
  ModelStates states;
  states.trainable_params = states.total_params = 8'000'000'000;
  GlobalConfig config;
  config.zero_stage = 3;
  StepTimeInputs in;
  in.seq_len = 2048;
  RunSettings fp32 = eight_gpus(Sharding::kFsdp1);
  fp32.overlap_comm = false;  // everything exposed
  RunSettings pure = fp32;
  pure.reduce_dtype = ReduceDtype::kParam;
  const double with_fp32 = step_time(fp32, config, gpu, states, in).comm_exposed_ms;
  const double with_bf16 = step_time(pure, config, gpu, states, in).comm_exposed_ms;
  // The difference is 2 more bytes per parameter over the ring: (N-1)/N x 8e9 x 2 bytes.
  CHECK(with_fp32 - with_bf16 == doctest::Approx(transfer_ms(7.0 / 8 * 8e9 * 2, gpu.nvlink_gbps)));
  // DeepSpeed's stage 3 reduces its 16-bit gradients.
  RunSettings deepspeed = pure;
  deepspeed.reduce_dtype.reset();
  deepspeed.sharding = Sharding::kDeepspeed;
  CHECK(step_time(deepspeed, config, gpu, states, in).comm_exposed_ms == doctest::Approx(with_bf16));
}

TEST_CASE("settings JSON carries the sharding and reduce dtype, and refuses what FSDP cannot do") {
  RunSettings s = eight_gpus(Sharding::kFsdp1);
  s.reduce_dtype = ReduceDtype::kParam;
  const nlohmann::json j = settings_to_json(s);
  CHECK(j["sharding"] == "fsdp1");
  CHECK(j["reduce_dtype"] == "param");
  const Result<RunSettings> back = settings_from_json(j, "t.json");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  CHECK(back->sharding == Sharding::kFsdp1);
  CHECK(back->reduce_dtype == ReduceDtype::kParam);

  nlohmann::json bad = j;
  bad["sharding"] = "zero3";
  const Result<RunSettings> refused = settings_from_json(bad, "t.json");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("t.json: settings.sharding") != std::string::npos);

  RunSettings deepspeed;
  deepspeed.reduce_dtype = ReduceDtype::kFp32;
  CHECK(validate_settings(deepspeed, "t.json").message().find("reduce_dtype") != std::string::npos);

  // FSDP1's CPUOffload moves parameters and the optimizer together, and does not
  // accumulate gradients; FSDP has no NVMe offload: refused by name.
  RunSettings offload = eight_gpus(Sharding::kFsdp1);
  offload.zero_stage = 3;
  offload.offload_param = Offload::kCpu;
  offload.offload_optimizer = Offload::kCpu;
  CHECK(validate_settings(offload, "t.json").is_ok());
  RunSettings params_only = offload;
  params_only.offload_optimizer = Offload::kNone;
  CHECK(validate_settings(params_only, "t.json").message().find("t.json: offload_optimizer: ") == 0);
  RunSettings accumulating = offload;
  accumulating.grad_accum = 4;
  CHECK(validate_settings(accumulating, "t.json").message().find("t.json: grad_accum: ") == 0);
  RunSettings nvme = eight_gpus(Sharding::kFsdp2);
  nvme.zero_stage = 3;
  nvme.offload_optimizer = Offload::kNvme;
  CHECK(validate_settings(nvme, "t.json").message().find("t.json: offload_optimizer: ") == 0);
}

TEST_CASE("the FlatParameter shards follow the plan's parameter offload, not the user's") {
  const graph::LayerGraph graph = two_layers();
  RunSettings asked = eight_gpus(Sharding::kFsdp1);
  asked.offload_param = Offload::kCpu;  // what the user typed; the candidate below keeps them on the GPU
  GlobalConfig config;
  config.zero_stage = 3;
  const ModelStates on_gpu = model_states(graph, asked, config, Accounting::kAllocated);
  CHECK(on_gpu.params == 2 * rounded(125'000'001 * 4) + rounded(126 * 4));
}

TEST_CASE("the plan search offloads FSDP1 only without accumulation, and FSDP never to NVMe") {
  RunSettings s;
  s.model = "llama-3-8b";
  s.gpu = "a100-40g";
  s.gpus_per_node = 2;
  s.precision = Precision::kBf16Mixed;
  s.seq_len = 2048;
  s.global_batch = 8;  // 4 a rank: micro-batches 1 and 2 accumulate, 4 does not
  s.allow_nvme_offload = true;
  s.sharding = Sharding::kFsdp1;
  const Result<PlanResult> fsdp1 = plan(s);
  REQUIRE_MESSAGE(fsdp1.is_ok(), fsdp1.message());
  // 16 B a parameter over 2 ranks is 64 GB: sharded in full, only CPUOffload fits a
  // 40 GB A100. (Since the head's backward peaks before lm_head's gradient exists,
  // ZeRO-1 with the optimizer on the host fits too, at 31 GiB, and is faster.)
  REQUIRE(fsdp1->found);
  CHECK(fsdp1->best.config.offload_optimizer == Offload::kCpu);
  for (const FrontierPoint& point : fsdp1->frontier) {
    if (point.config.offload_param == Offload::kCpu) CHECK(point.config.grad_accum == 1);
    CHECK(point.config.offload_param != Offload::kNvme);
    CHECK(point.config.offload_optimizer != Offload::kNvme);
  }
  s.sharding = Sharding::kFsdp2;
  const Result<PlanResult> fsdp2 = plan(s);
  REQUIRE_MESSAGE(fsdp2.is_ok(), fsdp2.message());
  bool offloads = false;
  for (const FrontierPoint& point : fsdp2->frontier) {
    CHECK(point.config.offload_param != Offload::kNvme);
    CHECK(point.config.offload_optimizer != Offload::kNvme);
    offloads = offloads || point.config.offload_param == Offload::kCpu;
  }
  CHECK(offloads);  // FSDP2's CPUOffloadPolicy is still searched: 8B in full on 2 x 40 GB needs it
}

TEST_CASE("flash-attn's fused cross-entropy keeps the 16-bit logits and an fp32 logsumexp per row") {
  graph::LayerGraph graph = models::build_zoo_model("gpt2", models::ZooOptions{}).value();
  apply_loss_impl(graph, LossSpec{LossImpl::kFusedXentropy, 8});
  CHECK(std::none_of(graph.nodes.begin(), graph.nodes.end(), [](const graph::Node& n) { return n.op == "to_f32"; }));
  const graph::Node& loss = *graph.find_node("loss");
  CHECK(saves(loss, "lm_head"));
  const graph::Tensor& lse = *graph.find_tensor("loss:log_probs");
  CHECK(lse.dtype == graph::DType::kF32);
  CHECK(lse.elements.at(6, 2048) == 6 * 2048);
  CHECK(loss.backward_workspace().at(6, 2048) == 0);
  CHECK(parse_loss("fused-xentropy") == LossSpec{LossImpl::kFusedXentropy, 8});
  RunSettings composer;
  composer.stack = Stack::kComposer;
  CHECK(resolve_stack(composer).top.loss.impl == LossImpl::kFusedXentropy);
  CHECK(resolve_stack(composer).top.optimizer_impl == OptimizerImpl::kForLoop);  // DecoupledAdamW
}

}  // namespace headroom::planner

namespace headroom::planner {

// PEFT's FSDP QLoRA recipe (bnb_4bit_quant_storage = the FlatParameter's dtype):
// the frozen 4-bit weight is flattened as its packed codes; its QuantState
// (absmax, code book) is not a parameter and stays whole on every rank. Before,
// the packed weight was priced at 16 bits per logical element, 4x too large.
TEST_CASE("FSDP1 flattens a frozen NF4 weight as its packed storage, its constants whole per rank") {
  const graph::LayerGraph graph = one_linear();
  RunSettings settings = qlora_on_one_linear();
  settings.precision = Precision::kBf16Pure;
  settings.sharding = Sharding::kFsdp1;
  settings.gpus_per_node = 2;
  Result<graph::LayerGraph> quantized = apply_training_mode(graph, settings);
  REQUIRE_MESSAGE(quantized.is_ok(), quantized.message());
  const std::vector<FlatParamUnit> units = flat_param_units(quantized.value(), settings);
  REQUIRE(units.size() == 1);
  const int64_t elements = int64_t{4096} * 4096;
  // r 16; one FlatParameter has one dtype, so the adapters are flattened in it
  // (TRL's peft_module_casting_to_bf16 casts them for the recipe)
  const int64_t adapters = 16 * (4096 + 4096);
  CHECK(units[0].elements == elements / 4 + adapters);  // four 4-bit codes per bf16 element
  CHECK(units[0].trainable_elements == adapters);
  // uint8 absmax per 64, fp32 per 256 of those, the NF4 code book and the nested map
  CHECK(units[0].constant_bytes == elements / 64 + elements / 64 / 256 * 4 + 16 * 4 + 256 * 4 + 4);
  GlobalConfig config;
  config.zero_stage = 3;
  const ModelStates states = model_states(quantized.value(), settings, config, Accounting::kAllocated);
  const int64_t shard = flat_param_shard_elements(units[0].elements, 2) * 2;
  CHECK(states.params == rounded(units[0].constant_bytes) + rounded(shard));
  CHECK(states.grads_full == rounded(shard));  // use_orig_params: the whole flat shard
}

TEST_CASE("the Trainer wraps PEFT's adapters as FSDP1 units of their own: the frozen layers get no gradient") {
  // One layer: a frozen 4096 x 4096 weight and its rank-16 adapters, and a frozen root.
  graph::LayerGraph model;
  model.blocks = {{"layers.0", "dense", true}, {"head", "lm_head", false}};
  graph::Node layer;
  layer.name = "layers.0.q_proj";
  layer.op = "linear";
  layer.block = 0;
  layer.params = {{"layers.0.q_proj.weight", {4096, 4096}, graph::DType::kBF16, false, ""},
                  {"layers.0.q_proj.lora_A.weight", {16, 4096}, graph::DType::kF32, true, ""},
                  {"layers.0.q_proj.lora_B.weight", {4096, 16}, graph::DType::kF32, true, ""}};
  graph::Node head;
  head.name = "head.w";
  head.op = "linear";
  head.block = 1;
  head.params = {{"head.w.weight", {1000}, graph::DType::kBF16, false, ""}};
  model.nodes = {layer, head};
  GlobalConfig config;
  config.zero_stage = 3;
  RunSettings trainer = eight_gpus(Sharding::kFsdp1);
  trainer.mode = TrainMode::kLora;
  trainer.stack = Stack::kHfTrainer;
  // transformers' update_fsdp_plugin_peft, PEFT's fsdp_auto_wrap_policy: lora_A and
  // lora_B are units of their own; the layer's FlatParameter is all frozen.
  const std::vector<FlatParamUnit> units = flat_param_units(model, trainer);
  REQUIRE(units.size() == 4);  // the layer, lora_A, lora_B, the root
  CHECK(units[0].trainable_elements == 0);
  CHECK(units[1].elements == 16 * 4096);
  CHECK(units[1].trainable_elements == 16 * 4096);
  CHECK(units[2].block == 0);
  const ModelStates states = model_states(model, trainer, config, Accounting::kAllocated);
  const int64_t adapter_shard = rounded(16 * 4096 / 8 * 4);  // fp32, 1/8 each
  CHECK(states.grads_full == 2 * adapter_shard);
  CHECK(states.sharded_block_grads[0] == 2 * adapter_shard);
  // Without the Trainer's policy the layer is one unit and its whole shard has a gradient.
  RunSettings plain = trainer;
  plain.stack = Stack::kUnspecified;
  const int64_t layer_elements = 4096 * 4096 + 2 * 16 * 4096;
  CHECK(model_states(model, plain, config, Accounting::kAllocated).grads_full ==
        rounded(layer_elements / 8 * 4));
}

}  // namespace headroom::planner
