// MoE models from config.json and from the zoo: `fit` answers with all experts
// resident, names the routing assumption and, under QLoRA, the experts
// bitsandbytes leaves unquantized; a bad MoE config is refused by field.
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kVersions = " --versions transformers=5.23.0,torch=2.11.0,peft=0.21.2,bitsandbytes=0.50.2";

bool any_warning_has(const nlohmann::json& answer, const std::string& text) {
  for (const nlohmann::json& warning : answer["warnings"]) {
    if (contains(warning.get<std::string>(), text)) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("fit answers for Qwen3-30B-A3B from its config.json with every expert resident and the routing note") {
  const std::string config = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen3-30b-a3b/config.json";
  const RunOutput lora = run_headroom("fit '" + config + "' --gpu h200 --mode lora --seq 2048 --stack hf-trainer "
                                      "--precision bf16 --json" + kVersions);
  REQUIRE_MESSAGE(lora.exit_code == 0, lora.err);
  const nlohmann::json answer = parse_json(lora.out);
  // 30,532,122,624 bf16 parameters (all 128 experts of 48 layers), plus fp32 adapters.
  const int64_t parameters = answer["as_given"]["prediction"]["breakdown"]["parameters_bytes"].get<int64_t>();
  CHECK(parameters >= int64_t{2} * 30'532'122'624);
  CHECK(parameters < int64_t{2} * 30'532'122'624 + (int64_t{100} << 20));
  CHECK(any_warning_has(answer, "48 sparse layers, 128 experts, top-8"));
  CHECK(any_warning_has(answer, "Routing assumption"));
}

TEST_CASE("fit mixtral-8x7b under QLoRA says the experts stay unquantized") {
  const RunOutput qlora = run_headroom("fit mixtral-8x7b --gpu h100 --qlora --seq 1024 --stack hf-trainer" + kVersions);
  REQUIRE_MESSAGE(qlora.exit_code <= 1, qlora.err);  // 1: does not fit, an answer all the same
  // 32 layers x 8 experts x 3 x 4096 x 14336 bf16 = 84.0 GiB.
  CHECK(contains(qlora.out, "84.0 GiB stay unquantized"));
  CHECK(contains(qlora.out, "Routing assumption"));
}

TEST_CASE("run trains tiny-moe on the CPU as fit priced it, and fit names the routing assumption") {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit = run_headroom("fit tiny-moe --gpu a6000 --batch 4 --precision fp32 -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  CHECK(contains(fit.out, "tiny-moe is a mixture of experts (4 sparse layers, 4 experts, top-2)"));
  CHECK(contains(fit.out, "Routing assumption"));
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 8 --lr 3e-3 --device cpu --json");
  if (built_without_libtorch(run)) return;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 8);
  CHECK(steps[7]["loss"].get<double>() < steps[0]["loss"].get<double>());
  CHECK(check_categories_within(json, 0.05) == 4);
}

TEST_CASE("a bad MoE config.json is refused naming the file and the field") {
  TempDir dir;
  write_text(dir.file("config.json"),
             R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "vocab_size": 256, "router_jitter_noise": 0.01})");
  const RunOutput bad = run_headroom("fit '" + dir.file("config.json") + "' --gpu h100");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, dir.file("config.json") + ": router_jitter_noise: expected 0"));
}

}  // namespace headroom
