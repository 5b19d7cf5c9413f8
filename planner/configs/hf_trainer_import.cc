#include "planner/configs/hf_trainer_import.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "graph/utf8.h"
#include "planner/configs/deepspeed_import.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// Splits a shell-style command line: whitespace outside quotes separates words,
// a backslash before a newline continues the line. `unclosed` (optional) is set
// when a quote is still open at the end, which a shell refuses.
std::vector<std::string> shell_words(std::string_view text, bool* unclosed = nullptr) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      ++i;
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else if (c == '#' && !in_word) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;  // a comment, to the end of the line
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  if (unclosed != nullptr) *unclosed = quote != 0;
  return words;
}

// HfArgumentParser's command line as a JSON object of strings: `--key value`,
// `--key=value`, a bare `--flag` (true), several words after one key joined by
// spaces (`--fsdp full_shard auto_wrap`). Words up to the script (the first
// word ending in .py, e.g. `torchrun --nproc_per_node 8 train.py`) are the
// launcher's and are skipped.
Result<json> arguments_object(std::string_view text, std::string_view origin) {
  bool unclosed = false;
  std::vector<std::string> words = shell_words(text, &unclosed);
  if (unclosed) {
    return Status::invalid_input(std::string(origin) + ": a quote is not closed (expected a command line a shell "
                                                       "reads: every ' and \" closed)");
  }
  const auto script = std::find_if(words.begin(), words.end(), [](const std::string& w) { return w.ends_with(".py"); });
  if (script != words.end()) words.erase(words.begin(), script + 1);
  if (words.empty()) {
    return Status::invalid_input(std::string(origin) +
                                 ": no arguments (expected TrainingArguments as JSON or a command line of --KEY VALUE "
                                 "arguments)");
  }
  json out = json::object();
  std::string key;
  for (const std::string& word : words) {
    if (word.starts_with("--")) {
      const size_t equals = word.find('=');
      key = word.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
      if (key.empty())
        return Status::invalid_input(std::string(origin) + ": \"" + word + "\": expected --KEY");
      if (out.contains(key))
        return Status::invalid_input(std::string(origin) + ": --" + key +
                                     ": given twice (expected once)");
      out[key] = equals == std::string::npos ? json(true) : json(word.substr(equals + 1));
      if (equals != std::string::npos) key.clear();
    } else if (!key.empty()) {
      json& value = out[key];
      value = value.is_string() ? json(value.get<std::string>() + " " + word) : json(word);
    } else {
      return Status::invalid_input(std::string(origin) + ": \"" + word +
                                   "\": expected --KEY VALUE arguments");
    }
  }
  return out;
}

// A boolean argument: true/false, or the strings true/false, yes/no, 1/0 in any
// case; nullopt for anything else.
std::optional<bool> boolean_of(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (!v.is_string()) return std::nullopt;
  std::string s = v.get<std::string>();
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "true" || s == "1" || s == "yes") return true;
  if (s == "false" || s == "0" || s == "no") return false;
  return std::nullopt;
}

// Reads a JSON object whose values may be native (to_json_string) or strings
// (the command line); keeps the first error and every key it read.
class ArgsReader {
 public:
  ArgsReader(const json& args, std::string_view origin) : args_(args), origin_(origin) {}

