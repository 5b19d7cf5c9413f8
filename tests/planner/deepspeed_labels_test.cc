// What DeepSpeed 0.19.8's buffers are at the peak (docs/memory-model.md, "Categories at
// the peak"): a gradient only where a parameter's `.grad` views it. ZeRO-1/2's bucket
// in use holds the `.grad`s its hook made views of (stage_1_and_2.py
// reduce_independent_p_g_buckets_and_remove_grads); overlap_comm's second bucket, the
// gradient partition (copy_grads_in_partition, read by the step through
// averaged_gradients), an oversized gradient's flattened copy (allreduce_bucket) and
// ZeRO-3's flat partition buffer (stage3.py grad_partitions_flat_buffer,
// partition_grads: `param.grad = None`) are ZeRO buffers; a tied weight's partial,
// before AccumulateGrad, is in flight. planner/predict/deepspeed_walk.cc, step_model.cc.
#include <doctest/doctest.h>

#include "planner/memory/model_states.h"
#include "planner/predict/model_context.h"
#include "planner/predict/step_builder.h"
#include "tests/planner/four_block_graph.h"
#include "tests/planner/deepspeed_test_support.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBucketBytes = kDeepSpeedBucketBytes;

graph::LayerGraph small_model() {
  return four_blocks([](int) { return int64_t{1} << 20; }, true, [](graph::Node&, int) {});
}

int64_t at(const std::vector<int64_t>& bytes, size_t k) { return k < bytes.size() ? bytes[k] : 0; }

TEST_CASE("overlap_comm's second ZeRO-2 bucket is a ZeRO buffer until the first one is reduced") {
  const BuiltStep step = built(small_model(), deepspeed(2));
  const NotGradients& n = step.model.not_grads;
  // 4M elements all fit the first bucket: the second never takes a gradient.
  CHECK(step.model.grads_bwd[3] == 2 * kBucketBytes);
  CHECK(at(n.zero_buffers_bwd, 3) == kBucketBytes);
  CHECK(at(n.zero_buffers_bwd_before, 3) == 0);  // no bucket before the first hook
  CHECK(at(n.zero_buffers_bwd_before, 0) == kBucketBytes);
  // A bucket of 1.5M elements fills in layers.1 (head 1M, then 1M more): from there the
  // index has swapped and both buckets hold `.grad`s.
  RunSettings small = deepspeed(2);
  small.reduce_bucket_elements = 3 << 19;
  const BuiltStep swapped = built(small_model(), small);
  const int64_t bucket = (3 << 19) * 2;
  const NotGradients& m = swapped.model.not_grads;
  const int64_t partition = swapped.states.grads_full;  // made in layers.1's backward too
  CHECK(at(m.zero_buffers_bwd, 3) == bucket);
  CHECK(at(m.zero_buffers_bwd_before, 2) == bucket);
  CHECK(at(m.zero_buffers_bwd, 2) == partition);
  CHECK(at(m.zero_buffers_bwd, 1) == partition);
  RunSettings single = deepspeed(2);
  single.overlap_comm = false;
  CHECK(at(built(small_model(), single).model.not_grads.zero_buffers_bwd, 3) == 0);
}

TEST_CASE("headroom's own ZeRO-2 (the unspecified stack) keeps its gradients' labels and timing") {
  RunSettings mine = deepspeed(2);
  mine.stack = Stack::kUnspecified;  // executor/zero_layout.h, not DeepSpeed's hooks
  const BuiltStep own = built(small_model(), mine);
  REQUIRE(own.model.grads_bwd[3] > 0);  // its buckets are priced
  CHECK(own.model.not_grads.zero_buffers_bwd.empty());
  CHECK_FALSE(own.model.grads_made_by_hooks);
}

TEST_CASE("ZeRO-2's gradient partition is a ZeRO buffer in backward and at the step") {
  RunSettings settings = deepspeed(2);
  settings.overlap_comm = false;
  settings.reduce_bucket_elements = 1 << 20;  // made in layers.1's backward (as deepspeed_buckets_test)
  const BuiltStep step = built(small_model(), settings);
  const int64_t partition = step.states.grads_full;
  const NotGradients& n = step.model.not_grads;
  CHECK(at(n.zero_buffers_bwd, 3) == 0);
  CHECK(at(n.zero_buffers_bwd_before, 2) == 0);
  CHECK(at(n.zero_buffers_bwd, 2) == partition);
  CHECK(at(n.zero_buffers_bwd_before, 1) == partition);
  CHECK(n.zero_buffers_optimizer == partition);
  CHECK(step.model.grads_optimizer == partition);
}

