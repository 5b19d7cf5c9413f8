// Issue 37, item 6: `plan` with a paged optimizer chose CPU optimizer offload,
// a plan its own `simulate` and `run` refuse (bitsandbytes' paged optimizers
// step on the GPU; ZeRO-Offload replaces the optimizer with its CPU one). The
// search no longer offers it: what plan -o writes, simulate reads.
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;  // NOLINT(google-build-using-namespace): test helpers

}  // namespace

TEST_CASE("plan --paged-optimizer never chooses optimizer offload, and simulate reads every plan it writes") {
  // The first needed offload to fit (the old search offloaded the optimizer);
  // the others fit on the GPUs.
  for (const char* run : {"llama-3-8b --gpu 4090", "llama-3-8b --gpu a6000 --gpus 2", "qwen-7b --gpu a100-80g --gpus 2"}) {
    CAPTURE(run);
    TempDir dir;
    const std::string plan_file = dir.file("plan.json");
    const RunOutput plan =
        run_headroom(std::string("plan ") + run + " --optimizer adamw-8bit --paged-optimizer --json -o " + quoted(plan_file));
    REQUIRE_MESSAGE((plan.exit_code == 0 || plan.exit_code == 1), plan.err);
    const nlohmann::json answer = parse_json(plan.out);
    CHECK(answer["best"]["config"]["offload_optimizer"] == "none");
    if (!answer["found"].get<bool>()) {
      CHECK(contains(plan.err, "not written, no plan fits"));
      continue;
    }
    const RunOutput simulate = run_headroom("simulate " + quoted(plan_file) + " --json");
    CHECK_MESSAGE(simulate.exit_code == 0, simulate.err);
  }
}

TEST_CASE("plan --emit torchtune of a config with PagedAdamW8bit writes a plan simulate reads") {
  // Without optimizer_in_bwd (which rules out optimizer offload anyway) and at 12 GiB, where
  // nothing fits on the GPU alone, a search that ignored the paged optimizer wrote a plan with CPU
  // optimizer offload (seen with both the search's and the candidates' validation guards removed).
  TempDir dir;
  const std::string config = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/torchtune/llama3_2_3B_full_single_device.yaml";
  const std::string plan_file = dir.file("plan.json");
  const RunOutput plan = run_headroom("plan --gpu 4090 --gpu-mem 12GiB --seq 2048 --torchtune " + quoted(config) +
                                      " --torchtune-set optimizer._component_=bitsandbytes.optim.PagedAdamW8bit "
                                      "--torchtune-set optimizer_in_bwd=False --emit torchtune --json -o " +
                                      quoted(plan_file));
  if (plan.exit_code == 1) {  // nothing fits on the GPU without offload: said, nothing written
    CHECK_MESSAGE(contains(plan.err, "no plan fits"), plan.err);
    CHECK_FALSE(fs::exists(plan_file));
    return;
  }
  REQUIRE_MESSAGE(plan.exit_code == 0, plan.err);
  CHECK(parse_json(read_text(plan_file))["config"]["offload_optimizer"] == "none");
  const RunOutput simulate = run_headroom("simulate " + quoted(plan_file));
  CHECK_MESSAGE(simulate.exit_code == 0, simulate.err);
}

}  // namespace headroom
