// LLaMA-Factory configs (planner/configs/llamafactory_import.h): its own keys renamed
// onto the Trainer's and TRL's, its defaults applied, the rest read as
// TrainingArguments.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/configs/llamafactory_import.h"

namespace headroom::planner {

TEST_CASE("LLaMA-Factory's on-the-fly QLoRA example: 4-bit double-quantized base, LoRA r 8 on every linear") {
  RunSettings base;
  base.model = "llama-3-8b";
  base.gpu = "4090";
  Result<ConfigImport> lf = load_llamafactory_config(
      std::string(HEADROOM_SOURCE_DIR) + "/tests/data/llamafactory/llama3_lora_sft_otfq.yaml", base);
  REQUIRE_MESSAGE(lf.is_ok(), lf.message());
  const RunSettings& s = lf->settings;
  CHECK(s.mode == TrainMode::kQlora);
  CHECK(s.nf4_double_quant);  // double_quantization defaults to true
  CHECK(s.lora.rank == 8);
  CHECK(s.lora.dropout == 0.0);  // LLaMA-Factory's default, not TRL's 0.05
  CHECK(s.lora.targets == std::vector<std::string>{"all-linear"});  // lora_target all: every linear
  CHECK(s.seq_len == 2048);
  CHECK(s.micro_batch == 1);
  CHECK(s.grad_accum == 8);
  CHECK(s.checkpointing == CheckpointPolicy::kEveryBlock);  // on unless disable_gradient_checkpointing
  CHECK(s.precision == Precision::kBf16Pure);
  CHECK(s.stack == Stack::kHfTrainer);
  const auto listed = [&](const std::string& key) {
    return std::find(lf->ignored.begin(), lf->ignored.end(), key) != lf->ignored.end();
  };
  CHECK(listed("learning_rate"));
  CHECK(listed("ddp_timeout"));
  CHECK_FALSE(listed("dataset"));
  CHECK_FALSE(listed("lora_rank"));
}

TEST_CASE("LLaMA-Factory: a comma list of targets, full fine-tuning, and what is refused") {
  Result<ConfigImport> lora = import_llamafactory_config(
      "finetuning_type: lora\nlora_target: q_proj,v_proj\ndisable_gradient_checkpointing: true\n", "lf.yaml",
      RunSettings{});
  REQUIRE_MESSAGE(lora.is_ok(), lora.message());
  CHECK(lora->settings.lora.targets == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(lora->settings.checkpointing == CheckpointPolicy::kNone);
  Result<ConfigImport> full = import_llamafactory_config("finetuning_type: full\n", "lf.yaml", RunSettings{});
  REQUIRE(full.is_ok());
  CHECK(full->settings.mode == TrainMode::kFull);
  for (const auto& [yaml, expected] : std::vector<std::pair<std::string, std::string>>{
           {"finetuning_type: freeze\n", "lf.yaml: finetuning_type: expected lora or full"},
           {"quantization_bit: 8\n", "lf.yaml: quantization_bit: expected 4"},
           {"finetuning_type: full\nuse_unsloth: true\n", "lf.yaml: use_unsloth: expected false with finetuning_type full"},
           {"use_unsloth: true\nenable_liger_kernel: true\n", "lf.yaml: use_unsloth: expected false with enable_liger_kernel"}}) {
    Result<ConfigImport> bad = import_llamafactory_config(yaml, "lf.yaml", RunSettings{});
    REQUIRE_FALSE(bad.is_ok());
    CHECK_MESSAGE(bad.message().find(expected) == 0, bad.message());
  }
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("LLaMA-Factory's enable_liger_kernel: the fused linear cross-entropy for pt and sft, not where logits are needed") {
  Result<ConfigImport> sft = import_llamafactory_config("enable_liger_kernel: true\n", "lf.yaml", RunSettings{});
  REQUIRE_MESSAGE(sft.is_ok(), sft.message());
  REQUIRE(sft->settings.loss.has_value());
  CHECK(sft->settings.loss->impl == LossImpl::kFusedLinearCe);
  CHECK(sft->settings.liger_kernels == std::optional<bool>(true));
  Result<ConfigImport> dpo = import_llamafactory_config("stage: dpo\nenable_liger_kernel: true\n", "lf.yaml", RunSettings{});
  REQUIRE_MESSAGE(dpo.is_ok(), dpo.message());
  CHECK_FALSE(dpo->settings.loss.has_value());
  CHECK(dpo->settings.liger_kernels == std::optional<bool>(true));  // the modules all the same
  Result<ConfigImport> bad = import_llamafactory_config("enable_liger_kernel: maybe\n", "lf.yaml", RunSettings{});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("lf.yaml: enable_liger_kernel: expected true or false") == 0);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("LLaMA-Factory's use_unsloth: the unsloth stack over the same LoRA settings") {
  // model/model_utils/unsloth.py (1f41dfb): FastLanguageModel, use_gradient_checkpointing "unsloth".
  Result<ConfigImport> lf = import_llamafactory_config(
      "use_unsloth: true\nquantization_bit: 4\nbf16: true\nupcast_layernorm: true\n", "lf.yaml", RunSettings{});
  REQUIRE_MESSAGE(lf.is_ok(), lf.message());
  CHECK(lf->settings.stack == Stack::kUnsloth);
  CHECK(lf->settings.mode == TrainMode::kQlora);
  CHECK(lf->settings.lora.dropout == 0.0);  // LLaMA-Factory's default: Unsloth's fused path
  CHECK(lf->settings.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK_FALSE(lf->settings.kbit_prep.has_value());
  CHECK(std::any_of(lf->notes.begin(), lf->notes.end(),
                    [](const std::string& note) { return note.starts_with("use_unsloth: priced as --stack unsloth"); }));
}

}  // namespace headroom::planner
