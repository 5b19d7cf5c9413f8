// DeepSpeed 0.19.8 ZeRO-3's gradient larger than the reduce bucket (stage3.py
// __add_grad_to_ipg_bucket copies only a gradient that fits; the next parameter's hook
// reduce-scatters the one that did not and drops it): held from its block's parameter
// gradients to that hook. planner/predict/deepspeed_walk.cc hold_zero3_oversized_gradients.
#include <doctest/doctest.h>

#include "planner/predict/model_context.h"
#include "planner/predict/step_builder.h"
#include "tests/planner/four_block_graph.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// embeddings, two layers, and a head whose lm_head has 2M elements; with `norm`, the
// head's final norm (used before lm_head in forward, so after it in backward) trains too.
graph::LayerGraph head_model(bool norm) {
  return four_blocks([](int b) { return b == 3 ? int64_t{2} << 20 : int64_t{1} << 20; }, true,
                     [&](graph::Node& node, int b) {
                       if (b != 3 || !norm) return;
                       node.params.push_back({"head.norm.weight", {4096}, graph::DType::kBF16, true, ""});
                     });
}

StepModel built(const graph::LayerGraph& graph, int64_t bucket_elements, Stack stack = Stack::kHfTrainer) {
  RunSettings settings;
  settings.stack = stack;
  settings.precision = Precision::kBf16Pure;
  settings.gpus_per_node = 8;
  settings.zero_stage = 3;
  settings.reduce_bucket_elements = bucket_elements;
  ModelContext context;
  context.graph = graph;
  context.gpu.cublas_workspace_bytes = 0;
  StepProfile profile;
  profile.blocks.resize(context.graph.blocks.size());
  return build_step(context, settings, zero_stage(3), profile, Accounting::kAllocated).model;
}

constexpr int64_t kHeadGrad = (2 << 20) * 2;  // lm_head's full bf16 gradient
constexpr int64_t kFits = 500'000'000;        // reduce_bucket_size's default: every gradient fits
constexpr int64_t kSmall = 3 << 19;           // 1.5M: only lm_head's gradient overflows

TEST_CASE("ZeRO-3 holds a gradient larger than the bucket from its block's parameter gradients") {
  const StepModel fits = built(head_model(true), kFits);
  const StepModel over = built(head_model(true), kSmall);
  CHECK(over.grads_bwd[3] - fits.grads_bwd[3] == kHeadGrad);
  CHECK(over.grads_bwd_before[3] == fits.grads_bwd_before[3]);  // not before lm_head's backward (the loss)
  // The final norm's hook, in the head's backward, reduces it: the layers never see it.
  CHECK(over.grads_bwd_before[2] == fits.grads_bwd_before[2]);
  CHECK(over.grads_bwd[2] == fits.grads_bwd[2]);
}

TEST_CASE("ZeRO-3's oversized gradient waits for the next block's first hook when its block has no other") {
  const StepModel fits = built(head_model(false), kFits);
  const StepModel over = built(head_model(false), kSmall);
  CHECK(over.grads_bwd[3] - fits.grads_bwd[3] == kHeadGrad);
  CHECK(over.grads_bwd_before[2] - fits.grads_bwd_before[2] == kHeadGrad);
  CHECK(over.grads_bwd[2] == fits.grads_bwd[2]);
}

TEST_CASE("the unspecified stack's ZeRO-3 is the executor's: no oversized gradient held") {
  const StepModel fits = built(head_model(true), kFits, Stack::kUnspecified);
  const StepModel over = built(head_model(true), kSmall, Stack::kUnspecified);
  CHECK(over.grads_bwd[3] == fits.grads_bwd[3]);
}

}  // namespace
}  // namespace headroom::planner