  bool has(const std::string& key) {
    read_.insert(key);
    return args_.contains(key) && !args_.at(key).is_null() &&
           !(args_.at(key).is_string() && (args_.at(key) == "None" || args_.at(key) == ""));
  }
  const json& raw(const std::string& key) { return args_.at(key); }
  bool boolean_or(const std::string& key, bool fallback) {
    if (!has(key)) return fallback;
    const json& v = args_.at(key);
    if (const std::optional<bool> value = boolean_of(v)) return *value;
    fail(key, "true or false", v);
    return fallback;
  }
  int64_t count_or(const std::string& key, int64_t fallback, int64_t max) {
    // "None" or an empty value is no number: TrainingArguments would refuse it,
    // not fall back to its default (`--per_device_train_batch_size None`).
    if (args_.contains(key) && args_.at(key).is_string() && (args_.at(key) == "None" || args_.at(key) == "")) {
      read_.insert(key);
      fail(key, "a whole number from 1 to " + std::to_string(max), args_.at(key));
      return fallback;
    }
    if (!has(key)) return fallback;
    const json& v = args_.at(key);
    int64_t value = 0;
    bool ok = false;
    if (v.is_number_integer()) {
      value = v.get<int64_t>();
      ok = true;
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
      ok = error == std::errc{} && end == s.data() + s.size();
    }
    if (!ok || value < 1 || value > max) {
      fail(key, "a whole number from 1 to " + std::to_string(max), v);
      return fallback;
    }
    return value;
  }
  std::string string_or(const std::string& key, const std::string& fallback) {
    if (!has(key)) return fallback;
    const json& v = args_.at(key);
    if (v.is_string()) return v.get<std::string>();
    fail(key, "a string", v);
    return fallback;
  }
  void fail(const std::string& key, const std::string& expected, const json& got = json()) {
    if (!status_.is_ok()) return;
    status_ = config_field_error(origin_, key, expected, got);
  }
  void fail(Status status) {
    if (status_.is_ok()) status_ = std::move(status);
  }
  const Status& status() const { return status_; }
  // Keys given a value that was not read, in the file's order.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (const auto& [key, value] : args_.items()) {
      if (!read_.count(key) && !value.is_null()) out.push_back(key);
    }
    return out;
  }

 private:
  const json& args_;
  std::string_view origin_;
  std::set<std::string> read_;
  Status status_ = Status::ok();
};

// A probability in [0, 1) written as a JSON number or a string ("0.05"); NaN
// and trailing characters are refused.
std::optional<double> probability(const json& v) {
  double value = -1;
  if (v.is_number()) {
    value = v.get<double>();
  } else if (v.is_string()) {
    const std::string text = v.get<std::string>();
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  }
  if (!(value >= 0 && value < 1)) return std::nullopt;
  return value;
}

// TrainingArguments.optim (transformers training_args.py OptimizerNames) onto
// the optimizer, its implementation and paging (trainer_optimizer.py builds each).
void read_optim(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (!r.has("optim")) {
    out.notes.push_back("optim not given: transformers' default (adamw_torch_fused in 5.x with torch >= 2.8, "
                        "adamw_torch before) is left open in the band; --optimizer-impl pins it");
    return;
  }
  const std::string optim = r.string_or("optim", "");
  s.optimizer = OptimizerKind::kAdamW;
  s.paged_optimizer = false;
  if (optim == "adamw_torch") {
    s.optimizer_impl = OptimizerImpl::kForeach;
  } else if (optim == "adamw_torch_fused") {
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "adamw_hf") {
    s.optimizer_impl = OptimizerImpl::kForLoop;  // transformers' own AdamW: a Python loop per parameter
  } else if (optim == "adamw_bnb_8bit" || optim == "adamw_8bit" || optim == "paged_adamw_8bit") {
    s.optimizer = OptimizerKind::kAdamW8bit;
    s.paged_optimizer = optim == "paged_adamw_8bit";
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "paged_adamw_32bit") {
    s.paged_optimizer = true;
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "adamw_torch_8bit") {
    s.optimizer = OptimizerKind::kAdamW8bit;
    s.optimizer_impl = OptimizerImpl::kFused;
    out.notes.push_back("optim adamw_torch_8bit: torchao's AdamW8bit priced as bitsandbytes' 8-bit AdamW");
  } else if (optim == "adamw_torch_4bit") {
    s.optimizer = OptimizerKind::kAdamW4bit;
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "adafactor") {
    s.optimizer = OptimizerKind::kAdafactor;
    s.optimizer_impl = OptimizerImpl::kForLoop;
  } else {
    r.fail("optim",
           "one of adamw_torch, adamw_torch_fused, adamw_hf, adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit, "
           "paged_adamw_32bit, adamw_torch_8bit, adamw_torch_4bit, adafactor (the others' states are not modelled)",
           json(optim));
  }
}

