// The seed story's LLaVA QLoRA run, at toy size, end to end through `headroom
// run` (tests/data/hf/tiny-llava: a CLIP tower of 3 layers read to the
// penultimate, a GELU projector, a 2-layer Llama; 16 image tokens): NF4 text
// linears with fp32 adapters, the vision tower and projector frozen and
// unquantized as the planner's lora_skip and quantize_skip say, the Trainer's
// stack. Once on the device and once with ZeRO-2-style optimizer offload to the
// CPU (the seed story's DeepSpeed config), one process each.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

// Returns how many categories were compared (each within 5%).
int check_llava_run(const std::string& fit_flags) {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const std::string model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/tiny-llava";
  // The executor's 4-bit linear keeps no input, as bitsandbytes from 0.43.2 (docs/stacks.md, "Releases").
  const RunOutput fit = run_headroom("fit " + quoted(model) + " --gpu a6000 --batch 4 --seq 48 --qlora --precision bf16 "
                                     "--stack hf-trainer --kbit-prep none --versions bitsandbytes=0.50.2 " +
                                     fit_flags + " -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 12 --lr 2e-2 --device cpu --json");
  if (built_without_libtorch(run)) return -1;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 12);
  const double first = steps[0]["loss"].get<double>();
  const double last = (steps[9]["loss"].get<double>() + steps[10]["loss"].get<double>() +
                       steps[11]["loss"].get<double>()) / 3;
  CHECK(std::isfinite(last));
  CHECK(last < first - 0.1);
  const int compared = check_categories_within(json, 0.05);
  return compared;
}

TEST_CASE("run trains LLaVA with QLoRA on its text model as the planner prices it") {
  const int compared = check_llava_run("");
  if (compared >= 0) CHECK(compared == 4);  // parameters, optimizer states, gradients, activations
}

TEST_CASE("run trains the LLaVA QLoRA seed run with ZeRO-2 optimizer offload to the CPU") {
  // On a CPU run the offloaded states share memory with everything else:
  // parameters and activations are compared.
  const int compared = check_llava_run("--zero 2 --offload-optimizer cpu");
  if (compared >= 0) CHECK(compared == 2);
}

}  // namespace
