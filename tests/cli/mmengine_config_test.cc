// `--mmengine FILE`: any MMEngine config, read by the reader of its model type
// (planner/configs/mmengine_import.h), through the JSON MMEngine's loader prints for the
// configs in tests/data (no mmengine needed here; tests/exporter/mmengine_loader.sh
// runs the loader itself).
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/";

nlohmann::json fit_json(const std::string& args) {
  const RunOutput fit = run_headroom("fit " + args + " --json");
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  return parse_json(fit.out);
}

}  // namespace

TEST_CASE("fit --mmengine of the seed's accumulation config is fit with the equivalent flags") {
  const std::string config = kData + "mmpretrain/resnet50_seed_accumulation.dump.json";
  const RunOutput fit = run_headroom("fit --mmengine " + quoted(config) + " --gpu a100-80g --json");
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  // What was not read is listed on stderr, never dropped.
  CHECK(contains(fit.err, "keys not read"));
  CHECK(contains(fit.err, "val_dataloader"));
  CHECK(contains(fit.err, "default_hooks.logger"));
  const nlohmann::json by_config = parse_json(fit.out)["as_given"];
  const nlohmann::json by_flags = fit_json(
      "resnet-50 --batch 32 --resolution 224 --grad-accum 4 --optimizer sgd --precision fp32 --stack torch-amp "
      "--optimizer-impl foreach --loss full --max-zero 0 --no-offload --no-activation-offload --gpu a100-80g")["as_given"];
  CHECK(by_config["settings"] == by_flags["settings"]);
  CHECK(by_config["prediction"] == by_flags["prediction"]);
  CHECK(by_config["settings"]["model"] == "resnet-50");
  CHECK(by_config["settings"]["grad_accum"] == 4);
}

TEST_CASE("fit --mmengine takes MODEL and flags over the config, and needs MODEL for an XTuner config") {
  const std::string resnet = kData + "mmpretrain/resnet50_8xb32_in1k.dump.json";
  const nlohmann::json batch = fit_json("--mmengine " + quoted(resnet) + " --batch 8 --gpu 4090");
  CHECK(batch["as_given"]["settings"]["micro_batch"] == 8);
  const std::string sft = kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json";
  const RunOutput no_model = run_headroom("fit --mmengine " + quoted(sft) + " --gpu 4090");
  CHECK(no_model.exit_code == 2);
  CHECK(contains(no_model.err, "MODEL: missing (an XTuner config"));
  // With MODEL it is the --xtuner reading, to the byte.
  const nlohmann::json via = fit_json("llama-3-8b --mmengine " + quoted(sft) + " --gpu 4090");
  const nlohmann::json direct = fit_json("llama-3-8b --xtuner " + quoted(sft) + " --gpu 4090");
  CHECK(via["as_given"] == direct["as_given"]);
  const RunOutput both = run_headroom("fit llama-3-8b --mmengine " + quoted(sft) + " --xtuner " + quoted(sft) + " --gpu 4090");
  CHECK(both.exit_code == 2);
  CHECK(contains(both.err, "another MMEngine config"));
}

TEST_CASE("fit --mmengine answers the seed's FSDP cpu_offload, and refuses files that are not configs, naming them") {
  // The seed's model_wrapper_cfg=dict(type='MMFullyShardedDataParallel', cpu_offload=True):
  // FSDP1 with the whole model one FlatParameter and CPUOffload.
  const std::string fsdp = kData + "mmpretrain/resnet50_seed_fsdp_offload.dump.json";
  const nlohmann::json answer = fit_json("--mmengine " + quoted(fsdp) + " --gpu 4090 --gpus 2");
  const nlohmann::json& settings = answer["as_given"]["settings"];
  CHECK(settings["zero_stage"] == 3);
  CHECK(settings["sharding"] == "fsdp1");
  CHECK(settings["fsdp_wrap"] == "model");
  CHECK(settings["offload_param"] == "cpu");
  CHECK(settings["offload_optimizer"] == "cpu");
  CHECK(answer["as_given"]["prediction"]["fits"] == true);
  TempDir dir;
  const std::string text = dir.file("not.json");
  write_text(text, "model = dict(");
  const RunOutput bad = run_headroom("fit --mmengine " + quoted(text) + " --gpu 4090");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "invalid JSON"));
  CHECK(contains(bad.err, "(expected an MMEngine config .py"));
  const std::string other = dir.file("other.json");
  write_text(other, R"({"format": "headroom.mmengine-config", "config": {"model": {"type": "EncoderDecoder"}}})");
  const RunOutput unknown = run_headroom("fit --mmengine " + quoted(other) + " --gpu 4090");
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.err, "model.type: expected SupervisedFinetune, LLaVAModel, ImageClassifier"));
}

}  // namespace headroom