// fsdp_config (a JSON object or a path in the arguments): its activation
// checkpointing and parameter offload change memory; the wrap policy, prefetch
// and sync flags do not have a model of their own and are listed. Returns the FSDP
// its version names, nullopt when it names none.
std::optional<Sharding> read_fsdp_config(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (!r.has("fsdp_config")) return std::nullopt;
  const json& config = r.raw("fsdp_config");
  if (!config.is_object()) {
    out.notes.push_back("fsdp_config is a file path: not read; give --checkpointing and --offload-param as it says");
    return std::nullopt;
  }
  std::optional<Sharding> version;
  for (const auto& [key, value] : config.items()) {
    const std::string bare = key.starts_with("fsdp_") ? key.substr(5) : key;
    const bool on = value == json(true) || value == json("true") || value == json("True");
    if (bare == "version") {
      if (value != json(1) && value != json(2) && value != json("1") && value != json("2")) {
        r.fail("fsdp_config.version", "1 or 2", value);
        return std::nullopt;
      }
      version = value == json(1) || value == json("1") ? Sharding::kFsdp1 : Sharding::kFsdp2;
    } else if (bare == "activation_checkpointing") {
      if (on) s.checkpointing = CheckpointPolicy::kEveryBlock;
    } else if (bare == "offload_params") {
      if (on) {
        s.offload_param = Offload::kCpu;
        s.offload_optimizer = Offload::kCpu;
      }
    } else if (!value.is_null() && value != json(false)) {
      out.ignored.push_back("fsdp_config." + key);
    }
  }
  return version;
}

// use_liger_kernel: the Trainer patches the model with Liger
// (_apply_liger_kernel_to_instance, given liger_kernel_config as its keyword arguments;
// apply_liger_kernel_to_llama and its siblings default to rope, rms_norm, swiglu and
// fused_linear_cross_entropy). The fused linear cross-entropy is priced
// (--loss fused-linear-ce); Liger's RMSNorm, SwiGLU and RoPE are priced as the model's
// own modules, which keep at least as much for backward (LigerSiLUMulFunction keeps
// the gate and up projections, where silu(gate) * up also keeps silu's output).
void read_liger(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  bool fused_linear_ce = true;
  if (r.has("liger_kernel_config") && !r.raw("liger_kernel_config").is_null()) {
    const json& config = r.raw("liger_kernel_config");
    if (!config.is_object()) {
      r.fail("liger_kernel_config", "an object of Liger kernel switches", config);
      return;
    }
    if (config.contains("fused_linear_cross_entropy")) {
      const json& value = config.at("fused_linear_cross_entropy");
      if (!value.is_boolean()) {
        r.fail("liger_kernel_config", "fused_linear_cross_entropy true or false", value);
        return;
      }
      fused_linear_ce = value.get<bool>();
    }
  }
  if (fused_linear_ce) s.loss = LossSpec{LossImpl::kFusedLinearCe, 8};
  out.notes.push_back(std::string("use_liger_kernel: ") +
                      (fused_linear_ce ? "Liger's fused linear cross-entropy priced (--loss fused-linear-ce); " : "") +
                      "its RMSNorm, SwiGLU and RoPE kernels are priced as the model's own modules, which keep at "
                      "least as much for backward");
}

