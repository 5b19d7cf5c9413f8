// reports::mmengine_patch for a config that wraps in MMFullyShardedDataParallel:
// the plan's CPU offload is its cpu_offload key; other sharding is a note.
#include <doctest/doctest.h>

#include <string>

#include "reports/recipe_export.h"

namespace headroom::reports {
namespace {

using planner::Offload;

// MMEngine's FSDP wrapper as planner/configs/mmengine_config.cc reads it, on 2 GPUs.
planner::RunSettings whole_model_fsdp1(bool offload) {
  planner::RunSettings s;
  s.precision = planner::Precision::kFp32;
  s.gpus_per_node = 2;
  s.micro_batch = 32;
  s.zero_stage = 3;
  s.sharding = planner::Sharding::kFsdp1;
  s.fsdp_wrap = planner::FsdpWrap::kModel;
  s.offload_param = offload ? Offload::kCpu : Offload::kNone;
  s.offload_optimizer = s.offload_param;
  return s;
}

planner::Plan plan_of(const planner::RunSettings& s) {
  planner::Plan plan;
  plan.settings = s;
  plan.config.zero_stage = s.zero_stage;
  plan.config.offload_param = s.offload_param;
  plan.config.offload_optimizer = s.offload_optimizer;
  plan.config.micro_batch = s.micro_batch;
  plan.config.grad_accum = 1;
  return plan;
}

}  // namespace

TEST_CASE("an MMFullyShardedDataParallel config's cpu_offload follows the plan's offload") {
  const RecipePatch on = mmengine_patch(plan_of(whole_model_fsdp1(true)), whole_model_fsdp1(false), {}, "cfg.py");
  CHECK(on.text == "# bash tools/dist_train.sh cfg.py 2 --cfg-options model_wrapper_cfg.cpu_offload=True\n");
  CHECK(on.notes.empty());
  const RecipePatch off = mmengine_patch(plan_of(whole_model_fsdp1(false)), whole_model_fsdp1(true), {}, "cfg.py");
  CHECK(off.text == "# bash tools/dist_train.sh cfg.py 2 --cfg-options model_wrapper_cfg.cpu_offload=False\n");
  const RecipePatch same = mmengine_patch(plan_of(whole_model_fsdp1(true)), whole_model_fsdp1(true), {}, "cfg.py");
  CHECK(same.text == "# the config already runs the plan: no key to change\n");
  // A DDP config has no key for a sharded plan: said, not written.
  planner::RunSettings ddp = whole_model_fsdp1(false);
  ddp.zero_stage = 0;
  ddp.fsdp_wrap = planner::FsdpWrap::kLayers;
  const RecipePatch sharded = mmengine_patch(plan_of(whole_model_fsdp1(true)), ddp, {}, "cfg.py");
  REQUIRE(sharded.notes.size() == 1);
  CHECK(sharded.notes[0].find("ZeRO stage 3 and offload have no key here") == 0);
}

}  // namespace headroom::reports
