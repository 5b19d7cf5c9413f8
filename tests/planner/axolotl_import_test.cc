// axolotl configs (planner/configs/axolotl_import.h): its keys renamed onto the
// Trainer's and read as TrainingArguments, errors named as the file spells them.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/configs/axolotl_import.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {

TEST_CASE("axolotl's llama-3 QLoRA example: 4-bit base, all-linear r 32, packed 4096, paged AdamW, bf16") {
  RunSettings base;
  base.model = "llama-3-8b";
  base.gpu = "4090";
  Result<ConfigImport> ax =
      load_axolotl_config(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/axolotl/llama-3-qlora.yml", base);
  REQUIRE_MESSAGE(ax.is_ok(), ax.message());
  const RunSettings& s = ax->settings;
  CHECK(s.stack == Stack::kHfTrainer);
  CHECK(s.mode == TrainMode::kQlora);
  CHECK(s.lora.rank == 32);
  CHECK(s.lora.dropout == doctest::Approx(0.05));
  CHECK(s.lora.targets == std::vector<std::string>{"all-linear"});  // lora_target_linear: every linear
  CHECK(s.seq_len == 4096);
  CHECK(s.micro_batch == 2);
  CHECK(s.grad_accum == 4);
  CHECK(s.optimizer == OptimizerKind::kAdamW);
  CHECK(s.paged_optimizer);
  CHECK(s.precision == Precision::kBf16Pure);  // bf16 auto: loaded and trained in bf16
  CHECK(s.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK(validate_settings(s, "ax").is_ok());
  const auto listed = [&](const std::string& key) {
    return std::find(ax->ignored.begin(), ax->ignored.end(), key) != ax->ignored.end();
  };
  CHECK(listed("datasets"));
  CHECK(listed("learning_rate"));
  CHECK(listed("special_tokens"));
  CHECK_FALSE(listed("micro_batch_size"));
  CHECK_FALSE(listed("wandb_project"));  // null: nothing said
}

TEST_CASE("an axolotl key the Trainer's reader refuses is named as axolotl spells it") {
  Result<ConfigImport> bad = import_axolotl_config("micro_batch_size: 0\nsequence_len: 512\n", "ax.yml", RunSettings{});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("ax.yml: micro_batch_size: expected a whole number") == 0);
  Result<ConfigImport> adapter = import_axolotl_config("adapter: ia3\n", "ax.yml", RunSettings{});
  REQUIRE_FALSE(adapter.is_ok());
  CHECK(adapter.message().find("ax.yml: adapter: expected lora, qlora or nothing") == 0);
}

TEST_CASE("axolotl's gptq: true trains LoRA over a GPTQ int4 base") {
  // axolotl's config reference: gptq: true, gptq_groupsize: 128, with adapter: lora.
  Result<ConfigImport> gptq = import_axolotl_config(
      "base_model: TheBloke/Llama-2-7B-GPTQ\nadapter: lora\ngptq: true\ngptq_groupsize: 64\nlora_r: 8\n"
      "micro_batch_size: 1\nsequence_len: 1024\nfp16: true\n",
      "ax.yml", RunSettings{});
  REQUIRE_MESSAGE(gptq.is_ok(), gptq.message());
  CHECK(gptq->settings.mode == TrainMode::kQlora);
  CHECK(gptq->settings.quant == QuantFormat::kGptq);
  CHECK(gptq->settings.gptq_group_size == 64);
  CHECK(std::find(gptq->ignored.begin(), gptq->ignored.end(), "gptq") == gptq->ignored.end());
  CHECK(import_axolotl_config("gptq: true\n", "ax.yml", RunSettings{}).message().find("ax.yml: gptq: expected adapter lora") ==
        0);
  CHECK(import_axolotl_config("adapter: lora\ngptq: true\ngptq_groupsize: 0\n", "ax.yml", RunSettings{})
            .message()
            .find("ax.yml: gptq_groupsize: expected a positive integer or -1") == 0);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("axolotl's Liger plugin keys: the fused linear cross-entropy priced, the module swaps noted, plain CE refused") {
  Result<ConfigImport> liger = import_axolotl_config(
      "liger_rope: true\nliger_rms_norm: true\nliger_glu_activation: true\nliger_fused_linear_cross_entropy: true\n",
      "ax.yml", RunSettings{});
  REQUIRE_MESSAGE(liger.is_ok(), liger.message());
  REQUIRE(liger->settings.loss.has_value());
  CHECK(liger->settings.loss->impl == LossImpl::kFusedLinearCe);
  CHECK(liger->settings.liger_kernels == std::optional<bool>(true));
  CHECK(liger->ignored.empty());
  CHECK(std::count_if(liger->notes.begin(), liger->notes.end(),
                      [](const std::string& note) { return note.find("liger_") == 0; }) == 4);
  Result<ConfigImport> off = import_axolotl_config("liger_fused_linear_cross_entropy: false\n", "ax.yml", RunSettings{});
  REQUIRE(off.is_ok());
  CHECK_FALSE(off->settings.loss.has_value());
  Result<ConfigImport> plain = import_axolotl_config("liger_cross_entropy: true\n", "ax.yml", RunSettings{});
  REQUIRE_FALSE(plain.is_ok());
  CHECK(plain.message().find("ax.yml: liger_cross_entropy: expected false") == 0);
  Result<ConfigImport> bad = import_axolotl_config("liger_rope: 3\n", "ax.yml", RunSettings{});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("ax.yml: liger_rope: expected true or false") == 0);
  Result<ConfigImport> half = import_axolotl_config("liger_rms_norm: true\n", "ax.yml", RunSettings{});
  REQUIRE_FALSE(half.is_ok());
  CHECK(half.message().find("ax.yml: liger_rms_norm: expected false, or true with liger_glu_activation true") == 0);
}

TEST_CASE("lora_target_linear: the listed modules join every linear one, and must be names (issue 37 item 7)") {
  const std::string base = "adapter: lora\nlora_target_linear: true\nsequence_len: 512\nmicro_batch_size: 0x2\n";
  const Result<ConfigImport> listed = import_axolotl_config(base + "lora_target_modules: [q_proj]\n", "ax.yml", RunSettings{});
  REQUIRE_MESSAGE(listed.is_ok(), listed.message());
  CHECK(listed->settings.lora.targets == std::vector<std::string>{"all-linear"});  // the union: every linear
  CHECK(listed->settings.micro_batch == 2);      // 0x2, as PyYAML reads it
  const Result<ConfigImport> number = import_axolotl_config(base + "lora_target_modules: 5\n", "ax.yml", RunSettings{});
  REQUIRE_FALSE(number.is_ok());
  CHECK(number.message() == "ax.yml: lora_target_modules: expected a module name or a list of them, got 5");
}

}  // namespace headroom::planner