// TrainingArguments.fsdp: "full_shard auto_wrap offload" (a string or a list of
// FSDPOption). Full sharding is FSDP2 unless fsdp_config says version 1:
// transformers 5 builds Accelerate's plugin with fsdp_version =
// fsdp_config.get("version", 2) (training_args.py, 5.23); transformers 4 left it to
// Accelerate, whose default is FSDP1.
void read_fsdp(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (!r.has("fsdp")) return;
  std::vector<std::string> options;
  const json& v = r.raw("fsdp");
  if (v.is_string()) {
    options = shell_words(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& item : v) {
      if (!item.is_string()) return r.fail("fsdp", "FSDP options (full_shard, shard_grad_op, hybrid_shard, offload, auto_wrap)", v);
      options.push_back(item.get<std::string>());
    }
  } else {
    return r.fail("fsdp", "FSDP options (full_shard, shard_grad_op, hybrid_shard, offload, auto_wrap)", v);
  }
  if (options.empty()) return;
  for (const std::string& option : options) {
    if (option == "full_shard") {
      s.zero_stage = 3;
    } else if (option == "shard_grad_op") {
      s.zero_stage = 2;
    } else if (option == "hybrid_shard") {
      s.zero_stage = 3;
      out.shard_within_node = true;  // shard inside a node, replicate across nodes: once --gpus is known
    } else if (option == "no_shard") {
      s.zero_stage = 0;
    } else if (option == "offload") {
      s.offload_param = Offload::kCpu;
      s.offload_optimizer = Offload::kCpu;
    } else if (option == "auto_wrap") {
      // transformers sets the wrap policy (TRANSFORMER_BASED_WRAP from the model's
      // _no_split_modules): a unit a layer, whatever an Accelerate file said.
      s.fsdp_wrap = FsdpWrap::kLayers;
    } else {
      return r.fail("fsdp", "options among full_shard, shard_grad_op, hybrid_shard, no_shard, offload, auto_wrap", v);
    }
  }
  if (s.offload_param == Offload::kCpu && s.zero_stage != 3) {
    return r.fail("fsdp", "offload with full_shard or hybrid_shard", v);
  }
  const std::optional<Sharding> version = read_fsdp_config(r, s, out);
  // HYBRID_SHARD is FSDP1's (transformers 5 refuses it under version 2).
  if (out.shard_within_node && version == Sharding::kFsdp2) {
    return r.fail("fsdp_config.version", "1 with hybrid_shard (FSDP2 has no HYBRID_SHARD strategy in transformers)", 2);
  }
  s.sharding = version ? *version : out.shard_within_node ? Sharding::kFsdp1 : Sharding::kFsdp2;
  if (!version && !out.shard_within_node) {
    out.notes.push_back("fsdp: FSDP2, transformers 5's default; transformers 4 ran FSDP1 (add fsdp_config version 1)");
  }
  if (s.zero_stage != 3) out.notes.push_back("fsdp: priced as DeepSpeed's ZeRO stage " + std::to_string(s.zero_stage));
}

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
      // the model's own list: every linear of its blocks
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
  if (r.boolean_or("use_dora", false)) r.fail("use_dora", "false (DoRA is not modelled)");
  s.nf4_double_quant = r.boolean_or("use_bnb_nested_quant", false);  // ModelConfig's default: no double quant
  r.has("bnb_4bit_quant_type");
}

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

// The device, the batch and the Trainer's precision flags. Returns whether bf16 was given.
bool read_batch_and_precision(ArgsReader& r, RunSettings& s) {
  if (r.boolean_or("use_cpu", false) || r.boolean_or("no_cuda", false)) {
    r.fail(r.has("use_cpu") ? "use_cpu" : "no_cuda", "false (headroom answers for a GPU run)");
  }
  s.micro_batch = r.count_or("per_device_train_batch_size", 8, kMaxMicroBatch);  // TrainingArguments' default 8
  s.grad_accum = r.count_or("gradient_accumulation_steps", 1, kMaxGradAccum);
  const bool bf16 = r.boolean_or("bf16", false);
  const bool fp16 = r.boolean_or("fp16", false);
  if (bf16 && fp16) r.fail("fp16", "false with bf16 true (transformers refuses both)");
  // Trainer(bf16=True) runs the forward under torch.autocast (Accelerate's
  // prepare_model). Over an fp32 model (from_pretrained's default dtype in 4.x)
  // that is AMP; a script that loads the model in bf16 wants --precision bf16.
  if (bf16 || fp16) {
    s.precision = bf16 ? Precision::kBf16Amp : Precision::kFp16Amp;
  } else {
    s.precision = Precision::kFp32;
  }
  return bf16;
}

