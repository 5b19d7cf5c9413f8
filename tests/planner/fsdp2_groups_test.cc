// FSDP2's parameter groups (torch/distributed/fsdp/_fully_shard): the sharded
// parameter keeps its own dtype, the root group (what no per-layer fully_shard
// wraps) stays unsharded from forward to the end of backward, torchtune's
// custom_sharded_layers give blocks groups of their own, and torchtitan leaves
// its last layer unsharded after forward.
#include <doctest/doctest.h>

#include <string>

#include "planner/time/fsdp2_stream_copies.h"
#include "planner/settings/hardware.h"
#include "planner/memory/model_states.h"
#include "planner/predict/planner.h"
#include "planner/predict/simulator.h"
#include "planner/time/step_time.h"
#include "planner/configs/torchtune_import.h"
#include "tests/planner/fsdp_test_support.h"

namespace headroom::planner {
namespace {

RunSettings torchtitan_on_8() {
  RunSettings settings;
  settings.precision = Precision::kBf16Mixed;
  settings.gpus_per_node = 8;
  settings.stack = Stack::kTorchtitan;
  return settings;
}

constexpr int64_t kEmbed = int64_t{1} << 26;
constexpr int64_t kLayer = int64_t{1} << 27;
constexpr int64_t kHead = int64_t{1} << 28;
constexpr int64_t kAll = kEmbed + 2 * kLayer + kHead;

}  // namespace

TEST_CASE("FSDP2 under mixed precision shards fp32 parameters and gradients, with no separate master copy") {
  GlobalConfig config;
  config.zero_stage = 3;
  const ModelStates fsdp2 = model_states(llm_shaped(), torchtitan_on_8(), config, Accounting::kAllocated);
  CHECK(fsdp2.params == kAll * 4 / 8);
  CHECK(fsdp2.master == 0);
  CHECK(fsdp2.grads_full == kAll * 4 / 8);
  CHECK(fsdp2.optimizer == kAll * 8 / 8);
  // The same 16 bytes a parameter as DeepSpeed's stage 3, split differently:
  // 16-bit partitions beside fp32 masters.
  RunSettings deepspeed = torchtitan_on_8();
  deepspeed.stack = Stack::kDeepspeed;
  const ModelStates zero3 = model_states(llm_shaped(), deepspeed, config, Accounting::kAllocated);
  CHECK(zero3.params == kAll * 2 / 8);
  CHECK(zero3.master == kAll * 4 / 8);
  CHECK(zero3.grads_full == kAll * 2 / 8);
  CHECK(zero3.params + zero3.master + zero3.grads_full == fsdp2.params + fsdp2.master + fsdp2.grads_full);
}

TEST_CASE("FSDP2's root group: unsharded through forward and backward, reduced once at the end") {
  GlobalConfig config;
  config.zero_stage = 3;
  const ModelStates states = model_states(llm_shaped(), torchtitan_on_8(), config, Accounting::kAllocated);
  CHECK(states.fsdp2_root_params == (kEmbed + kHead) * 2);
  // The root all step; in a layer two layers in flight (this one and its all-gather
  // output, or the one prefetched; layers.0, the first group, prefetches nothing in
  // backward), beside the head only the last layer, although the head is the largest
  // block (fsdp_in_flight).
  CHECK(states.gathered_params == (kEmbed + kHead) * 2);
  CHECK(states.gathered_bwd_block == std::vector<int64_t>{0, kLayer * 2, 2 * kLayer * 2, kLayer * 2});
  // A layer reduces as its backward ends: bf16 gradients into an fp32 input.
  CHECK(states.reduce_scatter_bytes == kLayer * (2 + 4));
  REQUIRE(states.fsdp2_root_grads.size() == 4);
  CHECK(states.fsdp2_root_grads[3] == kHead * 2);
  CHECK(states.fsdp2_root_grads[0] == kEmbed * 2);
  CHECK(states.fsdp2_root_grads[1] == 0);
  CHECK(states.fsdp2_root_reduce_scatter == (kEmbed + kHead) * 4);

  SUBCASE("torchtune's custom_sharded_layers: the embeddings and the head get groups of their own") {
    RunSettings own = torchtitan_on_8();
    own.fsdp_own_groups = {"embeddings", "head"};
    const ModelStates separate = model_states(llm_shaped(), own, config, Accounting::kAllocated);
    CHECK(separate.fsdp2_root_params == 0);
    CHECK(separate.gathered_params == 0);
    // now the head is a group in flight, with layers.1 prefetched
    CHECK(separate.gathered_bwd_block[3] == (kHead + kLayer) * 2);
    CHECK(separate.fsdp2_root_reduce_scatter == 0);
  }
  SUBCASE("DeepSpeed's stage 3 has no root group") {
    RunSettings deepspeed = torchtitan_on_8();
    deepspeed.stack = Stack::kDeepspeed;
    const ModelStates zero3 = model_states(llm_shaped(), deepspeed, config, Accounting::kAllocated);
    CHECK(zero3.fsdp2_root_params == 0);
    CHECK(zero3.fsdp2_root_grads.empty());
  }
}

namespace {

// torchtitan's published Llama 3.1 8B run (B = 2, S = 8192, 8 GPUs), pinned so
// that only the FSDP2 grouping differs between the runs compared.
RunSettings torchtitan_8b() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/bench/accuracy/models/llama-3.1-8b/config.json";
  s.gpu = "h100-sxm";
  s.gpu_memory_bytes = int64_t{96} << 30;
  s.precision = Precision::kBf16Mixed;
  s.micro_batch = 2;
  s.seq_len = 8192;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.stack = Stack::kTorchtitan;
  s.loss = LossSpec{LossImpl::kFull};
  s.optimizer_impl = OptimizerImpl::kForeach;
  s.recompute = Recompute::kBlock;
  s.expandable_segments = true;
  return s;
}

constexpr int64_t kEmbedding8b = int64_t{128256} * 4096 * 2;  // bf16, unsharded
constexpr int64_t kLayer8b = int64_t{218'112'000} * 2;          // one decoder layer, bf16

}  // namespace

