// DeepSpeed's reduce buckets as DeepSpeed 0.19.8 makes them (docs/memory-model.md,
// ZeRO section): always reduce_bucket_size elements of 16-bit gradients; at stages
// 1/2 two under overlap_comm, made at the first gradient hook and freed at the end
// of backward (stage_1_and_2.py setup_buckets, _release_ipg_buffers); at stage 3 one
// for the whole run (stage3.py __init__). Stages 1/2 have no all-gather bucket.
// ZeRO-2's gradient partition appears at the first reduction (copy_grads_in_partition),
// a tied weight's partial gradient waits for its last use, and the step holds three
// gradient partitions at once (stage_1_and_2.py step); a gradient larger than the bucket
// is reduced on its own (extra_large_param_to_reduce). planner/predict/deepspeed_walk.cc.
#include <doctest/doctest.h>

#include "planner/memory/deepspeed_buckets.h"
#include "planner/memory/model_states.h"
#include "planner/predict/model_context.h"
#include "planner/predict/step_builder.h"
#include "tests/planner/four_block_graph.h"
#include "tests/planner/deepspeed_test_support.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBucketBytes = kDeepSpeedBucketBytes;

// embeddings, two layers and a head; under LoRA only the layers' adapters train,
// so the first gradient hook fires in layers.1, not in the head.
graph::LayerGraph small_model(bool lora) {
  return four_blocks([](int) { return int64_t{1} << 20; }, !lora, [&](graph::Node& node, int b) {
    if (!lora || (b != 1 && b != 2)) return;
    node.params.push_back({node.name + ".lora_A.weight", {4096}, graph::DType::kF32, true, ""});
  });
}

TEST_CASE("ZeRO-2's two reduce buckets are reduce_bucket_size elements, live in backward only") {
  const ModelStates states = model_states(small_model(false), deepspeed(2), zero_stage(2), Accounting::kAllocated);
  // A 4M-element model still gets 5e8 elements in each.
  CHECK(deepspeed_backward_bucket_bytes(deepspeed(2), zero_stage(2), Accounting::kAllocated) == 2 * kBucketBytes);
  CHECK(states.comm_buckets == 0);  // none all run, and no all-gather bucket (all_gather_dp_groups)
  RunSettings one = deepspeed(2);
  one.overlap_comm = false;
  CHECK(deepspeed_backward_bucket_bytes(one, zero_stage(2), Accounting::kAllocated) == kBucketBytes);
}

TEST_CASE("ZeRO-3's one reduce bucket is reduce_bucket_size elements for the whole run") {
  const ModelStates states = model_states(small_model(true), deepspeed(3), zero_stage(3), Accounting::kAllocated);
  CHECK(states.comm_buckets == kBucketBytes);
  CHECK(deepspeed_backward_bucket_bytes(deepspeed(3), zero_stage(3), Accounting::kAllocated) == 0);
}

TEST_CASE("the walk holds ZeRO-2's buckets from the first gradient hook to the end of backward") {
  // The model is smaller than the bucket: the gradient partition is made at the end of
  // backward (copy_grads_in_partition at the epilogue's reduction), after the walk's blocks.
  const BuiltStep full = built(small_model(false), deepspeed(2));
  CHECK(full.model.grads_fwd == 0);
  CHECK(full.model.grads_optimizer == full.states.grads_full);
  CHECK(full.model.base - full.states.params - full.states.optimizer - full.states.master == 0);
  // Full fine-tune: the head's lm_head gradient is the first hook; not before it (the loss).
  CHECK(full.model.grads_bwd[3] == 2 * kBucketBytes);
  CHECK(full.model.grads_bwd_before[3] == 0);
  CHECK(full.model.grads_bwd_before[0] == 2 * kBucketBytes);
  // LoRA: the frozen head makes no gradient; the hook fires in layers.1.
  const BuiltStep lora = built(small_model(true), deepspeed(2));
  CHECK(lora.model.grads_bwd[3] == 0);
  CHECK(lora.model.grads_bwd_before[2] == 0);
  CHECK(lora.model.grads_bwd[2] == 2 * kBucketBytes);
  CHECK(lora.model.grads_bwd_before[1] == 2 * kBucketBytes);
}

