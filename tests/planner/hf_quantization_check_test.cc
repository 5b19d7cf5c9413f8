// A Hugging Face model's quantization_config against the run (planner/configs/hf_quantization_check.h,
// models/hf_quantization.h): a GPTQ or bitsandbytes 4-bit checkpoint is priced as
// the base it stores, never as a 16-bit one.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "models/hf_quantization.h"
#include "planner/configs/hf_quantization_check.h"
#include "planner/predict/model_context.h"
#include "planner/memory/model_states.h"

namespace headroom::planner {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";

// Qwen2.5-0.5B's config.json with a GPTQ quantization_config as AutoGPTQ /
// optimum export it (bits 4, group_size 128, desc_act false).
std::string gptq_model_dir() {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kData + "qwen2.5-0.5b/config.json"));
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128},
                                   {"desc_act", false}, {"sym", true}};
  const auto dir = std::filesystem::temp_directory_path() / ("headroom_gptq_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

RunSettings run_on(const std::string& model) {
  RunSettings s;
  s.model = model;
  s.gpu = "a100-80g";
  s.precision = Precision::kFp16Mixed;
  s.seq_len = 512;
  return s;
}

}  // namespace

TEST_CASE("quantization_config is read as transformers writes it, malformed fields refused by name") {
  nlohmann::json config = {{"model_type", "llama"}};
  CHECK_FALSE(models::read_hf_quantization(config, "c.json").value().has_value());
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", -1}};
  const auto gptq = models::read_hf_quantization(config, "c.json");
  REQUIRE(gptq.is_ok());
  CHECK(gptq.value()->method == "gptq");
  CHECK(gptq.value()->group_size == -1);
  config["quantization_config"] = nlohmann::json::parse(std::ifstream(kData + "tiny-llama-bnb-nf4/config.json"))["quantization_config"];
  const auto bnb = models::read_hf_quantization(config, "c.json");
  REQUIRE(bnb.is_ok());
  CHECK(bnb.value()->bits == 4);
  CHECK(bnb.value()->double_quant);
  CHECK(bnb.value()->quant_type == "nf4");
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", "four"}};
  CHECK(models::read_hf_quantization(config, "c.json").message() == "c.json: quantization_config.bits: expected an integer");
}

TEST_CASE("a GPTQ checkpoint is priced only as LoRA on its int4 base") {
  const std::string dir = gptq_model_dir();
  RunSettings lora = run_on(dir);
  lora.mode = TrainMode::kLora;
  const Result<ModelContext> refused = prepare_context(lora);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find(dir + "/config.json: quantization_config: a 4-bit GPTQ model (group_size 128)") == 0);
  CHECK(refused.message().find("--qlora --quant gptq --gptq-group-size 128") != std::string::npos);
  RunSettings gptq = lora;
  gptq.mode = TrainMode::kQlora;
  gptq.quant = QuantFormat::kGptq;
  const Result<ModelContext> priced = prepare_context(gptq);
  REQUIRE_MESSAGE(priced.is_ok(), priced.message());
  const ModelSize size = model_size(priced->graph, gptq.precision);
  CHECK(size.weight_bytes_by_dtype.count("i4") == 1);
  gptq.gptq_group_size = 64;  // not the checkpoint's
  CHECK_FALSE(prepare_context(gptq).is_ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a bitsandbytes 4-bit checkpoint needs QLoRA with its double quantization") {
  RunSettings s = run_on(kData + "tiny-llama-bnb-nf4");
  s.precision = Precision::kBf16Mixed;
  s.seq_len = 64;
  s.mode = TrainMode::kQlora;
  CHECK(prepare_context(s).is_ok());  // stored with double quantization, the default
  s.nf4_double_quant = false;
  const Result<ModelContext> refused = prepare_context(s);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("quantization_config: a bitsandbytes 4-bit model (nf4, double quantization on)") !=
        std::string::npos);
  s.nf4_double_quant = true;
  s.mode = TrainMode::kFull;
  CHECK_FALSE(prepare_context(s).is_ok());
}

TEST_CASE("8-bit bases and other quantization methods are refused as not modelled") {
  models::HfQuantization awq{"awq", 4, 128, false, ""};
  CHECK(check_hf_quantization(RunSettings{}, awq, "c.json").message() ==
        "c.json: quantization_config: quant_method 'awq' is not modelled (expected gptq or bitsandbytes 4-bit, or a "
        "16-bit model)");
  models::HfQuantization int8{"bitsandbytes", 8, 0, false, ""};
  CHECK(check_hf_quantization(RunSettings{}, int8, "c.json").message().find("8-bit (LLM.int8)") != std::string::npos);
  CHECK(check_hf_quantization(RunSettings{}, std::nullopt, "c.json").is_ok());
}

}  // namespace headroom::planner
