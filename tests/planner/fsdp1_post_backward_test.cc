// FSDP1's post-backward: a unit's parameters' gradients wait in autograd until the split
// of its FlatParameter's views joins them into its `.grad` (torch 2.11 _flat_param.py
// _get_unflat_views_unaligned), after the block's last node; only then does
// _post_backward_hook reshard, cast and reduce-scatter (_runtime_utils.py). The block's
// nodes run with their own gradients made so far, in flight, and none of the unit's
// reduce buffers or new shard (StepModel::post_backward_bwd, unit_grads_bwd;
// docs/memory-model.md, "FSDP1").
#include <doctest/doctest.h>

#include <vector>

#include "planner/predict/model_context.h"
#include "planner/predict/step_builder.h"
#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"
#include "tests/planner/fsdp_test_support.h"
#include "tests/planner/predict_as_given.h"
#include "tests/planner/two_node_block.h"

namespace headroom::planner {
namespace {

// One layer block of two nodes with weights: the later in forward runs backward first,
// making 100 bytes of the unit's 400 with 1000 bytes in flight; the earlier makes the
// other 300 with 600 in flight. Beside it 1000 bytes of later units' sharded gradients,
// and `post` bytes its post-backward hook makes.
StepModel fsdp1_layer(int64_t post) {
  StepModel step = two_node_block();
  step.grads_bwd = {1000 + 400 + post};
  step.grads_bwd_before.clear();
  step.post_backward_bwd = {post};
  step.unit_grads_bwd = {400};
  return step;
}

}  // namespace

TEST_CASE("FSDP1's step prices a layer's reduce buffers and new shard at its post-backward hook only") {
  const BuiltStep step = trainer_sharded_step(Sharding::kFsdp1, 8);
  const int64_t layer = kSmallLlm.layer;
  const int64_t unsharded = layer * 2;  // bf16
  const int64_t shard = layer / 8;
  // The bf16 reduce-scatter output; its fp32 cast is the new sharded gradient.
  CHECK(step.model.post_backward_bwd[1] == shard * 2 + shard * 4);
  CHECK(step.model.unit_grads_bwd[1] == unsharded);
  CHECK(step.model.post_backward_bwd[3] == 0);  // the head is the root's, reduced after the first block
  // Before layers.0's first parameter gradient: layers.1's shard and the head's gradient only.
  CHECK(step.model.grads_bwd_before[1] == shard * 4 + kSmallLlm.head * 2);
  CHECK(step.model.grads_bwd[1] == step.model.grads_bwd_before[1] + unsharded + shard * 2 + shard * 4);
}

TEST_CASE("FSDP1's nodes run backward without the unit's reduce buffers, its gradients in flight") {
  StepModel step = fsdp1_layer(300);
  const std::vector<BlockChoice> keep(1, BlockChoice::kKeep);
  // The later units' shards, the first node's 100 bytes of gradient and its 1000 in flight.
  const StepPeak nodes = walk_step(step, keep, 0);
  CHECK(nodes.bytes == 1000 + 100 + 1000);
  CHECK(nodes.gradients == 1000);  // no `.grad` holds the unit's 100 yet
  CHECK(nodes.activations == 500);
  CHECK(nodes.transient == 100 + 1000 - 500);
  // Priced as one set over the whole backward, as before.
  step.post_backward_bwd.clear();
  step.unit_grads_bwd.clear();
  CHECK(walk_step(step, keep, 0).bytes == 1000 + 400 + 300 + 1000);
}

TEST_CASE("FSDP1's post-backward hook holds the unit's gradient and reduce buffers without the block") {
  const StepModel step = fsdp1_layer(2000);
  const std::vector<BlockChoice> keep(1, BlockChoice::kKeep);
  const StepPeak hook = walk_step(step, keep, 0);
  CHECK(hook.bytes == 1000 + 400 + 2000);  // the block's transients and saved tensors gone
  CHECK(hook.gradients == 1000 + 400 + 2000);
  CHECK(hook.activations == 0);
  CHECK(hook.transient == 0);
}

}  // namespace headroom::planner