TEST_CASE("the root group's embedding is live at the loss backward unless it is sharded on its own") {
  const Simulation root = simulate_as_given(torchtitan_8b());
  RunSettings own = torchtitan_8b();
  own.fsdp_own_groups = {"embeddings"};
  const Simulation separate = simulate_as_given(own);
  CHECK(root.peak_label.find("backward loss") == 0);
  CHECK(separate.peak_label.find("backward loss") == 0);
  CHECK(root.peak_allocated - separate.peak_allocated == kEmbedding8b);
}

TEST_CASE("torchtitan leaves its last layer unsharded after forward, torchtune reshards it") {
  RunSettings torchtitan = torchtitan_8b();
  RunSettings torchtune = torchtitan_8b();
  torchtune.stack = Stack::kTorchtune;
  torchtune.versions["torchtune"] = "0.4.0";  // the same RMSNorm as torchtitan's model: only the last layer differs
  const int64_t kept = allocated_after(simulate_as_given(torchtitan), "forward lm_head");
  const int64_t resharded = allocated_after(simulate_as_given(torchtune), "forward lm_head");
  // torchtune's llama3_1 also holds its one fp32 Llama3ScaledRoPE cache, [131072, 64, 2]
  // (models/rope_caches.h); torchtitan's rotary table is outside that mechanism.
  const int64_t rope_cache = int64_t{131072} * 64 * 2 * 4;
  CHECK(kept - (resharded - rope_cache) == kLayer8b);
}

TEST_CASE("fsdp_own_groups must name blocks outside the layers") {
  RunSettings settings = torchtitan_8b();
  settings.fsdp_own_groups = {"model.layers.3"};
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_FALSE(context.is_ok());
  CHECK(context.message().find("fsdp_own_groups: \"model.layers.3\" matches no block of") == 0);
  CHECK(context.message().find("expected one of \"embeddings\"") != std::string::npos);
}

