// `headroom run` on a Hugging Face ViTForImageClassification config
// (tests/data/hf/tiny-vit: hidden 64, 2 layers, 32 px, patch 8, 10 labels):
// the executor's ViT module (models/torch/vit_module.h) trains on synthetic
// images with the loss falling, and each category it measures apart is within
// 5% of the planner's prediction, fully fine-tuned and with LoRA adapters.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

void check_vit_run(const std::string& fit_flags, double lr) {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const std::string model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/tiny-vit";
  const RunOutput fit = run_headroom("fit " + quoted(model) + " --gpu a6000 --batch 4 " + fit_flags + " -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run =
      run_headroom("run " + quoted(plan) + " --steps 12 --lr " + std::to_string(lr) + " --device cpu --json");
  if (built_without_libtorch(run)) return;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 12);
  const double first = steps[0]["loss"].get<double>();
  const double last = steps[11]["loss"].get<double>();
  CHECK(std::isfinite(last));
  CHECK(last < first / 2);  // 8 images, 10 classes: memorised within 12 steps
  const int compared = check_categories_within(json, 0.05);
  CHECK(compared == 4);
}

TEST_CASE("run trains a Hugging Face ViT classifier, fully fine-tuned, as the planner prices it") {
  check_vit_run("--precision fp32", 1e-3);
}

TEST_CASE("run trains a Hugging Face ViT classifier with LoRA under the Trainer's stack as priced") {
  check_vit_run("--precision bf16 --lora --stack hf-trainer", 1e-2);
}

}  // namespace
