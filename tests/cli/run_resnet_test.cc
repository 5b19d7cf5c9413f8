// `headroom run` on tiny-resnet (torchvision's ResNet with Bottlenecks
// [1, 1, 1, 1], stem width 8, 10 classes, 32 px): BatchNorm in training mode,
// in-place ReLUs and residual adds as torchvision's, each category measured
// within 5% of the prediction. With gradient accumulation, the seed story's
// MMEngine case, `fit` says that BatchNorm then trains differently from the
// large batch (the difference itself: tests/executor/torch/batch_norm_accumulation_test.cc).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

void check_resnet_run(const std::string& fit_flags, bool expect_note) {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit = run_headroom("fit tiny-resnet --gpu a6000 " + fit_flags + " -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  CHECK(contains(fit.out, "BatchNorm layers: each normalizes with the statistics of its micro-batch") == expect_note);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 12 --lr 1e-2 --device cpu --json");
  if (built_without_libtorch(run)) return;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 12);
  // Each step's loss is over other images (4 of the 8): compare the means of the first and last four.
  double early = 0;
  double late = 0;
  for (int i = 0; i < 4; ++i) {
    early += steps[i]["loss"].get<double>() / 4;
    late += steps[8 + i]["loss"].get<double>() / 4;
  }
  CHECK(std::isfinite(late));
  CHECK(late < 0.8 * early);
  const int compared = check_categories_within(json, 0.05);
  CHECK(compared == 4);
}

TEST_CASE("run trains tiny-resnet with BatchNorm in fp32 as the planner prices it") {
  check_resnet_run("--batch 4 --precision fp32", false);
}

TEST_CASE("run trains tiny-resnet in bf16 mixed precision with accumulation, and fit names the BatchNorm caveat") {
  check_resnet_run("--batch 2 --grad-accum 2 --precision bf16-mixed", true);
}

}  // namespace