TEST_CASE("torchtune's custom_sharded_layers become fsdp_own_groups") {
  const std::string config =
      "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\nbatch_size: 2\ndataset:\n  packed: True\n"
      "tokenizer:\n  max_seq_len: 2048\noptimizer:\n  _component_: torch.optim.AdamW\nfsdp_cpu_offload: False\n";
  Result<ConfigImport> own =
      import_torchtune_config(config + "custom_sharded_layers: ['tok_embeddings', 'output']\n", "c.yaml", {}, RunSettings{});
  REQUIRE_MESSAGE(own.is_ok(), own.message());
  CHECK(own->settings.fsdp_own_groups == std::vector<std::string>{"embeddings", "head"});
  Result<ConfigImport> none = import_torchtune_config(config, "c.yaml", {}, RunSettings{});
  REQUIRE_MESSAGE(none.is_ok(), none.message());
  CHECK(none->settings.fsdp_own_groups.empty());
  Result<ConfigImport> bad =
      import_torchtune_config(config + "custom_sharded_layers: ['norm']\n", "c.yaml", {}, RunSettings{});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("custom_sharded_layers") != std::string::npos);
  CHECK(bad.message().find("tok_embeddings and output") != std::string::npos);
}

TEST_CASE("FSDP2 copies each all-gather out on the compute stream: the bytes read and written") {
  GlobalConfig config;
  config.zero_stage = 3;
  // torchtitan: every group gathered for forward; for backward again but the root
  // (never resharded) and the last layer (not resharded after forward). Each copy
  // reads the gathered bf16 bytes and writes them.
  CHECK(fsdp2_copy_out_bytes(llm_shaped(), torchtitan_on_8(), config) == 2 * (kAll + kLayer) * 2);
  // torchtune reshards its last layer too: both layers come back for backward.
  RunSettings torchtune = torchtitan_on_8();
  torchtune.stack = Stack::kTorchtune;
  CHECK(fsdp2_copy_out_bytes(llm_shaped(), torchtune, config) == 2 * (kAll + 2 * kLayer) * 2);
  // FSDP1 gathers into the flat parameter itself, DeepSpeed into views of its flat
  // buffer: no copy-out. Below ZeRO-3 nothing is gathered.
  RunSettings composer = torchtitan_on_8();
  composer.stack = Stack::kComposer;
  CHECK(fsdp2_copy_out_bytes(llm_shaped(), composer, config) == 0);
  RunSettings deepspeed = torchtitan_on_8();
  deepspeed.stack = Stack::kDeepspeed;
  CHECK(fsdp2_copy_out_bytes(llm_shaped(), deepspeed, config) == 0);
  // At ZeRO-2 (reshard_after_forward=False) each group stays unsharded from its
  // forward to its backward: gathered and copied out once.
  config.zero_stage = 2;
  CHECK(fsdp2_copy_out_bytes(llm_shaped(), torchtitan_on_8(), config) == 2 * kAll * 2);
  // DeepSpeed's ZeRO-2 gathers nothing.
  CHECK(fsdp2_copy_out_bytes(llm_shaped(), deepspeed, config) == 0);
}

TEST_CASE("FSDP2 copies each gradient into the reduce-scatter input on the compute stream, in the reduce dtype") {
  GlobalConfig config;
  config.zero_stage = 3;
  // Mixed precision: bf16 gradients read (2 B), fp32 reduce-scatter input written (4 B).
  CHECK(fsdp2_reduce_copy_in_bytes(llm_shaped(), torchtitan_on_8(), config) == kAll * (2 + 4));
  RunSettings bf16_reduce = torchtitan_on_8();
  bf16_reduce.reduce_dtype = ReduceDtype::kParam;
  CHECK(fsdp2_reduce_copy_in_bytes(llm_shaped(), bf16_reduce, config) == kAll * (2 + 2));
  // Only what trains has a gradient: a frozen head is not copied.
  graph::LayerGraph frozen_head = llm_shaped();
  frozen_head.nodes[3].params[0].trainable = false;
  CHECK(fsdp2_reduce_copy_in_bytes(frozen_head, torchtitan_on_8(), config) == (kAll - kHead) * (2 + 4));
  RunSettings composer = torchtitan_on_8();
  composer.stack = Stack::kComposer;  // FSDP1 casts and copies on its post-backward stream
  CHECK(fsdp2_reduce_copy_in_bytes(llm_shaped(), composer, config) == 0);
}