// Gradient checkpointing and torch.compile.
void read_checkpointing_and_compile(ArgsReader& r, RunSettings& s) {
  const bool checkpointing =
      r.boolean_or("gradient_checkpointing", false) || r.boolean_or("activation_checkpointing", false);
  // An Accelerate FSDP config read before (fsdp_activation_checkpointing) keeps
  // its checkpointing; the Trainer refuses gradient_checkpointing beside it
  // (transformers trainer.py, create_accelerator_and_postprocess).
  const bool fsdp_checkpointing =
      s.sharding && *s.sharding != Sharding::kDeepspeed && s.checkpointing != CheckpointPolicy::kNone;
  if (fsdp_checkpointing && r.boolean_or("gradient_checkpointing", false)) {
    r.fail("gradient_checkpointing", "false beside the Accelerate config's fsdp_activation_checkpointing (the Trainer "
           "refuses both)");
  }
  if (!fsdp_checkpointing) s.checkpointing = checkpointing ? CheckpointPolicy::kEveryBlock : CheckpointPolicy::kNone;
  r.has("gradient_checkpointing_kwargs");  // use_reentrant: the same tensors either way
  // Setting the compile mode or backend turns torch_compile on (TrainingArguments.__post_init__).
  s.compile = r.boolean_or("torch_compile", false) || r.has("torch_compile_mode") || r.has("torch_compile_backend");
  if (s.compile) {
    // Trainer compiles the whole model, whose forward computes the loss
    // (transformers' causal-LM heads call self.loss_function).
    s.compile_loss = true;
  }
}

// Checkpoints kept and saved, batch grouping, and TRL's SFTConfig (a
// TrainingArguments subclass): the sequence cap and packing.
void read_saving_and_sequence(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (r.has("save_total_limit")) s.checkpoints_kept = static_cast<int>(r.count_or("save_total_limit", 2, 1000));
  if (r.boolean_or("save_only_model", false)) s.save_optimizer_state = false;
  // group_by_length: the LengthGroupedSampler orders the padded batches (run_settings.h).
  s.group_by_length = r.boolean_or("group_by_length", false);
  const char* length_key = r.has("max_length") ? "max_length" : "max_seq_length";
  if (r.has(length_key)) {
    s.seq_len = r.count_or(length_key, 1024, kMaxSeqLen);
    if (!r.boolean_or("packing", false) && !r.boolean_or("padding_free", false)) {
      // The dataset's lengths are not in the arguments: from one token to the cap.
      s.shortest_sample = 1;
      out.notes.push_back(std::string(length_key) +
                          ": samples are padded to the longest of each batch; priced at the cap, the most a batch "
                          "holds" + padded_batches_band("1 token"));
    }
  } else {
    r.has("packing");
    r.has("padding_free");
    out.sequence_unknown = true;  // TrainingArguments has no sequence length
  }
}

// deepspeed: a path or an inline config, read over what the arguments said.
void read_deepspeed_argument(ArgsReader& r, RunSettings& s, std::string_view origin) {
  if (!r.has("deepspeed")) return;
  const json& ds = r.raw("deepspeed");
  Result<RunSettings> with_ds = ds.is_string()
                                    ? load_deepspeed_config(ds.get<std::string>(), s)
                                    : apply_deepspeed_config(ds, s, std::string(origin) + ": deepspeed");
  if (!with_ds.is_ok()) {
    // Named through the key that led to it: the file given is the arguments', not the DeepSpeed config's.
    r.fail(ds.is_string() ? with_ds.status().with_prefix(std::string(origin) + ": deepspeed: ") : with_ds.status());
  } else {
    s = with_ds.value();
    s.stack = Stack::kHfTrainer;
  }
}

