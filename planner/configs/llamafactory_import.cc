#include "planner/configs/llamafactory_import.h"

#include <set>
#include <string>

#include "graph/atomic_file.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/configs/yaml_config.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// LLaMA-Factory's own keys that change nothing headroom prices (model and data
// arguments), said as read so that they are not listed.
const std::set<std::string>& understood() {
  static const std::set<std::string> kKeys = {"model_name_or_path", "trust_remote_code", "stage", "do_train",
                                              "dataset", "template", "max_samples", "overwrite_cache",
                                              "preprocessing_num_workers", "plot_loss", "lora_alpha",
                                              "quantization_method", "flash_attn"};
  return kKeys;
}

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (char c : text + ",") {
    if (c == ',') {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else if (c != ' ') {
      item += c;
    }
  }
  return out;
}

// The file being read: which keys it gives, and the error naming one.
struct FactoryConfig {
  const json& config;
  std::string_view origin;

  bool said(const char* key) const { return config.contains(key) && !config.at(key).is_null(); }
  Status fail(const std::string& key, const std::string& expected) const {
    return config_field_error(origin, key, expected, config.at(key));
  }
};

// The TrainingArguments among the keys: all but LLaMA-Factory's own.
json trainer_arguments(const json& config) {
  json args = json::object();
  for (const auto& [key, value] : config.items()) args[key] = value;
  for (const char* own : {"finetuning_type", "lora_rank", "lora_dropout", "lora_target", "additional_target", "use_dora",
                          "quantization_bit", "double_quantization", "cutoff_len", "packing",
                          "disable_gradient_checkpointing", "enable_liger_kernel", "use_unsloth",
                          "upcast_layernorm"}) {
    args.erase(own);
  }
  for (const std::string& key : understood()) args.erase(key);
  return args;
}

bool uses_unsloth(const FactoryConfig& c) { return c.said("use_unsloth") && c.config.at("use_unsloth") == json(true); }

// use_unsloth is the unsloth stack (checked after the import); enable_liger_kernel is the
// Trainer's use_liger_kernel.
Status read_kernels(const FactoryConfig& c, const std::string& type, json& args) {
  const json& config = c.config;
  if (c.said("use_unsloth") && !config.at("use_unsloth").is_boolean()) return c.fail("use_unsloth", "true or false");
  // model/model_utils/unsloth.py load_unsloth_pretrained_model passes full_finetuning for
  // finetuning_type full, a path headroom does not model (planner/settings/validate_unsloth.h).
  if (uses_unsloth(c) && type != "lora") {
    return c.fail("use_unsloth", "false with finetuning_type " + type + " (Unsloth's full fine-tuning is not modelled)");
  }
  if (uses_unsloth(c) && c.said("enable_liger_kernel") && config.at("enable_liger_kernel") == json(true)) {
    return c.fail("use_unsloth", "false with enable_liger_kernel (Liger's kernels over Unsloth's are not modelled)");
  }
  if (c.said("enable_liger_kernel") && !config.at("enable_liger_kernel").is_boolean()) {
    return c.fail("enable_liger_kernel", "true or false");
  }
  if (c.said("enable_liger_kernel") && config.at("enable_liger_kernel") == json(true)) {
    // model/model_utils/liger_kernel.py apply_liger_kernel: Liger's defaults, as the
    // Trainer's use_liger_kernel applies them, without the fused loss where the stage
    // needs logits (require_logits: every stage but pt and sft; sft is the default).
    args["use_liger_kernel"] = true;
    const std::string stage =
        c.said("stage") && config.at("stage").is_string() ? config.at("stage").get<std::string>() : "sft";
    if (stage != "pt" && stage != "sft") args["liger_kernel_config"] = json{{"fused_linear_cross_entropy", false}};
  }
  return Status::ok();
}

// quantization_bit 4: a bitsandbytes 4-bit base under LoRA.
Status read_quantization(const FactoryConfig& c, const std::string& type, json& args) {
  const json& config = c.config;
  if (!c.said("quantization_bit")) return Status::ok();
  if (config.at("quantization_bit") != json(4)) return c.fail("quantization_bit", "4 (8-bit weights are not modelled)");
  if (type != "lora") return c.fail("quantization_bit", "only with finetuning_type lora");
  args["load_in_4bit"] = true;
  // double_quantization defaults to true in model_args.py.
  args["use_bnb_nested_quant"] = !c.said("double_quantization") || config.at("double_quantization") == json(true);
  return Status::ok();
}

// finetuning_type lora: rank, dropout, targets and the modules trained beside them.
void read_lora(const FactoryConfig& c, json& args) {
  const json& config = c.config;
  args["use_peft"] = true;
  args["lora_r"] = c.said("lora_rank") ? config.at("lora_rank") : json(8);  // finetuning_args.py defaults
  args["lora_dropout"] = c.said("lora_dropout") ? config.at("lora_dropout") : json(0.0);
  // finetuning_args.py use_dora (false), handed to LoraConfig by model/adapter.py
  if (c.said("use_dora")) args["use_dora"] = config.at("use_dora");
  const std::string target = c.said("lora_target") && config.at("lora_target").is_string()
                                 ? config.at("lora_target").get<std::string>()
                                 : "all";
  if (target == "all") {
    args["lora_target_modules"] = "all-linear";
  } else {
    json modules = json::array();
    for (const std::string& m : comma_list(target)) modules.push_back(m);
    args["lora_target_modules"] = modules;
  }
  if (c.said("additional_target") && config.at("additional_target").is_string()) {
    std::string saved;
    for (const std::string& m : comma_list(config.at("additional_target").get<std::string>())) saved += m + " ";
    args["lora_modules_to_save"] = saved;
  }
}

