// `headroom run` on a Hugging Face CLIPModel config (tests/data/hf/tiny-clip:
// both towers hidden 64, 2 layers, 4 heads; 32 px images in patches of 8, 16
// text tokens, vocab 512, projection 32): the executor's CLIP module
// (models/torch/clip_module.h) trains on synthetic image-text pairs with the
// contrastive loss falling, and each category it measures apart is within 5%
// of the planner's prediction: fully fine-tuned in fp32, with LoRA adapters in
// bf16, and with the vision layers checkpointed.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

std::string tiny_clip() { return std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/tiny-clip"; }

// `fit_flags` after the model and the GPU (--batch among them).
void check_clip_run(const std::string& fit_flags, double lr) {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit = run_headroom("fit " + quoted(tiny_clip()) + " --gpu a6000 " + fit_flags + " -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run =
      run_headroom("run " + quoted(plan) + " --steps 20 --lr " + std::to_string(lr) + " --device cpu --json");
  if (built_without_libtorch(run)) return;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 20);
  const double first = steps[0]["loss"].get<double>();
  const double last = steps[19]["loss"].get<double>();
  CHECK(std::isfinite(last));
  // 8 pairs: matched within 20 steps, well past the ln(batch) of embeddings
  // that only shrank their similarity scale.
  CHECK(last < first / 2);
  const int compared = check_categories_within(json, 0.05);
  CHECK(compared == 4);
}

TEST_CASE("run trains a Hugging Face CLIPModel, fully fine-tuned, as the planner prices it") {
  check_clip_run("--batch 4 --precision fp32", 3e-4);
}

TEST_CASE("run trains a Hugging Face CLIPModel with LoRA under the Trainer's stack as priced") {
  check_clip_run("--batch 4 --precision bf16 --lora --stack hf-trainer", 3e-3);
}

// The vision layers, at batch 8. Every layer of both towers at batch 4
// measures activations -3.1%: the contrastive loss's small saved tensors
// (norms, [B, B] logits) the planner does not count weigh more at batch 4.
TEST_CASE("run trains a Hugging Face CLIPModel with its vision layers checkpointed as priced") {
  check_clip_run("--batch 8 --precision fp32 --checkpoint-blocks "
                 "vision_model.encoder.layers.0,vision_model.encoder.layers.1",
                 3e-4);
}

TEST_CASE("run refuses dropout for CLIP, which its module does not run") {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit =
      run_headroom("fit " + quoted(tiny_clip()) + " --gpu a6000 --batch 2 --dropout 0.1 -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --json");
  if (built_without_libtorch(run)) return;
  CHECK(run.exit_code != 0);
  CHECK(contains(run.err, "settings.dropout"));
}

}  // namespace
