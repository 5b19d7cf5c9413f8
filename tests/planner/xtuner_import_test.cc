// XTuner configs (planner/configs/xtuner_import.h), read from what MMEngine's loader
// prints for the configs in tests/data/xtuner (scripts/exporter/read_mmengine_config.py;
// tests/exporter/mmengine_loader.sh checks that the loader still prints these dumps).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "graph/atomic_file.h"
#include "planner/configs/deepspeed_import.h"
#include "planner/configs/xtuner_import.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/xtuner/";

nlohmann::json dump(const std::string& name) {
  Result<std::string> text = graph::read_file(kData + name + ".dump.json", 1 << 20);
  REQUIRE_MESSAGE(text.is_ok(), text.message());
  return nlohmann::json::parse(text.value());
}

ConfigImport imported(const nlohmann::json& d, bool deepspeed, const std::string& model) {
  RunSettings base;
  base.gpu = "4090";
  Result<ConfigImport> out = import_xtuner_config(d, "cfg.py", base, deepspeed);
  REQUIRE_MESSAGE(out.is_ok(), out.message());
  out->settings.model = model;
  return out.value();
}

std::string refusal(nlohmann::json d, bool deepspeed = false) {
  Result<ConfigImport> out = import_xtuner_config(d, "cfg.py", RunSettings{}, deepspeed);
  REQUIRE_FALSE(out.is_ok());
  return out.message();
}

}  // namespace