// Arguments that change nothing priced, or little: said in notes.
void note_unpriced_arguments(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (r.boolean_or("auto_find_batch_size", false)) {
    out.notes.push_back("auto_find_batch_size: the Trainer halves the batch after an out-of-memory error; the "
                        "answer is for the batch as given");
  }
  if (r.boolean_or("tf32", false) && s.precision == Precision::kFp32) {
    out.notes.push_back("tf32: TF32 matmuls are not modelled; fp32 time is priced at the FP32 rate");
  }
}

// TRL: activation offloading moves what autograd saves to the CPU (trl/models/activation_offloading.py);
// with checkpointing that is each block's input.
void read_activation_offloading(ArgsReader& r, RunSettings& s) {
  if (r.boolean_or("activation_offloading", false)) {
    if (s.checkpointing == CheckpointPolicy::kNone) {
      r.fail("activation_offloading", "with gradient_checkpointing (offloading every saved tensor is not modelled)");
    }
    s.offload_checkpoint_inputs = true;
  }
}

// Settings that change memory or time but are not modelled: named in notes.
void note_unmodelled_settings(ArgsReader& r, ConfigImport& out) {
  for (const char* key : {"label_smoothing_factor", "torch_empty_cache_steps"}) {
    if (r.has(key) && r.raw(key) != json(0) && r.raw(key) != json(0.0) && r.raw(key) != json("0") &&
        r.raw(key) != json("0.0")) {
      out.notes.push_back(std::string(key) + " is set: not modelled (" +
                          (std::string(key) == "label_smoothing_factor"
                               ? "the LabelSmoother's fp32 log-softmax over the logits"
                               : "the cache is emptied every N steps, lowering reserved memory") +
                          ")");
    }
  }
}

// Whether an argument's value turns it off (false, "False", 0, "no").
bool turned_off(const json& value) {
  if (value.is_number()) return value == json(0);
  return boolean_of(value) == false;
}

bool names_any(const std::string& key, std::initializer_list<const char*> parts) {
  std::string lower = key;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::any_of(parts.begin(), parts.end(), [&](const char* part) { return lower.find(part) != std::string::npos; });
}

// A launch script's own arguments that choose the method are not TrainingArguments
// and not read (the PEFT examples' run_peft_qlora_fsdp.sh gives train.py
// --use_peft_lora, --use_4bit_quantization and --lora_r through its own
// ModelArguments): priced without them, a QLoRA run becomes a full fp32 fine-tune
// (issue 36). Refused unless the run's flags already say LoRA or QLoRA.
Status refuse_method_arguments(const std::vector<std::string>& unread, const json& args, const RunSettings& s,
                               std::string_view origin) {
  for (const std::string& key : unread) {
    if (turned_off(args.at(key))) continue;
    const bool quantizes = names_any(key, {"4bit", "8bit", "quant", "bnb", "nf4", "gptq"});
    const bool adapts = names_any(key, {"lora", "peft", "adapter", "dora"});
    const bool unpriced = (quantizes && s.mode != TrainMode::kQlora) || (adapts && s.mode == TrainMode::kFull);
    if (!unpriced) continue;
    return Status::invalid_input(
        std::string(origin) + ": " + key +
        ": the script's own argument, which chooses LoRA, QLoRA or a quantized base, is not read by headroom; "
        "expected the method as flags: --lora or --qlora (with --lora-rank N and --lora-targets), or --peft "
        "adapter_config.json");
  }
  return Status::ok();
}

