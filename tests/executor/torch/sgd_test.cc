// SGD with momentum (executor/sgd.h) against LibTorch's torch::optim::SGD,
// which implements torch.optim.SGD's update (torch/csrc/api/src/optim/sgd.cpp:
// L2 decay into the gradient, the buffer a clone of the first gradient, then
// buf = momentum * buf + (1 - dampening) * grad); its bytes against the
// planner's; checkpoints; tiny-llama trains with it.
#include <limits>

#include "executor/sgd.h"
#include "optimizer_test_support.h"

namespace headroom::executor {
namespace {

using namespace optimizer_test;

constexpr double kLr = 0.05;
constexpr double kMomentum = 0.9;
constexpr double kDecay = 0.01;

SgdOptions sgd_options(bool master) {
  SgdOptions o;
  o.lr = kLr;
  o.momentum = kMomentum;
  o.weight_decay = kDecay;
  o.master_weights = master;
  return o;
}

}  // namespace

TEST_CASE("SGD with momentum steps exactly as torch::optim::SGD, a parameter without a gradient at step 1 included") {
  const NamedParameters ours = make_parameters({{6, 5}, {5}, {3, 4, 2}}, torch::kFloat, 1);
  const NamedParameters theirs = clone_parameters(ours);
  SgdMomentum sgd(ours, sgd_options(false));
  std::vector<torch::Tensor> reference_params;
  for (const auto& [name, p] : theirs) reference_params.push_back(p);
  torch::optim::SGD reference(reference_params,
                              torch::optim::SGDOptions(kLr).momentum(kMomentum).weight_decay(kDecay));
  for (int step = 1; step <= 5; ++step) {
    // p1 has no gradient at step 1: torch starts its buffer at step 2.
    const std::vector<size_t> skip = step == 1 ? std::vector<size_t>{1} : std::vector<size_t>{};
    set_gradients(ours, step, 7, skip);
    set_gradients(theirs, step, 7, skip);
    CHECK(sgd.step(1.0, false));
    reference.step();
    for (size_t i = 0; i < ours.size(); ++i) {
      INFO("step " << step << " parameter " << i);
      CHECK(torch::equal(ours[i].second, theirs[i].second));
    }
  }
  CHECK(sgd.steps_taken() == 5);
}

TEST_CASE("SGD under bf16 mixed precision steps fp32 master weights and rounds them into the parameters") {
  const NamedParameters ours = make_parameters({{8, 3}, {3}}, torch::kBFloat16, 2);
  NamedParameters masters;
  for (const auto& [name, p] : ours) masters.emplace_back(name, p.detach().to(torch::kFloat).requires_grad_(true));
  SgdMomentum sgd(ours, sgd_options(true));
  std::vector<torch::Tensor> reference_params;
  for (const auto& [name, p] : masters) reference_params.push_back(p);
  torch::optim::SGD reference(reference_params,
                              torch::optim::SGDOptions(kLr).momentum(kMomentum).weight_decay(kDecay));
  for (int step = 1; step <= 4; ++step) {
    set_gradients(ours, step, 3);
    for (size_t i = 0; i < ours.size(); ++i) masters[i].second.mutable_grad() = ours[i].second.grad().to(torch::kFloat);
    CHECK(sgd.step(1.0, false));
    reference.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    CHECK(torch::equal(ours[i].second, masters[i].second.to(torch::kBFloat16)));
  }
}

TEST_CASE("SGD skips a step with non-finite gradients and unscales the others") {
  const NamedParameters ours = make_parameters({{4, 4}}, torch::kFloat, 4);
  const NamedParameters theirs = clone_parameters(ours);
  SgdMomentum sgd(ours, sgd_options(false));
  const torch::Tensor before = ours[0].second.detach().clone();
  ours[0].second.mutable_grad() = torch::full({4, 4}, std::numeric_limits<float>::infinity());
  CHECK_FALSE(sgd.step(1.0, true));
  CHECK(torch::equal(ours[0].second, before));
  CHECK(sgd.steps_taken() == 0);
  // A loss scale of 1024: the step sees gradient / 1024.
  set_gradients(theirs, 1, 5);
  ours[0].second.mutable_grad() = theirs[0].second.grad() * 1024;
  CHECK(sgd.step(1.0 / 1024, true));
  std::vector<torch::Tensor> reference_params{theirs[0].second};
  torch::optim::SGD reference(reference_params,
                              torch::optim::SGDOptions(kLr).momentum(kMomentum).weight_decay(kDecay));
  reference.step();
  CHECK(torch::allclose(ours[0].second, theirs[0].second, 0, 1e-7));
}

TEST_CASE("SGD state bytes are the planner's: one buffer a parameter, in the weights' dtype") {
  const std::vector<std::vector<int64_t>> shapes{{64, 64}, {176, 64}, {64}, {2, 3, 4}};
  struct Case {
    planner::Precision precision;
    torch::ScalarType dtype;
  };
  for (const Case& c : {Case{planner::Precision::kFp32, torch::kFloat},
                        Case{planner::Precision::kBf16Mixed, torch::kBFloat16},
                        Case{planner::Precision::kBf16Pure, torch::kBFloat16}}) {
    INFO(planner::precision_name(c.precision));
    const NamedParameters params = make_parameters(shapes, c.dtype, 6);
    SgdMomentum sgd(params, sgd_options(planner::master_bytes_per_element(c.precision) > 0));
    CHECK(sgd.state_bytes() == planner_bytes(planner::OptimizerKind::kSgdMomentum, c.precision, params));
  }
}

TEST_CASE("SGD saves and loads its state: two more steps after a load match two more steps without one") {
  const NamedParameters a = make_parameters({{5, 7}, {7}}, torch::kBFloat16, 8);
  const NamedParameters b = clone_parameters(a);
  SgdMomentum first(a, sgd_options(true));
  for (int step = 1; step <= 2; ++step) {
    set_gradients(a, step, 9);
    first.step(1.0, false);
  }
  for (size_t i = 0; i < a.size(); ++i) b[i].second.detach().copy_(a[i].second);
  SgdMomentum second(b, sgd_options(true));
  second.load(first.save(), "test");
  CHECK(second.steps_taken() == 2);
  for (int step = 3; step <= 4; ++step) {
    set_gradients(a, step, 9);
    set_gradients(b, step, 9);
    first.step(1.0, false);
    second.step(1.0, false);
  }
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].second, b[i].second));
  check_same_tensors(first.save(), second.save(), "optimizer state");

  // Another optimizer's state is refused by name.
  const NamedParameters c = make_parameters({{5, 7}, {7}}, torch::kBFloat16, 8);
  OptimizerOptions adafactor;
  adafactor.kind = planner::OptimizerKind::kAdafactor;
  adafactor.master_weights = true;
  std::unique_ptr<Optimizer> other = make_optimizer(c, adafactor);
  CHECK_THROWS_WITH_AS(other->load(first.save(), "ckpt"),
                       "ckpt: the optimizer state is sgd's, but this run steps adafactor; resume with the plan that "
                       "wrote it",
                       std::runtime_error);
}

TEST_CASE("tiny-llama trains with SGD: the loss falls, optimizer bytes as predicted, resume is exact") {
  const planner::Plan plan = tiny_llama_plan(planner::OptimizerKind::kSgdMomentum, planner::Precision::kFp32);
  Recorder steps;
  const RunResult r = run_and_resume(plan, 0.3, 12, "sgd", steps);
  CHECK(steps.steps.back().loss < steps.steps.front().loss - 0.3);
  const CategoryCheck* optimizer = find_category(r, "optimizer states + master weights");
  REQUIRE(optimizer != nullptr);
  INFO("predicted " << optimizer->predicted << " measured " << optimizer->measured);
  CHECK(std::abs(optimizer->relative_error()) <= 0.05);
}

}  // namespace headroom::executor
