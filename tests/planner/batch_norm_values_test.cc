// BatchNorm in training mode needs more than one value per channel (torch's
// _verify_batch_size): one 32 px image reaches tiny-resnet's last stage as a 1x1
// map. `fit` and plan files refuse that micro-batch, the search skips it, and
// `plan` refuses a run whose whole batch cannot avoid it (issue 37: `fit` said
// FITS and `run` died at step 1).
#include <doctest/doctest.h>

#include <string>

#include "planner/predict/plan_file.h"
#include "planner/predict/planner.h"

namespace headroom::planner {
namespace {

RunSettings tiny_resnet(int64_t micro_batch, int64_t global_batch) {
  RunSettings s;
  s.model = "tiny-resnet";
  s.gpu = "a6000";
  s.micro_batch = micro_batch;
  s.global_batch = global_batch;
  return s;
}

}  // namespace

TEST_CASE("BatchNorm with one value per channel: fit refuses, the search skips, plan refuses a batch of one") {
  const Result<FitAnswer> one = fit(tiny_resnet(1, 0));
  REQUIRE_FALSE(one.is_ok());
  CHECK(one.message().find("micro_batch: 1 sample(s) reach layer4.0.bn2 (BatchNorm) with one value per channel") ==
        0);
  const Result<FitAnswer> two = fit(tiny_resnet(2, 0));
  REQUIRE_MESSAGE(two.is_ok(), two.message());
  CHECK(two->fits);
  // The plan for a global batch of 4 never uses micro-batch 1.
  const Result<PlanResult> four = plan(tiny_resnet(1, 4));
  REQUIRE_MESSAGE(four.is_ok(), four.message());
  REQUIRE(four->found);
  CHECK(four->best.config.micro_batch >= 2);
  // A global batch of one image leaves no micro-batch torch trains: refused, not "does not fit".
  const Result<PlanResult> single = plan(tiny_resnet(1, 1));
  REQUIRE_FALSE(single.is_ok());
  CHECK(single.message().find("(BatchNorm) with one value per channel") != std::string::npos);
  // A plan file at micro-batch 1, as simulate and run read it, is refused naming the file.
  Plan hand_made = two->as_given;
  hand_made.config.micro_batch = 1;
  hand_made.settings.micro_batch = 1;
  const Result<PreparedPlan> prepared = prepare_plan(hand_made, "plan.json");
  REQUIRE_FALSE(prepared.is_ok());
  CHECK(prepared.message().find("plan.json: micro_batch: 1 sample(s)") == 0);
}

}  // namespace headroom::planner