TEST_CASE("ZeRO-2's gradient partition is made at the first reduction, when a gradient overflows the bucket") {
  RunSettings settings = deepspeed(2);
  settings.reduce_bucket_elements = 1 << 20;  // one block's weight: the head's fits, layers.1's does not
  const BuiltStep step = built(small_model(false), settings);
  const int64_t partition = step.states.grads_full;
  const int64_t buckets = 2 * (int64_t{1} << 21);
  REQUIRE(partition == 4 * (1 << 20));  // 4M elements' bf16 gradients over 2 ranks
  CHECK(step.model.grads_fwd == 0);
  CHECK(step.model.grads_bwd[3] == buckets);
  CHECK(step.model.grads_bwd_before[2] == buckets);
  CHECK(step.model.grads_bwd[2] == buckets + partition);
  CHECK(step.model.grads_bwd_before[1] == buckets + partition);
}

TEST_CASE("a tied embedding's partial gradient is held from the head's backward to the embedding's under ZeRO-2") {
  graph::LayerGraph graph = small_model(false);
  graph.nodes[3].params[0].tied_to = graph.nodes[0].params[0].name;  // lm_head ties the embedding
  const BuiltStep step = built(graph, deepspeed(2));
  const int64_t tied = (1 << 20) * 2;  // the full bf16 gradient, not the rank's partition
  CHECK(step.model.grads_bwd_before[3] == 0);
  CHECK(step.model.grads_bwd[3] == 2 * kBucketBytes + tied);
  CHECK(step.model.grads_bwd[1] == 2 * kBucketBytes + tied);
  CHECK(step.model.grads_bwd_before[0] == 2 * kBucketBytes + tied);  // summed in its backward
  CHECK(step.model.grads_fwd == 0);
}

TEST_CASE("ZeRO-2 holds a gradient larger than the bucket and its flattened copy until its own reduction") {
  graph::LayerGraph graph = small_model(false);
  graph.nodes[0].params[0].shape = {2 << 20};  // the embedding: 2M elements
  RunSettings settings = deepspeed(2);
  settings.reduce_bucket_elements = 3 << 19;  // 1.5M: only the embedding's gradient overflows it
  const BuiltStep step = built(graph, settings);
  const int64_t oversized = (2 << 20) * 2;  // its full bf16 gradient
  // extra_large_param_to_reduce: the gradient itself and allreduce_bucket's flatten of it.
  CHECK(step.model.grads_bwd[0] - step.model.grads_bwd_before[0] == 2 * oversized);  // the epilogue
  CHECK(step.model.grads_bwd[1] == step.model.grads_bwd_before[1]);  // layers' fit the bucket
  CHECK(step.model.grads_bwd[3] == step.model.grads_bwd_before[2]);
  // The head's gradient overflows too once the bucket is smaller than it: reduced at the
  // next hook, after the head's own backward peak.
  settings.reduce_bucket_elements = (1 << 20) - 1;
  const BuiltStep all = built(graph, settings);
  const int64_t head = (1 << 20) * 2;
  CHECK(all.model.grads_bwd_before[2] - all.model.grads_bwd[3] == 2 * head);
}

TEST_CASE("ZeRO-2's step holds a flattened 16-bit copy and an fp32 cast beside the gradient partition") {
  RunSettings settings = deepspeed(2);
  settings.optimizer_impl = OptimizerImpl::kFused;  // no torch temporaries of its own
  const ModelStates states = model_states(small_model(false), settings, zero_stage(2), Accounting::kAllocated);
  const int64_t partition = 4 * (1 << 20) / 2;  // the model's 4M trainable elements over 2 ranks
  CHECK(states.grads_full == partition * 2);   // copy_grads_in_partition's, held to the step
  CHECK(states.step_transient == partition * 2 + partition * 4);  // flatten(), then .to(fp32)
    settings.precision = Precision::kFp32;  // an fp32 partition's cast is itself: one copy
  CHECK(model_states(small_model(false), settings, zero_stage(2), Accounting::kAllocated).step_transient == partition * 4);
}

}  // namespace
}  // namespace headroom::planner
