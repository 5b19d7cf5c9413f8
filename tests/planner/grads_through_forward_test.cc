// Where the loop calls zero_grad (StackSpec::grads_through_forward): between the loss
// and backward(), as torchvision's classification reference does, the previous step's
// gradients live through the forward; the stacks free them after the step.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "planner/predict/planner.h"
#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"
#include "planner/settings/stack.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// torchvision's ResNet-50, batch 32 at 224 px, bf16 autocast, SGD with momentum:
// the meta-device oracle's torch-loop run (bench/oracle, env vision).
RunSettings resnet_loop(std::optional<bool> through) {
  RunSettings s;
  s.model = "resnet-50";
  s.gpu = "h200";
  s.stack = Stack::kTorchAmp;
  s.precision = Precision::kBf16Amp;
  s.mode = TrainMode::kFull;
  s.micro_batch = 32;
  s.resolution = 224;
  s.optimizer = OptimizerKind::kSgdMomentum;
  s.grads_through_forward = through;
  return s;
}

}  // namespace

TEST_CASE("zero_grad after the step unless the run says otherwise, and never with the optimizer in backward") {
  const ResolvedStack loop = resolve_stack(resnet_loop(std::nullopt));
  CHECK_FALSE(loop.top.grads_through_forward);
  CHECK(loop.unknowns.empty());
  CHECK_FALSE(resolve_stack(resnet_loop(false)).top.grads_through_forward);
  const ResolvedStack said = resolve_stack(resnet_loop(true));
  CHECK(said.top.grads_through_forward);
  CHECK(said.bottom.grads_through_forward);
  RunSettings in_backward = resnet_loop(true);
  in_backward.optimizer_impl = OptimizerImpl::kInBackward;
  CHECK_FALSE(resolve_stack(in_backward).top.grads_through_forward);
}

TEST_CASE("zero_grad between the loss and backward: the previous gradients at the forward's end") {
  const Prediction after_step = predict_as_given(resnet_loop(false));
  const Prediction before_backward = predict_as_given(resnet_loop(true));
  const int64_t grads = before_backward.allocated.gradients;
  REQUIRE(grads > 0);
  CHECK(before_backward.peak_allocated > after_step.peak_allocated);
  CHECK(before_backward.peak_allocated - after_step.peak_allocated <= grads);
  // The oracle's step (torchvision 0.26.0's references/classification/train.py order):
  // 1777755612 bytes at its peak, with every gradient of the step before.
  const double oracle = 1777755612.0;
  const double workspaces = static_cast<double>(before_backward.peak.workspaces);  // no kernel runs on meta
  CHECK(std::abs(static_cast<double>(before_backward.peak_allocated) - workspaces - oracle) < 0.02 * oracle);
}

}  // namespace headroom::planner