TEST_CASE("the seed's XTuner LLaVA QLoRA config under --deepspeed zero2_offload is the run as the flags give it") {
  ConfigImport x = imported(dump("llava_llama3_8b_qlora_finetune"), true, "llava-llama-3-8b");
  Result<RunSettings> with_ds = load_deepspeed_config(kData + "deepspeed_zero2_offload.json", x.settings);
  REQUIRE_MESSAGE(with_ds.is_ok(), with_ds.message());
  const RunSettings& s = with_ds.value();
  CHECK(s.mode == TrainMode::kQlora);
  CHECK(s.quant == QuantFormat::kNf4);
  CHECK(s.nf4_double_quant);
  CHECK(s.lora.rank == 512);
  CHECK(s.lora.dropout == doctest::Approx(0.05));
  CHECK(s.lora.targets == std::vector<std::string>{"all-linear"});  // find_all_linear_names
  REQUIRE(s.scoped_lora.size() == 1);
  CHECK(s.scoped_lora[0].scope == "*vision_tower*");
  CHECK(s.scoped_lora[0].lora.rank == 64);
  CHECK(s.scoped_lora[0].lora.targets.empty());
  CHECK(s.train_patterns == std::vector<std::string>{"*multi_modal_projector*"});
  CHECK(s.seq_len == 1472 - 1 + 576);
  CHECK(s.shortest_sample == 576);  // samples are not packed: from the image alone to the cap
  CHECK(s.micro_batch == 1);
  CHECK(s.grad_accum == 1);
  CHECK(s.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK(s.precision == Precision::kBf16Mixed);
  CHECK(s.stack == Stack::kDeepspeed);
  CHECK(s.zero_stage == 2);
  CHECK(s.offload_optimizer == Offload::kCpu);
  CHECK(s.checkpoints_kept == 2);

  // The same run written out by hand predicts the same.
  RunSettings by_hand;
  by_hand.model = "llava-llama-3-8b";
  by_hand.gpu = "4090";
  by_hand.mode = TrainMode::kQlora;
  by_hand.lora = LoraSettings{512, {}, 0.05};
  by_hand.scoped_lora = {{"*vision_tower*", LoraSettings{64, {}, 0.05}}};
  by_hand.train_patterns = {"*multi_modal_projector*"};
  by_hand.seq_len = 2047;
  by_hand.checkpointing = CheckpointPolicy::kEveryBlock;
  by_hand.precision = Precision::kBf16Mixed;
  by_hand.stack = Stack::kDeepspeed;
  by_hand.loss = LossSpec{LossImpl::kFull, 8};
  by_hand.zero_stage = 2;
  by_hand.offload_optimizer = Offload::kCpu;
  by_hand.shortest_sample = 576;  // unpacked LLaVA samples: at least the image's 576 tokens
  const Prediction a = predict_as_given(s);
  const Prediction b = predict_as_given(by_hand);
  CHECK(a.gpu_total == b.gpu_total);
  CHECK(a.model.trainable_params == b.model.trainable_params);
  // r = 512 on the LLM's linears, r = 64 on the tower's, and the projector in full.
  CHECK(a.model.trainable_params == 32LL * 512 * (4096 * 2 + 5120 * 2 + 4096 * 2 + 18432 * 3) + 23LL * 1'179'648 +
                                        (1024 * 4096 + 4096) + (4096 * 4096 + 4096));
  CHECK(a.fits_gpu);  // the seed story's 24 GB GPU
}

TEST_CASE("without DeepSpeed, XTuner's k-bit preparation leaves an fp32 model around the 4-bit linears under AMP") {
  ConfigImport sft = imported(dump("llama3_8b_instruct_qlora_alpaca_e3"), false, "llama-3-8b");
  const RunSettings& s = sft.settings;
  CHECK(s.precision == Precision::kFp16Amp);  // AmpOptimWrapper dtype float16
  CHECK(s.stack == Stack::kTorchAmp);
  CHECK(s.optimizer_impl == OptimizerImpl::kForeach);
  CHECK(s.mode == TrainMode::kQlora);
  CHECK(s.lora.rank == 64);
  CHECK(s.lora.dropout == doctest::Approx(0.1));
  CHECK_FALSE(s.shortest_sample);
  CHECK(s.seq_len == 2048);  // packed to max_length
  CHECK(s.grad_accum == 16);
  CHECK(s.scoped_lora.empty());
  // Embeddings and the output layer are fp32: 2 x 128256 x 4096 x 4 bytes and more.
  const Prediction p = predict_as_given(s);
  CHECK(p.model.weight_bytes_by_dtype.at("f32") > 2LL * 128256 * 4096 * 4);

  ConfigImport llava = imported(dump("llava_llama3_8b_qlora_finetune"), false, "llava-llama-3-8b");
  CHECK(llava.settings.precision == Precision::kFp16Amp);
}

TEST_CASE("XTuner keys headroom cannot price are refused by name") {
  const nlohmann::json sft = dump("llama3_8b_instruct_qlora_alpaca_e3");
  nlohmann::json fp4 = sft;
  fp4["config"]["model"]["llm"]["quantization_config"]["bnb_4bit_quant_type"] = "fp4";
  CHECK(refusal(fp4).find("cfg.py: model.llm.quantization_config.bnb_4bit_quant_type") != std::string::npos);
  nlohmann::json eight = sft;
  eight["config"]["model"]["llm"]["quantization_config"]["load_in_8bit"] = true;
  CHECK(refusal(eight).find("load_in_8bit") != std::string::npos);
  nlohmann::json no_lora = sft;
  no_lora["config"]["model"].erase("lora");
  CHECK(refusal(no_lora).find("model.lora") != std::string::npos);
  nlohmann::json rmsprop = sft;
  rmsprop["config"]["optim_wrapper"]["optimizer"]["type"] = {{"import", "torch.optim.RMSprop"}};
  CHECK(refusal(rmsprop).find("optim_wrapper.optimizer.type") != std::string::npos);
  // The optimizer is MMEngine's, read as for every MMEngine config: SGD keeps a
  // state only with momentum.
  nlohmann::json sgd = sft;
  sgd["config"]["optim_wrapper"]["optimizer"]["type"] = {{"import", "torch.optim.SGD"}};
  Result<ConfigImport> plain = import_xtuner_config(sgd, "cfg.py", RunSettings{}, false);
  REQUIRE_MESSAGE(plain.is_ok(), plain.message());
  CHECK(plain->settings.optimizer == OptimizerKind::kSgd);
  sgd["config"]["optim_wrapper"]["optimizer"]["momentum"] = 0.9;
  Result<ConfigImport> with_momentum = import_xtuner_config(sgd, "cfg.py", RunSettings{}, false);
  REQUIRE_MESSAGE(with_momentum.is_ok(), with_momentum.message());
  CHECK(with_momentum->settings.optimizer == OptimizerKind::kSgdMomentum);
  nlohmann::json not_ours = sft;
  not_ours["format"] = "something else";
  CHECK(refusal(not_ours).find("cfg.py: format") != std::string::npos);

  const nlohmann::json llava = dump("llava_llama3_8b_qlora_finetune");
  nlohmann::json tower_only = llava;
  tower_only["config"]["model"].erase("llm_lora");
  CHECK(refusal(tower_only).find("model.llm_lora") != std::string::npos);  // a frozen 4-bit LLM without adapters
  // A 16-bit tower beside the fp32 LLM PEFT's preparation leaves: mixed weight dtypes.
  nlohmann::json mixed = llava;
  mixed["config"]["model"]["visual_encoder"]["torch_dtype"] = {{"import", "torch.float16"}};
  CHECK(refusal(mixed).find("model.visual_encoder.torch_dtype") != std::string::npos);
  // Under DeepSpeed the engine casts everything to bf16: no longer mixed.
  CHECK(import_xtuner_config(mixed, "cfg.py", RunSettings{}, true).is_ok());
}

}  // namespace headroom::planner
