// transformers Trainer runs (planner/configs/hf_trainer_import.h): TrainingArguments as
// to_json_string() writes them and as a launch command line (with TRL's
// SFTConfig and ModelConfig keys), and PEFT's adapter_config.json.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/configs/axolotl_import.h"
#include "planner/configs/deepspeed_import.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/configs/peft_import.h"
#include "tests/planner/predict_as_given.h"
#include "planner/settings/settings_json.h"

namespace headroom::planner {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf_trainer/";

RunSettings base_run() {
  RunSettings base;
  base.model = "llama-3-8b";
  base.gpu = "4090";
  base.seq_len = 1024;
  return base;
}

bool listed(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string refusal(const std::string& text) {
  Result<ConfigImport> out = import_training_arguments(text, "args.json", base_run());
  REQUIRE_FALSE(out.is_ok());
  return out.message();
}

}  // namespace

TEST_CASE("TrainingArguments JSON: batch, accumulation, bf16 autocast, paged 8-bit AdamW, checkpointing") {
  Result<ConfigImport> tt = load_training_arguments(kData + "training_args_qlora.json", base_run());
  REQUIRE_MESSAGE(tt.is_ok(), tt.message());
  const RunSettings& s = tt->settings;
  CHECK(s.stack == Stack::kHfTrainer);
  CHECK(s.micro_batch == 4);
  CHECK(s.grad_accum == 4);
  CHECK(s.precision == Precision::kBf16Amp);  // autocast over an fp32 load, said in a note
  CHECK(s.optimizer == OptimizerKind::kAdamW8bit);
  CHECK(s.paged_optimizer);
  CHECK(s.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK(s.checkpoints_kept == 2);  // save_total_limit
  CHECK(s.zero_stage == 0);        // fsdp [] and deepspeed null
  CHECK(s.model == "llama-3-8b");  // from the base: the arguments do not name it
  CHECK(s.seq_len == 1024);
  CHECK(tt->sequence_unknown);  // no SFTConfig length: --seq must say
  for (const char* key : {"learning_rate", "output_dir", "seed", "logging_steps", "lr_scheduler_type"}) {
    CHECK_MESSAGE(listed(tt->ignored, key), key);
  }
  for (const char* key : {"per_device_train_batch_size", "optim", "bf16", "fsdp", "deepspeed", "torch_compile"}) {
    CHECK_MESSAGE(!listed(tt->ignored, key), key);
  }
  CHECK_FALSE(listed(tt->ignored, "tf32"));  // null values are not listed
}

TEST_CASE("a TRL launch command line: launcher words skipped, SFTConfig and ModelConfig keys read") {
  Result<ConfigImport> tt = load_training_arguments(kData + "sft_qlora.sh", base_run());
  REQUIRE_MESSAGE(tt.is_ok(), tt.message());
  const RunSettings& s = tt->settings;
  CHECK(s.micro_batch == 2);
  CHECK(s.grad_accum == 8);
  CHECK(s.seq_len == 2048);  // --max_length with --packing
  CHECK_FALSE(tt->sequence_unknown);
  CHECK(s.optimizer_impl == OptimizerImpl::kFused);
  CHECK(s.mode == TrainMode::kQlora);  // --use_peft --load_in_4bit
  CHECK(s.lora.rank == 32);
  CHECK(s.lora.targets == std::vector<std::string>{"q_proj", "v_proj"});  // PEFT's Llama default
  CHECK_FALSE(s.nf4_double_quant);                                         // use_bnb_nested_quant defaults false
  CHECK(s.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK(listed(tt->ignored, "dataset_name"));
  CHECK_FALSE(listed(tt->ignored, "nproc_per_node"));  // the launcher's, skipped
}

TEST_CASE("TrainingArguments predict as the equivalent flags do") {
  Result<ConfigImport> tt = load_training_arguments(kData + "training_args_qlora.json", base_run());
  REQUIRE(tt.is_ok());
  RunSettings flags = base_run();
  flags.stack = Stack::kHfTrainer;
  flags.micro_batch = 4;
  flags.grad_accum = 4;
  flags.precision = Precision::kBf16Amp;
  flags.optimizer = OptimizerKind::kAdamW8bit;
  flags.paged_optimizer = true;
  flags.optimizer_impl = OptimizerImpl::kFused;
  flags.checkpointing = CheckpointPolicy::kEveryBlock;
  CHECK(settings_to_json(tt->settings) == settings_to_json(flags));
  CHECK(predict_as_given(tt->settings).peak_allocated == predict_as_given(flags).peak_allocated);
}

TEST_CASE("the Trainer's bitsandbytes optim names import as the flags --optimizer and --paged-optimizer") {
  // bench/oracle/flags.py gives the oracle's bnb-optim rows these flags (trainer_optimizer.py
  // _get_bitsandbytes_optimizer: "8bit" in the name is optim_bits 8, "paged" is_paged).
  struct Row {
    const char* optim;
    OptimizerKind optimizer;
    bool paged;
  };
  for (const Row& row : {Row{"adamw_bnb_8bit", OptimizerKind::kAdamW8bit, false},
                         Row{"paged_adamw_8bit", OptimizerKind::kAdamW8bit, true},
                         Row{"paged_adamw_32bit", OptimizerKind::kAdamW, true}}) {
    CAPTURE(row.optim);
    Result<ConfigImport> imported =
        import_training_arguments(std::string(R"({"optim": ")") + row.optim + "\"}", "args.json", base_run());
    REQUIRE(imported.is_ok());
    CHECK(imported->settings.stack == Stack::kHfTrainer);
    CHECK(imported->settings.optimizer == row.optimizer);
    CHECK(imported->settings.paged_optimizer == row.paged);
  }
}

TEST_CASE("the Trainer's sgd imports with or without optim_args momentum") {
  // transformers 5.x trainer_optimizer.py _get_sgd: torch.optim.SGD, momentum only from optim_args.
  Result<ConfigImport> momentum =
      import_training_arguments(R"({"optim": "sgd", "optim_args": "momentum=0.9, nesterov=True"})", "args.json",
                                base_run());
  REQUIRE(momentum.is_ok());
  CHECK(momentum->settings.optimizer == OptimizerKind::kSgdMomentum);
  CHECK(momentum->settings.optimizer_impl == OptimizerImpl::kForeach);
  // Without momentum (the default, or momentum=0) torch.optim.SGD keeps no state.
  for (const char* args : {R"({"optim": "sgd"})", R"({"optim": "sgd", "optim_args": "momentum=0"})"}) {
    Result<ConfigImport> plain = import_training_arguments(args, "args.json", base_run());
    REQUIRE_MESSAGE(plain.is_ok(), plain.message());
    CHECK(plain->settings.optimizer == OptimizerKind::kSgd);
    CHECK(plain->settings.optimizer_impl == OptimizerImpl::kForeach);
  }
}

TEST_CASE("the Trainer's torchao optimizers import as torchao's, GaLore is refused by name") {
  // trainer_optimizer.py _get_torchao_optimizer: torchao.optim.AdamW8bit / AdamW4bit.
  Result<ConfigImport> eight = import_training_arguments(R"({"optim": "adamw_torch_8bit"})", "args.json", base_run());
  REQUIRE_MESSAGE(eight.is_ok(), eight.message());
  CHECK(eight->settings.optimizer == OptimizerKind::kAdamW8bitTorchao);
  Result<ConfigImport> four = import_training_arguments(R"({"optim": "adamw_torch_4bit"})", "args.json", base_run());
  REQUIRE_MESSAGE(four.is_ok(), four.message());
  CHECK(four->settings.optimizer == OptimizerKind::kAdamW4bit);
  for (const char* galore : {R"({"optim": "galore_adamw"})", R"({"optim": "galore_adamw_8bit_layerwise"})"}) {
    CHECK(refusal(galore).find("args.json: optim: expected an optimizer headroom models: GaLore") == 0);
  }
}

TEST_CASE("PEFT adapter_config.json: rank, targets, dropout onto the run, qlora stays qlora") {
  RunSettings base = base_run();
  base.mode = TrainMode::kQlora;
  Result<ConfigImport> peft = load_peft_config(kData + "adapter_config.json", base);
  REQUIRE_MESSAGE(peft.is_ok(), peft.message());
  const RunSettings& s = peft->settings;
  CHECK(s.mode == TrainMode::kQlora);
  CHECK(s.lora.rank == 64);
  CHECK(s.lora.dropout == doctest::Approx(0.05));
  CHECK(s.lora.targets ==
        std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  CHECK(listed(peft->ignored, "loftq_config"));
  CHECK(listed(peft->ignored, "megatron_core"));
  CHECK_FALSE(listed(peft->ignored, "lora_alpha"));
  CHECK_FALSE(listed(peft->ignored, "rank_pattern"));  // read: empty, so every module has rank r
  Result<ConfigImport> ranks =
      import_peft_config(R"({"r": 8, "rank_pattern": {"q_proj": 64}})", "a.json", base);
  REQUIRE_FALSE(ranks.is_ok());
  CHECK(ranks.message().find("a.json: rank_pattern: expected empty or null") == 0);

  // DoRA is priced (planner/mechanisms/dora.h): use_dora turns it on.
  Result<ConfigImport> dora = import_peft_config(R"({"peft_type": "LORA", "r": 8, "use_dora": true})", "a.json", base);
  REQUIRE_MESSAGE(dora.is_ok(), dora.message());
  CHECK(dora->settings.lora.dora);
  CHECK_FALSE(peft->settings.lora.dora);
  Result<ConfigImport> ia3 = import_peft_config(R"({"peft_type": "IA3"})", "a.json", base);
  REQUIRE_FALSE(ia3.is_ok());
  CHECK(ia3.message().find("a.json: peft_type: expected LORA") == 0);
  Result<ConfigImport> regex = import_peft_config(R"({"target_modules": ".*proj"})", "a.json", base);
  REQUIRE_FALSE(regex.is_ok());
  CHECK(regex.message().find("a.json: target_modules: expected a list of module names") == 0);
}

TEST_CASE("what TrainingArguments cannot say, or say wrongly, is refused by name") {
  CHECK(refusal(R"({"bf16": true, "fp16": true})").find("args.json: fp16: expected false with bf16 true") == 0);
  CHECK(refusal(R"({"optim": "lion_8bit"})").find("args.json: optim: expected one of adamw_torch") == 0);
  CHECK(refusal(R"({"per_device_train_batch_size": 0})").find("args.json: per_device_train_batch_size: expected") == 0);
  CHECK(refusal(R"({"use_cpu": true})").find("args.json: use_cpu: expected false") == 0);
  CHECK(refusal(R"({"fsdp": "full_shard banana"})").find("args.json: fsdp: expected options among") == 0);
  CHECK(refusal("--per_device_train_batch_size 2 --per_device_train_batch_size 4").find("given twice") !=
        std::string::npos);
  CHECK(refusal("--bf16 maybe").find("args.json: bf16: expected true or false") == 0);
  CHECK(refusal("[1, 2]").find("args.json: ") == 0);
  CHECK(refusal(std::string("--optim \xff", 9)).find("args.json: byte 8: expected UTF-8 text") == 0);
  CHECK(refusal(R"({"use_liger_kernel": true, "liger_kernel_config": [1]})").find("args.json: liger_kernel_config: expected an object") == 0);
  CHECK(refusal(R"({"use_liger_kernel": true, "liger_kernel_config": {"fused_linear_cross_entropy": "yes"}})")
            .find("args.json: liger_kernel_config: expected fused_linear_cross_entropy true or false") == 0);
  CHECK(refusal("--use_peft --lora_dropout nan").find("args.json: lora_dropout: expected a probability") == 0);
  CHECK(refusal("--dtype float16").find("args.json: dtype: expected bfloat16, float32 or auto") == 0);
  // A model loaded in bf16 trains in bf16, with or without the Trainer's autocast.
  Result<ConfigImport> bf16 = import_training_arguments("--dtype bfloat16", "a", base_run());
  REQUIRE(bf16.is_ok());
  CHECK(bf16->settings.precision == Precision::kBf16Pure);
  // The script is the first .py word: a .py value after it is an argument.
  Result<ConfigImport> py = import_training_arguments(
      "# launch\npython train.py --per_device_train_batch_size 2 --dataset_name ./loader.py", "a", base_run());
  REQUIRE_MESSAGE(py.is_ok(), py.message());
  CHECK(py->settings.micro_batch == 2);
  // A compile mode turns torch_compile on.
  Result<ConfigImport> mode = import_training_arguments("--torch_compile_mode max-autotune", "a", base_run());
  REQUIRE(mode.is_ok());
  CHECK(mode->settings.compile);
  // FSDP and DeepSpeed (an inline object, "auto" filled from the arguments) read as the Trainer passes them.
  Result<ConfigImport> fsdp = import_training_arguments(R"({"fsdp": "full_shard auto_wrap offload"})", "a", base_run());
  REQUIRE_MESSAGE(fsdp.is_ok(), fsdp.message());
  CHECK(fsdp->settings.zero_stage == 3);
  CHECK(fsdp->settings.offload_param == Offload::kCpu);
  // transformers 5 runs FSDP2 unless fsdp_config says version 1 (training_args.py).
  REQUIRE(fsdp->settings.sharding.has_value());
  CHECK(*fsdp->settings.sharding == Sharding::kFsdp2);
  Result<ConfigImport> v1 =
      import_training_arguments(R"({"fsdp": "full_shard", "fsdp_config": {"version": 1}})", "a", base_run());
  REQUIRE_MESSAGE(v1.is_ok(), v1.message());
  CHECK(*v1->settings.sharding == Sharding::kFsdp1);
  CHECK_FALSE(listed(v1->ignored, "fsdp_config.version"));
  // HYBRID_SHARD is FSDP1's; asking for it under version 2 is what transformers refuses.
  Result<ConfigImport> hybrid = import_training_arguments(R"({"fsdp": "hybrid_shard"})", "a", base_run());
  REQUIRE_MESSAGE(hybrid.is_ok(), hybrid.message());
  CHECK(*hybrid->settings.sharding == Sharding::kFsdp1);
  CHECK(refusal(R"({"fsdp": "hybrid_shard", "fsdp_config": {"version": 2}})").find("args.json: fsdp_config.version: expected 1") == 0);
  CHECK(refusal(R"({"fsdp": "full_shard", "fsdp_config": {"version": 7}})").find("args.json: fsdp_config.version: expected 1 or 2") == 0);
  Result<ConfigImport> ds = import_training_arguments(
      R"({"per_device_train_batch_size": 2, "deepspeed": {"zero_optimization": {"stage": 2},
          "train_micro_batch_size_per_gpu": "auto"}})",
      "a", base_run());
  REQUIRE_MESSAGE(ds.is_ok(), ds.message());
  CHECK(ds->settings.zero_stage == 2);
  CHECK(ds->settings.micro_batch == 2);
  CHECK(ds->settings.stack == Stack::kHfTrainer);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("use_liger_kernel prices Liger's fused linear cross-entropy unless liger_kernel_config turns it off") {
  Result<ConfigImport> liger = import_training_arguments(R"({"use_liger_kernel": true})", "args.json", base_run());
  REQUIRE_MESSAGE(liger.is_ok(), liger.message());
  REQUIRE(liger->settings.loss.has_value());
  CHECK(liger->settings.loss->impl == LossImpl::kFusedLinearCe);
  CHECK(liger->settings.liger_kernels == std::optional<bool>(true));
  CHECK(std::any_of(liger->notes.begin(), liger->notes.end(),
                    [](const std::string& note) { return note.find("use_liger_kernel") == 0; }));
  Result<ConfigImport> off = import_training_arguments(
      R"({"use_liger_kernel": true, "liger_kernel_config": {"fused_linear_cross_entropy": false, "rms_norm": true}})",
      "args.json", base_run());
  REQUIRE_MESSAGE(off.is_ok(), off.message());
  CHECK_FALSE(off->settings.loss.has_value());
  CHECK(off->settings.liger_kernels == std::optional<bool>(true));
  CHECK_FALSE(listed(off->ignored, "liger_kernel_config"));
  Result<ConfigImport> loss_only = import_training_arguments(
      R"({"use_liger_kernel": true, "liger_kernel_config": {"rope": false, "rms_norm": false, "swiglu": false}})",
      "args.json", base_run());
  REQUIRE_MESSAGE(loss_only.is_ok(), loss_only.message());
  CHECK(loss_only->settings.loss.has_value());
  CHECK_FALSE(loss_only->settings.liger_kernels.has_value());
  CHECK(refusal(R"({"use_liger_kernel": true, "liger_kernel_config": {"rms_norm": false, "swiglu": true}})")
            .find("args.json: liger_kernel_config: expected rms_norm and swiglu (geglu) both true or both false") ==
        0);
  Result<ConfigImport> none = import_training_arguments(R"({"use_liger_kernel": false})", "args.json", base_run());
  REQUIRE(none.is_ok());
  CHECK_FALSE(none->settings.loss.has_value());
}

TEST_CASE("a script's own arguments that choose the method are refused unless the flags say it (issue 36)") {
  // The PEFT repository's run_peft_qlora_fsdp.sh passes these to its train.py, not to TrainingArguments.
  const std::string script =
      "--per_device_train_batch_size 2 --use_peft_lora True --lora_r 8 --use_4bit_quantization True "
      "--use_nested_quant True --bnb_4bit_compute_dtype bfloat16";
  const std::string message = refusal(script);
  CHECK(message.find("args.json: ") == 0);
  CHECK(message.find(": the script's own argument, which chooses LoRA, QLoRA or a quantized base, is not read") !=
        std::string::npos);
  CHECK(message.find("--qlora") != std::string::npos);
  // With --qlora given, the same arguments are what the flags already price.
  RunSettings qlora = base_run();
  qlora.mode = TrainMode::kQlora;
  Result<ConfigImport> priced = import_training_arguments(script, "args.json", qlora);
  REQUIRE_MESSAGE(priced.is_ok(), priced.message());
  CHECK(priced->settings.mode == TrainMode::kQlora);
  // --lora prices adapters, not a 4-bit base: still refused.
  RunSettings lora = base_run();
  lora.mode = TrainMode::kLora;
  CHECK_FALSE(import_training_arguments(script, "args.json", lora).is_ok());
  // Turned off, they choose nothing.
  CHECK(import_training_arguments("--use_4bit_quantization False --use_peft_lora false", "args.json", base_run())
            .is_ok());
}

TEST_CASE("an empty command line, an unclosed quote and a None batch are refused (issue 37 item 7)") {
  CHECK(refusal("").find("args.json: no arguments") == 0);
  CHECK(refusal("  # only a comment\n").find("args.json: no arguments") == 0);
  CHECK(refusal("torchrun --nproc_per_node 2 train.py").find("args.json: no arguments") == 0);
  CHECK(refusal("--output_dir 'abc").find("args.json: a quote is not closed") == 0);
  CHECK(refusal("--per_device_train_batch_size None").find("per_device_train_batch_size") != std::string::npos);
  CHECK(refusal("--gradient_accumulation_steps=").find("gradient_accumulation_steps") != std::string::npos);
}

TEST_CASE("--hf-args: JSON after a byte-order mark is JSON, an array is refused as one (issue 37 item 8)") {
  Result<ConfigImport> bom =
      import_training_arguments("\xEF\xBB\xBF{\"per_device_train_batch_size\": 2}", "args.json", base_run());
  REQUIRE_MESSAGE(bom.is_ok(), bom.message());
  CHECK(bom->settings.micro_batch == 2);
  CHECK(refusal("[1, 2]") == "args.json: a JSON array (expected TrainingArguments as a JSON object, or a command line)");
}

TEST_CASE("--deepspeed takes an inline object as the Trainer's deepspeed argument does") {
  Result<RunSettings> inline_config =
      load_deepspeed_config("{\"zero_optimization\": {\"stage\": 2}}", base_run());
  REQUIRE_MESSAGE(inline_config.is_ok(), inline_config.message());
  CHECK(inline_config->zero_stage == 2);
  const Result<RunSettings> broken = load_deepspeed_config("{\"zero_optimization\": ", base_run());
  REQUIRE_FALSE(broken.is_ok());
  CHECK(broken.message().find("--deepspeed (inline)") == 0);
}

TEST_CASE("a DeepSpeed file reached through --hf-args or axolotl: its error names the config and key (issue 37 item 8)") {
  // DeepSpeed's own check: train_batch_size 16 is not 8 x 1 x 1 GPU.
  const std::string ds = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/deepspeed/zero2_seed.json";
  const Result<ConfigImport> args =
      import_training_arguments("--per_device_train_batch_size 8 --deepspeed " + ds, "args.txt", base_run());
  REQUIRE_FALSE(args.is_ok());
  CHECK_MESSAGE(args.message().find("args.txt: deepspeed: " + ds + ": train_batch_size") == 0, args.message());
  const Result<ConfigImport> axolotl =
      import_axolotl_config("micro_batch_size: 8\nsequence_len: 512\ndeepspeed: " + ds + "\n", "ax.yml", base_run());
  REQUIRE_FALSE(axolotl.is_ok());
  CHECK_MESSAGE(axolotl.message().find("ax.yml: deepspeed: " + ds + ": train_batch_size") == 0, axolotl.message());
}

TEST_CASE("the DeepSpeed file the deepspeed argument names is reported as read, an inline one is not (issue 37 item 1)") {
  const std::string ds = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/deepspeed/zero2_offload_auto.json";
  const Result<ConfigImport> file = import_training_arguments("--deepspeed " + ds, "args.txt", base_run());
  REQUIRE_MESSAGE(file.is_ok(), file.message());
  REQUIRE(file->files_read.size() == 1);
  CHECK(file->files_read[0].key == "deepspeed");
  CHECK(file->files_read[0].path == ds);
  const Result<ConfigImport> inline_config =
      import_training_arguments(R"({"deepspeed": {"zero_optimization": {"stage": 2}}})", "args.json", base_run());
  REQUIRE_MESSAGE(inline_config.is_ok(), inline_config.message());
  CHECK(inline_config->files_read.empty());
}

}  // namespace headroom::planner
