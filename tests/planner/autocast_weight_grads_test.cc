// Under autocast over fp32 weights a linear's backward makes the gradient of its
// weight's 16-bit cast, and ToCopyBackward makes the fp32 `.grad` from it only after
// the engine has released the linear's saved tensors (torch 2.11
// torch/csrc/autograd/engine.cpp evaluate_function; tools/autograd/derivatives.yaml
// _to_copy): the linear's backward holds the 16-bit gradient in flight, not yet its
// fp32 copy (BackwardGradients::add_grad_points; docs/memory-model.md, section 3).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>

#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

RunSettings vit_full_amp() {
  RunSettings s = hf_vit_b16(TrainMode::kFull);
  s.precision = Precision::kBf16Amp;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

TEST_CASE("bf16-amp: a linear's backward holds its 16-bit weight gradient, its fp32 .grad comes after") {
  const ModelContext context = prepared_context(vit_full_amp());
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32,
                                           context.seq_len, Accounting::kAllocated, context.gpu, context.time_options,
                                           context.checkpoint_saves, 4);
  // The last layer's output dense (3072 -> 768) runs backward first: at its backward
  // no gradient of its own is stored; at its cast's, its weight's and bias's fp32 ones.
  const BlockProfile& last = profile.blocks[static_cast<size_t>(block_ending(context.graph, ".layer.11"))];
  REQUIRE(last.bwd_points.size() >= 2);
  const int64_t fp32_grads = account(int64_t{768} * 3072 * 4, Accounting::kAllocated) +
                             account(768 * 4, Accounting::kAllocated);
  const int64_t bf16_grads = account(int64_t{768} * 3072 * 2, Accounting::kAllocated) +
                             account(768 * 2, Accounting::kAllocated);
  CHECK(last.bwd_points[0].made_through == 0);
  CHECK(last.bwd_points[1].made_through == fp32_grads);
  // The cast's moment has the dense's saved weight cast released and its incoming
  // gradient gone: less in flight than at the dense's backward, its 16-bit gradient
  // still there beside its fp32 copy.
  CHECK(last.bwd_points[1].bytes < last.bwd_points[0].bytes);
  CHECK(last.bwd_points[0].bytes - last.bwd_points[1].bytes >= bf16_grads);
}

TEST_CASE("ViT-B/16 full bf16-amp at B = 32: the peak holds no fp32 gradient of the last layer") {
  const Prediction p = predict_as_given(vit_full_amp());
  // The oracle (bench/oracle grid, hf-trainer/vit-base-patch16-224/full/bf16-amp/none/32):
  // the peak in vit.encoder.layer.11's output dense backward holds 3,082,144 bytes of
  // gradients, the classifier's and the final layernorm's fp32 ones, and the dense's
  // bf16 weight gradient (mm, 768 x 3072) as a transient.
  CHECK(p.where.block_name == "vit.encoder.layer.11");
  CHECK(p.where.phase == "backward");
  MESSAGE("gradients at the peak " << p.peak_as_allocated.gradients << " B");
  CHECK(std::abs(p.peak_as_allocated.gradients - 3082144) <= 3082144 * 3 / 100);
}

}  // namespace
}  // namespace headroom::planner