Result<ConfigImport> map_arguments(const json& args, std::string_view origin, RunSettings base) {
  if (!args.is_object())
    return Status::invalid_input(std::string(origin) +
                                 ": expected TrainingArguments as a JSON object");
  ArgsReader r(args, origin);
  ConfigImport out;
  RunSettings& s = out.settings;
  s = std::move(base);
  s.stack = Stack::kHfTrainer;
  const bool bf16 = read_batch_and_precision(r, s);
  read_optim(r, s, out);
  read_checkpointing_and_compile(r, s);
  read_fsdp(r, s, out);
  read_saving_and_sequence(r, s, out);
  read_trl_model_args(r, s, out);
  if (s.precision == Precision::kBf16Amp || s.precision == Precision::kFp16Amp) {
    out.notes.push_back(std::string(bf16 ? "bf16" : "fp16") +
                        ": autocast over the model as loaded; priced for an fp32 load (from_pretrained's default "
                        "before transformers 5); give --precision bf16 if the script loads it in bf16 "
                        "(torch_dtype=torch.bfloat16, or transformers 5's 'auto')");
  }
  read_deepspeed_argument(r, s, origin);
  if (r.boolean_or("use_liger_kernel", false)) {
    read_liger(r, s, out);
  } else {
    r.has("liger_kernel_config");  // read: it does nothing without use_liger_kernel
  }
  note_unpriced_arguments(r, s, out);
  read_activation_offloading(r, s);
  note_unmodelled_settings(r, out);
  if (!r.status().is_ok()) return r.status();
  if (Status method = refuse_method_arguments(r.unread(), args, s, origin); !method.is_ok()) return method;
  // What the file says must hold together on its own (DeepSpeed refuses NVMe optimizer
  // offload below ZeRO-3, torchtune in-backward with accumulation, ...).
  if (Status valid = validate_settings(out.settings, origin); !valid.is_ok()) return valid;
  out.ignored = r.unread();
  return out;
}

}  // namespace

Result<ConfigImport> import_training_arguments(std::string_view text, std::string_view origin, RunSettings base) {
  if (const std::optional<size_t> bad = graph::first_invalid_utf8(text)) {
    return Status::invalid_input(std::string(origin) + ": byte " + std::to_string(*bad) +
                                 ": expected UTF-8 text (TrainingArguments JSON or arguments)");
  }
  // A UTF-8 byte-order mark before JSON (as Windows editors save it) is no argument.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') {
    return Status::invalid_input(std::string(origin) +
                                 ": a JSON array (expected TrainingArguments as a JSON object, or a command line)");
  }
  if (first != std::string_view::npos && text[first] == '{') {
    Result<json> args = graph::parse_json_text(text, origin);
    if (!args.is_ok()) return args.status();
    return map_arguments(args.value(), origin, std::move(base));
  }
  Result<json> args = arguments_object(text, origin);
  if (!args.is_ok()) return args.status();
  return map_arguments(args.value(), origin, std::move(base));
}

Result<ConfigImport> import_training_arguments_object(const json& args, std::string_view origin, RunSettings base) {
  return map_arguments(args, origin, std::move(base));
}

Result<ConfigImport> load_training_arguments(const std::string& path, RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_training_arguments(text.value(), path, std::move(base));
}

