// `headroom run` on QLoRA and LoRA plans as transformers' Trainer runs them
// (bf16 model, fp32 PEFT adapters, an NF4 base for QLoRA): the loss falls, and
// each category the run measures apart is within 5% of the planner's
// prediction (issue 12). A category off by more means the executor and the
// planner disagree about a mechanism: NF4's constants, fp32 adapters, the
// adapters' casts.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

// Trains `fit_flags` on `model` for 12 steps and checks the loss (falling by
// `loss_drop` at least) and the categories; returns the run's JSON.
nlohmann::json check_adapter_run(const std::string& fit_flags, const std::string& model = "tiny-llama",
                                 double loss_drop = 0.2) {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  // The executor's 4-bit linear keeps no input, as bitsandbytes from 0.43.2 (docs/stacks.md, "Releases").
  const RunOutput fit = run_headroom("fit " + quoted(model) + " --gpu a6000 --precision bf16 --stack hf-trainer --batch 4 " +
                                     fit_flags + " --versions bitsandbytes=0.50.2 -o " + quoted(plan));
  REQUIRE(fit.exit_code == 0);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 12 --lr 2e-2 --device cpu --json");
  if (built_without_libtorch(run)) return nullptr;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);

  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 12);
  const double first = steps[0]["loss"].get<double>();
  const double last = (steps[9]["loss"].get<double>() + steps[10]["loss"].get<double>() +
                       steps[11]["loss"].get<double>()) / 3;
  CHECK(std::isfinite(last));
  CHECK(last <= first - loss_drop);

  const int compared = check_categories_within(json, 0.05);
  CHECK(compared == 4);  // parameters, optimizer states, gradients, activations
  return json;
}

TEST_CASE("run trains QLoRA with an NF4 base and fp32 adapters as the planner prices them") {
  check_adapter_run("--qlora --kbit-prep none");
}

TEST_CASE("run trains QLoRA from a checkpoint bitsandbytes quantized, its NF4 weights as stored") {
  // transformers + bitsandbytes save_pretrained of a 4-bit tiny Llama (scripts/make_bnb_checkpoint.py).
  const std::string model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/tiny-llama-bnb-nf4";
  // Initialised as transformers does (std 0.02), its loss starts at that of
  // uniform guesses on the synthetic tokens (ln 256 = 5.55): 12 steps are only
  // asked not to diverge.
  const nlohmann::json json = check_adapter_run("--qlora --kbit-prep none --seq 64", model, -0.05);
  if (json.is_null()) return;
  CHECK(json.dump().find("weights: loaded from " + model + "/model.safetensors") != std::string::npos);
}

TEST_CASE("run trains LoRA with fp32 adapters over bf16 and no dropout as the planner prices them") {
  check_adapter_run("--lora --lora-dropout 0");
}

}  // namespace