TEST_CASE("a tied weight's partial under ZeRO-2 is in flight and an oversized gradient's copy a ZeRO buffer") {
  graph::LayerGraph graph = small_model();
  graph.nodes[3].params[0].tied_to = graph.nodes[0].params[0].name;
  RunSettings settings = deepspeed(2);
  settings.overlap_comm = false;
  const BuiltStep tied = built(graph, settings);
  const int64_t partial = (1 << 20) * 2;
  CHECK(at(tied.model.not_grads.in_flight_bwd, 3) == partial);
  CHECK(at(tied.model.not_grads.in_flight_bwd_before, 3) == 0);
  CHECK(at(tied.model.not_grads.in_flight_bwd_before, 0) == partial);
  CHECK(at(tied.model.not_grads.in_flight_bwd, 0) == partial);
  graph::LayerGraph large = small_model();
  large.nodes[0].params[0].shape = {2 << 20};
  settings.reduce_bucket_elements = 3 << 19;  // only the embedding's gradient overflows it
  const BuiltStep step = built(large, settings);
  const NotGradients& n = step.model.not_grads;
  const int64_t oversized = (2 << 20) * 2;
  // The gradient (the `.grad`) and allreduce_bucket's flatten of it: one of each.
  CHECK(step.model.grads_bwd[0] - step.model.grads_bwd_before[0] == 2 * oversized);
  CHECK(at(n.zero_buffers_bwd, 0) - at(n.zero_buffers_bwd_before, 0) == oversized);
}

TEST_CASE("ZeRO-3's flat gradient partition is a ZeRO buffer all step") {
  const BuiltStep step = built(small_model(), deepspeed(3));
  const int64_t partition = step.states.grads_full;
  REQUIRE(partition > 0);
  const NotGradients& n = step.model.not_grads;
  CHECK(n.zero_buffers_fwd == partition);
  CHECK(n.zero_buffers_optimizer == partition);
  CHECK(at(n.zero_buffers_bwd, 2) == partition);
  CHECK(at(n.zero_buffers_bwd_before, 3) == partition);
}

TEST_CASE("the walk labels the gradients no `.grad` holds as ZeRO buffers or transient") {
  StepModel step;
  step.blocks.resize(2);
  step.grads_bwd = {0, 300};
  step.grads_bwd_before = {0, 300};
  step.not_grads.zero_buffers_bwd = {0, 100};
  step.not_grads.in_flight_bwd = {0, 50};
  const std::vector<BlockChoice> keep(2, BlockChoice::kKeep);
  const StepPeak peak = walk_step(step, keep, 0);
  CHECK(peak.bytes == 300);
  CHECK(peak.gradients == 150);
  CHECK(peak.gathered == 100);
  CHECK(peak.transient == 50);
  // Before the block's own parameter gradients: the `before` labels.
  step.blocks[1].on_autograd = true;
  step.blocks[1].bwd_peak_before_param_grads = 1000;
  step.blocks[1].bwd_peak_from_param_grads = 0;
  step.blocks[1].bwd_peak = 1000;
  step.grads_bwd_before = {0, 200};
  step.not_grads.zero_buffers_bwd_before = {0, 20};
  step.not_grads.in_flight_bwd_before = {0, 30};
  const StepPeak before = walk_step(step, keep, 0);
  CHECK(before.bytes == 1200);
  CHECK(before.gradients == 150);
  CHECK(before.gathered == 20);
  // The optimizer step's: the 16-bit partition the step flattens is no `.grad`.
  StepModel opt;
  opt.grads_optimizer = 400;
  opt.not_grads.zero_buffers_optimizer = 400;
  const StepPeak at_step = walk_step(opt, {}, 0);
  CHECK(at_step.gradients == 0);
  CHECK(at_step.gathered == 400);
}

}  // namespace
}  // namespace headroom::planner