namespace {

// target_modules: a list of names or PEFT's "all-linear" shorthand.
void read_peft_targets(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  const json& targets = r.raw("target_modules");
  if (targets.is_array()) {
    s.lora.targets.clear();
    for (const json& t : targets) {
      if (!t.is_string()) {
        r.fail("target_modules", "module names", targets);
        break;
      }
      s.lora.targets.push_back(t.get<std::string>());
    }
  } else if (targets == json("all-linear")) {
    s.lora.targets.clear();  // the model's own list: every linear of its blocks
    out.notes.push_back("target_modules all-linear: the model's own adapter list (every linear of its blocks, "
                        "not the output layer), as PEFT's shorthand selects");
  } else {
    r.fail("target_modules", "a list of module names or \"all-linear\" (a regular expression is not read; give "
                             "--lora-targets)",
           targets);
  }
  if (targets.is_array() && (targets.empty() || !std::all_of(targets.begin(), targets.end(),
                                                             [](const json& t) { return t.is_string(); }))) {
    r.fail("target_modules", "a non-empty list of module names", targets);
  }
}

// modules_to_save train in full beside the adapters.
void read_peft_modules_to_save(ArgsReader& r, RunSettings& s) {
  if (!r.has("modules_to_save")) return;
  const json& saved = r.raw("modules_to_save");
  if (!saved.is_array()) {
    r.fail("modules_to_save", "a list of module names", saved);
  } else {
    for (const json& m : saved) {
      if (m.is_string()) s.train_patterns.push_back("*" + m.get<std::string>() + "*");
    }
  }
}

// What LoraConfig may say that is not modelled, and the keys read that change no bytes.
void refuse_unmodelled_peft(ArgsReader& r) {
  for (const char* per_module : {"rank_pattern", "layers_to_transform", "exclude_modules", "target_parameters"}) {
    if (!r.has(per_module)) continue;
    const json& v = r.raw(per_module);
    if ((v.is_object() || v.is_array()) && v.empty()) continue;
    r.fail(per_module, "empty or null (per-module ranks, layer subsets and parameter targets are not modelled)", v);
  }
  r.has("alpha_pattern");  // scales: no bytes
  if (r.has("lora_dropout") && !probability(r.raw("lora_dropout"))) {
    r.fail("lora_dropout", "a probability in [0, 1)", r.raw("lora_dropout"));
  }
  const std::string bias = r.string_or("bias", "none");
  if (bias != "none") r.fail("bias", "\"none\" (trained biases are not modelled)", json(bias));
  if (r.boolean_or("use_dora", false)) r.fail("use_dora", "false (DoRA's magnitude vectors and norms are not modelled)");
  for (const char* read_no_bytes : {"lora_alpha", "use_rslora", "task_type", "base_model_name_or_path", "fan_in_fan_out",
                                    "init_lora_weights", "inference_mode", "revision"}) {
    r.has(read_no_bytes);
  }
}

}  // namespace

Result<ConfigImport> import_peft_config(std::string_view text, std::string_view origin, RunSettings base) {
  Result<json> parsed = graph::parse_json_text(text, origin);
  if (!parsed.is_ok()) return parsed.status();
  const json& config = parsed.value();
  if (!config.is_object())
    return Status::invalid_input(std::string(origin) +
                                 ": expected a PEFT adapter_config.json object");
  ArgsReader r(config, origin);
  ConfigImport out;
  RunSettings& s = out.settings;
  s = std::move(base);
  const std::string type = r.string_or("peft_type", "LORA");
  if (type != "LORA") r.fail("peft_type", "LORA (the only adapter modelled)", json(type));
  if (s.mode == TrainMode::kFull) s.mode = TrainMode::kLora;
  s.lora.rank = r.count_or("r", 8, kMaxLoraRank);  // LoraConfig's default r = 8
  if (r.has("lora_dropout")) {
    s.lora.dropout = probability(r.raw("lora_dropout")).value_or(0.0);  // refused below when not one
  } else {
    s.lora.dropout = 0.0;  // LoraConfig's default
  }
  if (r.has("target_modules")) read_peft_targets(r, s, out);
  read_peft_modules_to_save(r, s);
  refuse_unmodelled_peft(r);
  if (!r.status().is_ok()) return r.status();
  if (Status valid = validate_settings(out.settings, origin); !valid.is_ok()) return valid;
  out.ignored = r.unread();
  return out;
}

Result<ConfigImport> load_peft_config(const std::string& path, RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_peft_config(text.value(), path, std::move(base));
}

}  // namespace headroom::planner
