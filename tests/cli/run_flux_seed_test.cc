// The seed story of the 12B FLUX.1-Kontext DiT with a trainable adapter on a
// 48 GB A6000 (../shared/seeds), at toy size, end to end through `headroom fit`
// and `headroom run`: tiny-flux with LoRA on its frozen base under bf16 mixed
// precision, every transformer block checkpointed, the first one included.
// Its input comes from the frozen embeddings and does not require grad, which
// is what broke the story's reentrant checkpointing ("element 0 of tensors does
// not require grad"); here the block's adapters are inputs of the checkpoint's
// autograd node (docs/executor.md), so it trains, the loss falls, and every
// category measured apart is within 5% of the prediction.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

// 24 steps: the mean loss of the last six below that of the first six.
void check_loss_falls(const nlohmann::json& steps) {
  double first = 0, last = 0;
  for (int i = 0; i < 6; ++i) {
    first += steps[i]["loss"].get<double>() / 6;
    last += steps[18 + i]["loss"].get<double>() / 6;
  }
  CHECK(std::isfinite(last));
  CHECK(last < first);
}

TEST_CASE("run trains the Flux adapter seed run with every block checkpointed, the first behind frozen embeddings") {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit = run_headroom("fit tiny-flux --gpu a6000 --lora --precision bf16-mixed --checkpointing every -o " +
                                     quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  // Every transformer block is checkpointed, the first one too; the frozen
  // embeddings before it are not.
  const nlohmann::json written = parse_json(read_text(plan));
  int checkpointed = 0;
  for (const nlohmann::json& block : written["blocks"]) {
    const std::string name = block["name"];
    if (name.find("transformer_blocks.") == std::string::npos) continue;
    CHECK_MESSAGE(block["choice"] == "checkpoint", name);
    ++checkpointed;
  }
  CHECK(checkpointed == 4);
  CHECK(written["blocks"][1]["name"] == "transformer_blocks.0");

  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 24 --lr 1e-2 --device cpu --json");
  if (built_without_libtorch(run)) return;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 24);
  // Each step draws its own noise and timesteps, so single losses jump about:
  // the last six steps against the first six (2.27 -> 2.09 here).
  check_loss_falls(steps);
  CHECK(check_categories_within(json, 0.05) == 4);  // parameters, optimizer states, gradients, activations
}

TEST_CASE("run trains the Flux adapter under autocast over a bf16 model, its fp32 LayerNorm copies as priced") {
  // The diffusers scripts' accelerate autocast over the bf16 transformer (stack
  // hf-trainer): the modulation LayerNorms run on fp32 copies and return fp32, and
  // the linears reading them each cast a 16-bit copy (docs/stacks.md, "Autocast
  // over a bf16 model"). Without checkpointing every block keeps those copies:
  // the LayerNorms' share alone, adapters in the model's dtype both ways.
  const std::string fit_flags = "fit tiny-flux --gpu a6000 --lora --precision bf16 --stack hf-trainer ";
  const RunOutput on = run_headroom(fit_flags + "--checkpointing none --adapter-dtype model --json");
  const RunOutput off = run_headroom(fit_flags + "--checkpointing none --adapter-dtype model --autocast off --json");
  REQUIRE_MESSAGE(on.exit_code == 0, on.err);
  REQUIRE_MESSAGE(off.exit_code == 0, off.err);
  const auto activations = [](const RunOutput& out) {
    return parse_json(out.out)["as_given"]["prediction"]["breakdown"]["activations_bytes"].get<double>();
  };
  REQUIRE(activations(off) > 0);
  CHECK(activations(on) > 1.05 * activations(off));

  // Trained so, fp32 adapters included, every block checkpointed as in the seed
  // story: the recomputed block holds the copies at the backward peak, and a
  // forward run without them measures 12% under this prediction.
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit = run_headroom(fit_flags + "--checkpointing every -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 24 --lr 1e-2 --device cpu --json");
  if (built_without_libtorch(run)) return;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 24);
  check_loss_falls(steps);
  CHECK(check_categories_within(json, 0.05) == 4);
}

}  // namespace
