// FSDP2's post_backward: AccumulateGrad sets each unsharded parameter's `.grad` as its node
// runs backward, and the group's post_backward (run by RegisterPostBackwardFunction once the
// unit's input gradients exist) takes them, reshards and reduces only after the block's
// nodes (torch 2.11 torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py
// _register_post_backward_hook, post_backward; _fsdp_collectives.py foreach_reduce). So a
// layer's nodes hold its unsharded gradients node by node beside the reduce-scatter input
// held from the layer reduced before (StepModel::unit_grads_bwd; docs/memory-model.md,
// "FSDP2's post_backward"). And the first group in post-forward order prefetches nothing in
// backward (_backward_prefetch: post_forward_order[index - 1]).
#include <doctest/doctest.h>

#include <vector>

#include "planner/memory/model_states.h"
#include "planner/predict/step_builder.h"
#include "planner/predict/step_model.h"
#include "tests/planner/fsdp_test_support.h"
#include "tests/planner/two_node_block.h"

namespace headroom::planner {

TEST_CASE("FSDP2's layer gradients are its nodes' until its post_backward, beside the input held") {
  const BuiltStep step = trainer_sharded_step(Sharding::kFsdp2, 8);
  const int64_t layer = kSmallLlm.layer;
  const int64_t unsharded = layer * 2;  // bf16, the unsharded parameters' `.grad`
  const int64_t input = layer * 2;      // reduce_dtype = param_dtype, bf16
  const int64_t sharded = layer * 4 / 8;
  const int64_t head = kSmallLlm.head * 2;  // the root's unsharded gradient
  REQUIRE(step.model.unit_grads_bwd.size() == 4);
  REQUIRE(step.model.post_backward_bwd.size() == 4);
  CHECK(step.model.unit_grads_bwd[1] == unsharded);
  CHECK(step.model.unit_grads_bwd[2] == unsharded);
  CHECK(step.model.post_backward_bwd[1] == 0);  // the sharded gradient is smaller: freed before it
  CHECK_FALSE(step.model.unit_grads_in_flight);
  // Before layers.0's first parameter gradient: layers.1's sharded gradient and held
  // input beside the head's gradient, none of its own.
  CHECK(step.model.grads_bwd_before[1] == head + sharded + input);
  CHECK(step.model.grads_bwd[1] == step.model.grads_bwd_before[1] + unsharded);
}

TEST_CASE("FSDP2's nodes make the unsharded gradients one by one, and they are gradients") {
  StepModel step = two_node_block();
  step.grads_bwd = {1000 + 400};  // later groups' sharded gradients and held input, the unit's 400
  step.grads_bwd_before.clear();
  step.post_backward_bwd = {0};
  step.unit_grads_bwd = {400};
  step.unit_grads_in_flight = false;
  const std::vector<BlockChoice> keep(1, BlockChoice::kKeep);
  const StepPeak nodes = walk_step(step, keep, 0);
  // The first node's 100 bytes of gradient with its 1000 in flight, not the whole 400.
  CHECK(nodes.bytes == 1000 + 100 + 1000);
  CHECK(nodes.gradients == 1000 + 100);  // each an unsharded parameter's `.grad`
  // Priced as one set over the whole backward, as before.
  step.post_backward_bwd.clear();
  step.unit_grads_bwd.clear();
  CHECK(walk_step(step, keep, 0).bytes == 1000 + 400 + 1000);
}

TEST_CASE("FSDP2's first group prefetches nothing in backward, the others the group before") {
  RunSettings settings;
  settings.precision = Precision::kBf16Mixed;
  settings.gpus_per_node = 8;
  settings.stack = Stack::kTorchtitan;
  GlobalConfig config;
  config.zero_stage = 3;
  const LlmShape shape;
  // The root holds the embeddings and the head: layers.0 is the first group.
  const ModelStates root = model_states(llm_shaped(), settings, config, Accounting::kAllocated);
  CHECK(root.gathered_bwd_block == std::vector<int64_t>{0, shape.layer * 2, 2 * shape.layer * 2, shape.layer * 2});
  // The embeddings sharded on their own come first: layers.0 prefetches them.
  settings.fsdp_own_groups = {"embeddings"};
  const ModelStates own = model_states(llm_shaped(), settings, config, Accounting::kAllocated);
  CHECK(own.gathered_bwd_block[0] == shape.embed * 2);
  CHECK(own.gathered_bwd_block[1] == (shape.layer + shape.embed) * 2);
  CHECK(own.gathered_bwd_block[2] == 2 * shape.layer * 2);
}

}  // namespace headroom::planner
