// DeepSeek-V2/V3 from config.json and from the zoo: `fit` answers with every
// expert resident and the routing note; a bad DeepSeek config is refused by field.
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kVersions = " --versions transformers=5.23.0,torch=2.11.0,peft=0.21.2";

bool any_warning_has(const nlohmann::json& answer, const std::string& text) {
  for (const nlohmann::json& warning : answer["warnings"]) {
    if (contains(warning.get<std::string>(), text)) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("fit answers for DeepSeek-V2-Lite from its config.json with every expert resident") {
  const std::string config = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/deepseek-v2-lite/config.json";
  const RunOutput lora = run_headroom("fit '" + config + "' --gpu h100 --mode lora --seq 2048 --stack hf-trainer "
                                      "--precision bf16 --json" + kVersions);
  REQUIRE_MESSAGE(lora.exit_code == 0, lora.err);
  const nlohmann::json answer = parse_json(lora.out);
  // 15,706,484,224 bf16 parameters (64 routed experts in 26 layers), plus the fp32
  // adapters (28 MB) and what the planner books beside them (the oracle's 2-layer
  // rows agree on the whole).
  const int64_t parameters = answer["as_given"]["prediction"]["breakdown"]["parameters_bytes"].get<int64_t>();
  CHECK(parameters >= int64_t{2} * 15'706'484'224);
  CHECK(parameters < int64_t{2} * 15'706'484'224 + (int64_t{128} << 20));
  CHECK(any_warning_has(answer, "26 sparse layers, 64 experts, top-6"));
  CHECK(any_warning_has(answer, "Routing assumption"));
}

TEST_CASE("fit deepseek-v2-lite from the zoo answers as its config.json does") {
  const RunOutput zoo = run_headroom("fit deepseek-v2-lite --gpu h100 --mode lora --seq 2048 --stack hf-trainer "
                                     "--precision bf16 --json" + kVersions);
  REQUIRE_MESSAGE(zoo.exit_code == 0, zoo.err);
  const nlohmann::json answer = parse_json(zoo.out);
  const int64_t parameters = answer["as_given"]["prediction"]["breakdown"]["parameters_bytes"].get<int64_t>();
  CHECK(parameters >= int64_t{2} * 15'706'484'224);
  CHECK(parameters < int64_t{2} * 15'706'484'224 + (int64_t{128} << 20));
}

TEST_CASE("a bad DeepSeek config.json is refused naming the file and the field") {
  TempDir dir;
  write_text(dir.file("config.json"),
             R"({"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "vocab_size": 256, "n_routed_experts": 8, "topk_method": "noaux_tc", "num_experts_per_tok": 2})");
  const RunOutput bad = run_headroom("fit '" + dir.file("config.json") + "' --gpu h100");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, dir.file("config.json") + ": topk_method: expected \"greedy\" or \"group_limited_greedy\""));
}

}  // namespace headroom