TEST_CASE("the reduce copy-ins are exposed once per backward that reduces") {
  ModelStates states;
  states.total_params = states.trainable_params = kAll;
  const GpuSpec gpu = find_gpu("h100-sxm").value();
  StepTimeInputs in;
  in.micro_fwd_ms = in.micro_bwd_ms = 1e6;  // every collective hidden
  in.reduce_copy_ms = 2.0;
  GlobalConfig config;
  config.zero_stage = 3;
  config.grad_accum = 4;
  CHECK(step_time(torchtitan_on_8(), config, gpu, states, in).comm_exposed_ms == doctest::Approx(4 * 2.0));
  // Under no_sync the unsharded gradients accumulate and only the last micro-step reduces.
  RunSettings no_sync = torchtitan_on_8();
  no_sync.fsdp_no_sync = true;
  REQUIRE(accumulates_unsharded(no_sync, config));
  CHECK(step_time(no_sync, config, gpu, states, in).comm_exposed_ms == doctest::Approx(2.0));
}

TEST_CASE("the copy-outs are exposed time, once per micro-step") {
  GlobalConfig config;
  config.zero_stage = 3;
  config.grad_accum = 4;
  ModelStates states;
  states.total_params = states.trainable_params = kAll;
  const GpuSpec gpu = find_gpu("h100-sxm").value();
  StepTimeInputs in;
  in.micro_fwd_ms = in.micro_bwd_ms = 1e6;  // every collective hidden
  const TimeBreakdown hidden = step_time(torchtitan_on_8(), config, gpu, states, in);
  in.micro_gather_copy_ms = 3.0;
  const TimeBreakdown copied = step_time(torchtitan_on_8(), config, gpu, states, in);
  CHECK(hidden.comm_exposed_ms == 0);
  CHECK(copied.comm_exposed_ms == doctest::Approx(4 * 3.0));
  CHECK(copied.step_ms - hidden.step_ms == doctest::Approx(4 * 3.0));
}

TEST_CASE("FSDP's sharded gradients are made by each group's reduce-scatter and freed by zero_grad") {
  // One allocation per group (foreach_reduce's reduce-scatter output, its views the
  // parameters' sharded gradients), fp32 under mixed precision, 1/8 of each group.
  GlobalConfig config;
  config.zero_stage = 3;
  const ModelStates states = model_states(llm_shaped(), torchtitan_on_8(), config, Accounting::kAllocated);
  CHECK(states.sharded_block_grads == std::vector<int64_t>{0, kLayer * 4 / 8, kLayer * 4 / 8, 0});
  CHECK(states.root_sharded_grads == (kEmbed + kHead) * 4 / 8);
  CHECK(states.grads_full == kAll * 4 / 8);
  // Llama 3.1 8B: the second step's peak is the loss, with no gradient alive (the
  // first step's were freed by zero_grad(set_to_none=True)); they were priced there
  // whole before: 8,030,261,248 parameters x 4 bytes / 8.
  const Simulation simulation = simulate_as_given(torchtitan_8b());
  CHECK(simulation.peak_label.find("backward loss") == 0);
  int64_t gradients = 0;
  for (const LiveItem& item : simulation.live_at_peak) {
    if (item.name == "gradients") gradients += item.bytes;
  }
  CHECK(gradients == 0);
  CHECK(simulation.steps_simulated >= 2);
}

}  // namespace headroom::planner
