#include "planner/configs/trl_model_args.h"

#include <string>

#include "planner/configs/training_args_text.h"
#include "planner/settings/lora_targets.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// ModelConfig's load: the dtype the model is loaded in and its attention.
void read_trl_load(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  const char* dtype_key = r.has("dtype") ? "dtype" : "torch_dtype";
  if (r.has(dtype_key)) {
    // The dtype the model is loaded in: bf16 weights train in bf16 (under the
    // Trainer's autocast when --bf16, which only changes fp32 adapters' copies).
    const std::string dtype = r.string_or(dtype_key, "auto");
    if (dtype == "bfloat16" || dtype == "auto") {
      s.precision = Precision::kBf16Pure;
      if (dtype == "auto") {
        out.notes.push_back(std::string(dtype_key) + " auto: the checkpoint's dtype, taken as bfloat16 (what current "
                            "checkpoints publish); give --precision for an fp32 or fp16 checkpoint");
      }
    } else if (dtype == "float32") {
      // as the Trainer's flags say
    } else {
      r.fail(dtype_key, "bfloat16, float32 or auto (a float16 load is not modelled)", json(dtype));
    }
  }
  if (r.has("attn_implementation")) {
    const std::string impl = r.string_or("attn_implementation", "sdpa");
    if (impl == "eager") {
      s.attention = models::AttentionImpl::kEager;
    } else if (impl == "sdpa" || impl == "flash_attention_2" || impl == "flash_attention_3") {
      s.attention = models::AttentionImpl::kSdpa;  // FlashAttention's kernel keeps what SDPA's flash backend keeps
    } else {
      r.fail("attn_implementation", "eager, sdpa, flash_attention_2 or flash_attention_3", json(impl));
    }
  }
}

// lora_target_modules: names, a JSON list or all-linear; absent is PEFT's default.
void read_trl_lora_targets(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (r.has("lora_target_modules")) {
    const json& t = r.raw("lora_target_modules");
    s.lora.targets.clear();
    if (t == json("all-linear")) {
      s.lora.targets = {std::string(kAllLinear)};  // PEFT's shorthand (planner/mechanisms/all_linear.h)
    } else if (t.is_string() && !shell_words(t.get<std::string>()).empty()) {
      s.lora.targets = shell_words(t.get<std::string>());
    } else if (t.is_array() && !t.empty() &&
               std::all_of(t.begin(), t.end(), [](const json& m) { return m.is_string(); })) {
      for (const json& m : t) s.lora.targets.push_back(m.get<std::string>());
    } else {
      r.fail("lora_target_modules", "module names or all-linear", t);
    }
  } else {
    // PEFT's default targets for Llama-family models
    // (utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
    s.lora.targets = {"q_proj", "v_proj"};
    out.notes.push_back("use_peft without lora_target_modules: PEFT's default for Llama-family models, q_proj "
                        "and v_proj");
  }
}

// use_peft: LoRA (QLoRA over a 4-bit load) with ModelConfig's lora_* arguments.
void read_trl_lora(ArgsReader& r, RunSettings& s, ConfigImport& out, bool four_bit) {
  s.mode = four_bit ? TrainMode::kQlora : TrainMode::kLora;
  s.lora.rank = r.count_or("lora_r", 16, kMaxLoraRank);  // ModelConfig's defaults: r 16, dropout 0.05
  s.lora.dropout = 0.05;
  if (r.has("lora_dropout")) {
    const std::optional<double> p = probability(r.raw("lora_dropout"));
    if (p) {
      s.lora.dropout = *p;
    } else {
      r.fail("lora_dropout", "a probability in [0, 1)", r.raw("lora_dropout"));
    }
  }
  r.has("lora_alpha");
  read_trl_lora_targets(r, s, out);
  if (r.has("lora_modules_to_save")) {
    for (const std::string& m : shell_words(r.string_or("lora_modules_to_save", ""))) {
      s.train_patterns.push_back("*" + m + "*");
    }
  }
  s.lora.dora = r.boolean_or("use_dora", false);  // ModelConfig.use_dora, handed to LoraConfig
  s.nf4_double_quant = r.boolean_or("use_bnb_nested_quant", false);  // ModelConfig's default: no double quant
  r.has("bnb_4bit_quant_type");
}

}  // namespace

// TRL's ModelConfig, parsed from the same command line (trl/trainer/model_config.py):
// the model's load dtype and attention, LoRA through PEFT, bitsandbytes loading.
void read_trl_model_args(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  r.has("model_name_or_path");  // names the model: MODEL gives it to headroom
  read_trl_load(r, s, out);
  const bool four_bit = r.boolean_or("load_in_4bit", false);
  if (r.boolean_or("load_in_8bit", false)) r.fail("load_in_8bit", "false (LLM.int8 weights are not modelled)");
  if (r.boolean_or("use_peft", false)) {
    read_trl_lora(r, s, out, four_bit);
  } else if (four_bit) {
    r.fail("load_in_4bit", "with use_peft (a 4-bit base trains only adapters)");
  } else {
    // ModelConfig's LoRA fields do nothing without use_peft (trl/trainer/utils.py
    // get_peft_config returns None): read, so that they choose no method.
    for (const char* idle : {"lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save",
                             "lora_task_type", "use_rslora", "use_dora", "use_bnb_nested_quant",
                             "bnb_4bit_quant_type"}) {
      r.has(idle);
    }
  }
}

}  // namespace headroom::planner
