// DeepSpeed ZeRO-3's gathered parameters once the coordinator's trace is complete
// (DeepSpeed 0.19.8, runtime/zero/partitioned_param_coordinator.py): the prefetcher
// runs ahead of the trace up to stage3_max_live_parameters, admitting a whole
// parameter while under it, and a parameter whose next use it has passed is not
// released (__params_to_release); a frozen weight whose module's backward hook
// never fires is used once. planner/predict/deepspeed_gathered.cc.
#include <doctest/doctest.h>

#include "planner/memory/model_states.h"
#include "planner/predict/deepspeed_gathered.h"
#include "planner/predict/model_context.h"
#include "planner/predict/step_builder.h"
#include "tests/planner/four_block_graph.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kWeight = 1 << 20;  // elements of each block's weight

// embeddings, two layers and a head, each one bf16 weight; under LoRA the layers
// also have an adapter. needs_input_grad: what the analysis says of each node.
ModelContext small_model(bool lora, std::vector<bool> needs_input_grad) {
  ModelContext context;
  context.graph = four_blocks([](int) { return kWeight; }, !lora, [&](graph::Node& node, int b) {
    if (!lora || (b != 1 && b != 2)) return;
    node.params.push_back({node.name + ".lora_A.weight", {1024}, graph::DType::kBF16, true, ""});
  });
  context.analysis.needs_input_grad = std::move(needs_input_grad);
  context.gpu.cublas_workspace_bytes = 0;
  return context;
}

RunSettings zero3() {
  RunSettings settings;
  settings.stack = Stack::kHfTrainer;
  settings.precision = Precision::kBf16Pure;
  settings.gpus_per_node = 2;
  settings.zero_stage = 3;
  return settings;
}

TEST_CASE("ZeRO-3 keeps every weight backward uses again gathered from its forward to its backward") {
  // Full fine-tune: every weight is trainable, so every module runs backward.
  const ModelContext context = small_model(false, {false, true, true, true});
  const Zero3Gathered held = zero3_gathered_bytes(context, zero3(), zero_stage(3));
  REQUIRE(held.forward.size() == 4);
  const int64_t weight = kWeight * 2;
  for (int k = 0; k < 4; ++k) CHECK(held.forward[k] == 4 * weight);
  // At block k's backward: its weight and those of the blocks backward reaches later.
  CHECK(held.backward[3] == 4 * weight);
  CHECK(held.backward[2] == 3 * weight);
  CHECK(held.backward[0] == weight);
}

TEST_CASE("a frozen weight whose module's backward never runs is released after its forward") {
  // LoRA: the embedding's and layers.0's inputs require no grad; layers.0 still runs
  // backward for its adapter, but its frozen weight is not used there.
  const ModelContext context = small_model(true, {false, false, true, true});
  const Zero3Gathered held = zero3_gathered_bytes(context, zero3(), zero_stage(3));
  const int64_t weight = kWeight * 2;
  const int64_t adapter = 1024 * 2;
  CHECK(held.forward[0] == 4 * weight + 2 * adapter);
  CHECK(held.forward[2] == 2 * weight + 2 * adapter);  // layers.1's and the head's; adapters kept
  CHECK(held.backward[3] == 2 * weight + 2 * adapter);
  CHECK(held.backward[1] == adapter);
  CHECK(held.backward[0] == 0);
}

TEST_CASE("an embedding whose output a hook makes require grad runs backward and keeps its weight") {
  // transformers' enable_input_require_grads under LoRA with checkpointing: the
  // embedding module's backward hook fires, so ZeRO-3 fetches its weight again.
  ModelContext context = small_model(true, {false, true, true, true});
  context.graph.tensors.push_back({"embeddings.out", {}, std::nullopt, true});
  context.analysis.node_outputs = {{0}, {}, {}, {}};
  const Zero3Gathered held = zero3_gathered_bytes(context, zero3(), zero_stage(3));
  CHECK(held.backward[0] == kWeight * 2);
  CHECK(held.backward[3] == 4 * kWeight * 2 + 2 * 1024 * 2);
}

TEST_CASE("while the first block runs forward, one prefetch round of the next is gathered") {
  RunSettings settings = zero3();
  settings.prefetch_bucket_elements = kWeight / 4;
  const ModelContext context = small_model(false, {false, true, true, true});
  const Zero3Gathered held = zero3_gathered_bytes(context, settings, zero_stage(3));
  // the embedding's weight, and a quarter weight plus the next block's one weight of the
  // three ahead (the window later blocks see full)
  CHECK(held.forward[0] == kWeight * 2 + (kWeight + kWeight / 4) * 2);
  CHECK(held.forward[1] == 4 * kWeight * 2);
}

TEST_CASE("ZeRO-3 holds at most stage3_max_live_parameters and the one parameter the prefetcher admits beyond") {
  RunSettings settings = zero3();
  settings.max_live_parameters = kWeight / 2;
  const ModelContext context = small_model(false, {false, true, true, true});
  const Zero3Gathered held = zero3_gathered_bytes(context, settings, zero_stage(3));
  // 1.5 weights' elements of the 4 in flight
  CHECK(held.forward[0] == 3 * kWeight);
  CHECK(held.backward[3] == 3 * kWeight);
  CHECK(held.backward[0] == 2 * kWeight);  // at least its own; one block's backward remains
}

TEST_CASE("the step walk takes ZeRO-3's gathered parameters block by block, and the bucket as gradients") {
  const ModelContext context = small_model(false, {false, true, true, true});
  StepProfile profile;
  profile.blocks.resize(4);
  const BuiltStep step = build_step(context, zero3(), zero_stage(3), profile, Accounting::kAllocated);
  CHECK(step.model.gathered == 0);
  CHECK(step.states.gathered_params == 0);
  REQUIRE(step.model.gathered_bwd.size() == 4);
  CHECK(step.model.gathered_bwd[3] == 4 * kWeight * 2);
  CHECK(step.model.gathered_bwd_before[1] == 2 * kWeight * 2);
  // stage3.py: the parameters' .grad are views of the one reduce bucket
  CHECK(step.states.bucket_gradients == step.states.comm_buckets);
  CHECK(step.states.bucket_gradients == int64_t{500'000'000} * 2);
  RunSettings zero2 = zero3();
  zero2.zero_stage = 2;
  CHECK(model_states(context.graph, zero2, zero_stage(2), Accounting::kAllocated).bucket_gradients == 0);
}

}  // namespace
}  // namespace headroom::planner
