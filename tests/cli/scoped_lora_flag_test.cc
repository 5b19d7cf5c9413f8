// --scoped-lora GLOB:RANK[:TARGETS]: adapters of their own rank in one part of
// the model from the command line, the same run as XTuner's llm_lora and
// visual_encoder_lora read from its config (tests/data/xtuner).
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {

using namespace cli_harness;

TEST_CASE("--scoped-lora gives the LLaVA tower rank 64 beside the LLM's 512, as the XTuner config does") {
  const std::string data = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/xtuner/";
  const RunOutput flags = run_headroom(
      "fit llava-llama-3-8b --gpu 4090 --qlora --lora-rank 512 --lora-dropout 0.05 --scoped-lora '*vision_tower*:64' "
      "--train '*multi_modal_projector*' --seq 2047 --checkpointing every --zero 2 --offload-optimizer cpu "
      "--precision bf16-mixed --stack deepspeed --loss full --shortest-sample 576 --json");
  REQUIRE_MESSAGE(flags.exit_code == 0, flags.err);
  const RunOutput xtuner = run_headroom("fit llava-llama-3-8b --gpu 4090 --xtuner " +
                                        quoted(data + "llava_llama3_8b_qlora_finetune.dump.json") + " --deepspeed " +
                                        quoted(data + "deepspeed_zero2_offload.json") + " --json");
  REQUIRE_MESSAGE(xtuner.exit_code == 0, xtuner.err);
  const nlohmann::json a = parse_json(flags.out)["as_given"];
  const nlohmann::json b = parse_json(xtuner.out)["as_given"];
  CHECK(a["settings"]["scoped_lora"] == b["settings"]["scoped_lora"]);
  CHECK(b["settings"]["shortest_sample"] == 576);  // unpacked: an image and its placeholder at the least
  CHECK(a["prediction"]["model"] == b["prediction"]["model"]);
  CHECK(a["prediction"]["gpu_total_bytes"] == b["prediction"]["gpu_total_bytes"]);

  // Only some of the tower's linears, by suffix.
  const RunOutput narrowed = run_headroom(
      "fit llava-llama-3-8b --gpu 4090 --qlora --scoped-lora '*vision_tower*:64:q_proj,v_proj' --json");
  REQUIRE_MESSAGE(narrowed.exit_code == 0, narrowed.err);
  CHECK(parse_json(narrowed.out)["as_given"]["settings"]["scoped_lora"][0]["targets"] ==
        nlohmann::json::array({"q_proj", "v_proj"}));
}

TEST_CASE("--scoped-lora refuses a value without a rank, and a scope that matches nothing, by name") {
  const RunOutput no_rank = run_headroom("fit llava-llama-3-8b --gpu 4090 --qlora --scoped-lora '*vision_tower*'");
  CHECK(no_rank.exit_code == 2);
  CHECK(contains(no_rank.err, "--scoped-lora"));
  CHECK(contains(no_rank.err, "GLOB:RANK"));
  const RunOutput nothing = run_headroom("fit llava-llama-3-8b --gpu 4090 --qlora --scoped-lora '*no_tower*:8'");
  CHECK(nothing.exit_code != 0);
  CHECK(contains(nothing.err, "scoped_lora[0]"));
  const RunOutput full = run_headroom("fit llava-llama-3-8b --gpu 4090 --scoped-lora '*vision_tower*:8'");
  CHECK(full.exit_code == 2);
  CHECK(contains(full.err, "adapters need mode lora or qlora"));
}

}  // namespace headroom