// The sequence, packing, checkpointing and the load dtype.
void read_sequence_and_checkpointing(const FactoryConfig& c, json& args) {
  const json& config = c.config;
  // cutoff_len (data_args.py, default 2048): samples are cut to it and padded per batch.
  args["max_length"] = c.said("cutoff_len") ? config.at("cutoff_len") : json(2048);
  // packing: "Will automatically enable in pre-training" (data_args.py): unset, the
  // pt stage packs and the others pad each batch to its longest sample.
  if (c.said("packing")) {
    args["packing"] = config.at("packing");
  } else if (c.said("stage") && config.at("stage") == json("pt")) {
    args["packing"] = true;
  }
  // Gradient checkpointing is on unless disable_gradient_checkpointing (model_args.py;
  // model/model_utils/checkpointing.py).
  args["gradient_checkpointing"] = !(c.said("disable_gradient_checkpointing") &&
                                     config.at("disable_gradient_checkpointing") == json(true));
  // The model is loaded in the compute dtype (model_utils infer_optim_dtype: bf16 when bf16).
  if (c.said("bf16") && config.at("bf16") == json(true)) args["torch_dtype"] = "bfloat16";
}

// LLaMA-Factory never calls PEFT's prepare_model_for_kbit_training: its own
// prepare_model_for_training (model/model_utils/checkpointing.py) upcasts the
// 1-D norm weights to fp32 only with upcast_layernorm (default false).
Status read_norm_upcast(const FactoryConfig& c, ConfigImport& out) {
  const json& config = c.config;
  if (c.said("upcast_layernorm") && !config.at("upcast_layernorm").is_boolean()) {
    return c.fail("upcast_layernorm", "true or false");
  }
  const bool upcast_norms = c.said("upcast_layernorm") && config.at("upcast_layernorm") == json(true);
  if (out.settings.mode == TrainMode::kQlora) {
    out.settings.kbit_prep = upcast_norms && kbit_prep_matters(out.settings) ? KbitPrep::kNormsFp32 : KbitPrep::kNone;
  }
  if (upcast_norms && out.settings.kbit_prep != KbitPrep::kNormsFp32) {
    out.notes.push_back("upcast_layernorm: fp32 norm weights are modelled for QLoRA under the Trainer's bf16 "
                        "autocast only; priced without them");
  }
  return Status::ok();
}

// use_unsloth: model/model_utils/unsloth.py (LLaMA-Factory at 1f41dfb) loads through
// FastLanguageModel and get_unsloth_peft_model passes use_gradient_checkpointing="unsloth"
// with max_seq_length = model_max_length; the Trainer's step runs over the patched model.
void use_unsloth_stack(ConfigImport& out) {
  out.settings.stack = Stack::kUnsloth;
  out.settings.kbit_prep.reset();  // Unsloth prepares the model itself (training_utils.py)
  out.notes.push_back("use_unsloth: priced as --stack unsloth (its RMSNorm, fused LoRA, offloading checkpointer "
                      "and fused loss; docs/stacks.md, \"Unsloth\")");
}

}  // namespace

Result<ConfigImport> import_llamafactory_config(std::string_view text, std::string_view origin, RunSettings base) {
  Result<json> root = parse_yaml_config(text, origin, "a LLaMA-Factory config");
  if (!root.is_ok()) return root.status();
  const json& config = root.value();
  const FactoryConfig c{config, origin};
  json args = trainer_arguments(config);

  // finetuning_type (finetuning_args.py): lora (the default) or full; freeze trains chosen layers.
  const std::string type = c.said("finetuning_type") && config.at("finetuning_type").is_string()
                               ? config.at("finetuning_type").get<std::string>()
                               : (c.said("finetuning_type") ? "?" : "lora");
  if (type != "lora" && type != "full") return c.fail("finetuning_type", "lora or full (freeze is not modelled)");
  if (Status read = read_kernels(c, type, args); !read.is_ok()) return read;
  if (Status read = read_quantization(c, type, args); !read.is_ok()) return read;
  if (type == "lora") read_lora(c, args);
  read_sequence_and_checkpointing(c, args);
  Result<ConfigImport> out = import_training_arguments_object(args, origin, std::move(base));
  if (!out.is_ok()) return out.status();
  respell_notes(out.value(), "max_length", "cutoff_len");
  respell_notes(out.value(), "use_liger_kernel", "enable_liger_kernel");
  if (Status read = read_norm_upcast(c, out.value()); !read.is_ok()) return read;
  if (uses_unsloth(c)) use_unsloth_stack(out.value());
  if (!c.said("cutoff_len")) out->notes.push_back("cutoff_len not given: LLaMA-Factory's default, 2048");
  return out;
}

Result<ConfigImport> load_llamafactory_config(const std::string& path, RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_llamafactory_config(text.value(), path, std::move(base));
}

}  // namespace headroom::planner
