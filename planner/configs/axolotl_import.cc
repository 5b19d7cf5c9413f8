#include "planner/configs/axolotl_import.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "graph/atomic_file.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/configs/yaml_config.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// axolotl keys that are TrainingArguments (or TRL ModelConfig) keys under another
// name, or the same name (axolotl/utils/schemas/config.py AxolotlInputConfig).
const std::map<std::string, std::string>& renamed() {
  static const std::map<std::string, std::string> kKeys = {
      {"micro_batch_size", "per_device_train_batch_size"},
      {"gradient_accumulation_steps", "gradient_accumulation_steps"},
      {"optimizer", "optim"},
      {"gradient_checkpointing", "gradient_checkpointing"},
      {"gradient_checkpointing_kwargs", "gradient_checkpointing_kwargs"},
      {"deepspeed", "deepspeed"},
      {"fsdp", "fsdp"},
      {"fsdp_config", "fsdp_config"},
      {"torch_compile", "torch_compile"},
      {"torch_compile_backend", "torch_compile_backend"},
      {"torch_compile_mode", "torch_compile_mode"},
      {"save_total_limit", "save_total_limit"},
      {"save_only_model", "save_only_model"},
      {"sequence_len", "max_length"},
      {"sample_packing", "packing"},
      {"lora_r", "lora_r"},
      {"lora_dropout", "lora_dropout"},
      {"lora_alpha", "lora_alpha"},
      {"lora_target_modules", "lora_target_modules"},
      {"lora_modules_to_save", "lora_modules_to_save"},
      {"load_in_4bit", "load_in_4bit"},
      {"load_in_8bit", "load_in_8bit"},
      {"peft_use_dora", "use_dora"},
      {"fp16", "fp16"},
      {"tf32", "tf32"},
      {"use_cpu", "use_cpu"},
      {"torch_dtype", "torch_dtype"},
  };
  return kKeys;
}

// Keys axolotl reads that change nothing headroom prices, said as read.
const std::set<std::string>& understood() {
  static const std::set<std::string> kKeys = {"base_model", "base_model_config", "model_type", "tokenizer_type",
                                              "adapter", "bf16", "lora_target_linear", "flash_attention",
                                              "sdp_attention", "xformers_attention", "eager_attention",
                                              "batch_size", "gptq", "gptq_groupsize", "pad_to_sequence_len"};
  return kKeys;
}

// The error for `key` of the file, with its value.
Status field_error(const json& config, std::string_view origin, const std::string& key, const std::string& expected) {
  return config_field_error(origin, key, expected, config.at(key));
}

// The TrainingArguments the axolotl keys rename; the keys neither renamed nor
// understood go to `ignored`.
json trainer_arguments(const json& config, std::vector<std::string>& ignored) {
  json args = json::object();
  for (const auto& [key, value] : config.items()) {
    if (value.is_null()) continue;
    const auto it = renamed().find(key);
    if (it != renamed().end()) {
      args[it->second] = value;
    } else if (!understood().count(key)) {
      ignored.push_back(key);
    }
  }
  return args;
}

// What adapter and gptq say.
struct Adapter {
  std::string name;  // lora, qlora or "" (a full fine-tune)
  bool gptq = false;
  int64_t gptq_group = kGptqDefaultGroupSize;
};

// adapter: lora or qlora trains a PEFT adapter; none (or empty) is a full fine-tune.
Status read_adapter(const json& config, std::string_view origin, json& args, Adapter& a) {
  a.name = config.contains("adapter") && config.at("adapter").is_string()
               ? config.at("adapter").get<std::string>()
               : "";
  if (config.contains("adapter") && !config.at("adapter").is_null() && a.name != "lora" && a.name != "qlora") {
    return field_error(config, origin, "adapter", "lora, qlora or nothing (a full fine-tune)");
  }
  // gptq: "Whether you are training a 4-bit GPTQ quantized model" (axolotl's
  // AxolotlInputConfig; gptq_groupsize in its older configs): adapters over a frozen
  // GPTQ int4 base, QLoRA with quant gptq here (planner/mechanisms/gptq_linear.h).
  a.gptq = config.contains("gptq") && config.at("gptq") == json(true);
  if (config.contains("gptq") && !config.at("gptq").is_null() && !config.at("gptq").is_boolean()) {
    return field_error(config, origin, "gptq", "true or false");
  }
  if (a.gptq && a.name != "lora") {
    return field_error(config, origin, "gptq", "adapter lora with it (a GPTQ base trains adapters only)");
  }
  if (config.contains("gptq_groupsize") && !config.at("gptq_groupsize").is_null()) {
    const json& group = config.at("gptq_groupsize");
    if (!group.is_number_integer() || (group.get<int64_t>() < 1 && group.get<int64_t>() != -1)) {
      return field_error(config, origin, "gptq_groupsize", "a positive integer or -1");
    }
    a.gptq_group = group.get<int64_t>();
  }
  if (!a.name.empty()) args["use_peft"] = true;
  if (a.name == "qlora") args["load_in_4bit"] = true;
  if (!a.name.empty() && config.value("lora_target_linear", json(false)) == json(true)) {
    // axolotl adds every linear layer to the modules listed (load_lora:
    // lora_target_modules + find_all_linear_names): the union is every linear one,
    // but the list must still be one axolotl accepts.
    if (config.contains("lora_target_modules") && !config.at("lora_target_modules").is_null()) {
      const json& listed = config.at("lora_target_modules");
      const bool names = listed.is_string() ||
                         (listed.is_array() && std::all_of(listed.begin(), listed.end(),
                                                           [](const json& m) { return m.is_string(); }));
      if (!names) return field_error(config, origin, "lora_target_modules", "a module name or a list of them");
    }
    args["lora_target_modules"] = "all-linear";
  }
  return Status::ok();
}

// bf16: true, false or 'auto' (bf16 where the GPU has it: every GPU headroom catalogues).
Status read_precision(const json& config, std::string_view origin, json& args) {
  if (config.contains("bf16") && !config.at("bf16").is_null()) {
    const json& bf16 = config.at("bf16");
    if (bf16 == json("auto") || bf16 == json(true)) {
      args["bf16"] = true;
    } else if (bf16 != json(false)) {
      return field_error(config, origin, "bf16", "true, false or auto");
    }
  }
  // Axolotl loads the model in the compute dtype it picks (bf16 when bf16 is on),
  // unless torch_dtype says otherwise (utils/models.py ModelLoader).
  if (args.value("bf16", json(false)) == json(true) && !args.contains("torch_dtype")) args["torch_dtype"] = "bfloat16";
  if (config.value("eager_attention", json(false)) == json(true)) args["attn_implementation"] = "eager";
  return Status::ok();
}

// The TrainingArguments reader's error, naming the key as the axolotl file spells it.
Status respelled_error(const Status& error, std::string_view origin) {
  std::string message = error.message();
  for (const auto& [axolotl, trainer] : renamed()) {
    const std::string said = std::string(origin) + ": " + trainer + ":";
    if (message.rfind(said, 0) == 0) {
      message = std::string(origin) + ": " + axolotl + ":" + message.substr(said.size());
      break;
    }
  }
  return Status::with_code(error.code(), message);
}

// What axolotl does beyond the TrainingArguments: padding to sequence_len, a
// GPTQ base, its k-bit preparation, and the global batch it may name.
void apply_axolotl_settings(const json& config, const Adapter& a, ConfigImport& out) {
  // pad_to_sequence_len: every batch padded to sequence_len (axolotl's collator
  // pads to it), so no batch of another length.
  if (config.value("pad_to_sequence_len", json(false)) == json(true) && out.settings.shortest_sample) {
    out.settings.shortest_sample.reset();
    std::erase_if(out.notes, [](const std::string& note) {
      return note.find("padded to the longest of each batch") != std::string::npos;
    });
    out.notes.push_back("pad_to_sequence_len: every batch is padded to sequence_len, the length it is priced at");
  }
  if (a.gptq) {
    out.settings.mode = TrainMode::kQlora;
    out.settings.quant = QuantFormat::kGptq;
    out.settings.gptq_group_size = a.gptq_group;
    out.notes.push_back("gptq: adapters over a GPTQ int4 base, group size " + std::to_string(a.gptq_group) +
                        " (the model's quantization_config is checked against it)");
  }
  // Axolotl runs PEFT's prepare_model_for_kbit_training and then casts the norms
  // and embeddings back to torch_dtype for LoRA and QLoRA (loaders/model.py): the
  // unquantized weights train as loaded.
  if (out.settings.mode == TrainMode::kQlora) out.settings.kbit_prep = KbitPrep::kNone;
  if (config.contains("batch_size") && !config.at("batch_size").is_null()) {
    out.notes.push_back("batch_size (the global batch) is read through micro_batch_size and "
                        "gradient_accumulation_steps; give --global-batch to hold it across GPU counts");
  }
}

// axolotl's Liger plugin (integrations/liger): liger_fused_linear_cross_entropy
// swaps the loss for Liger's fused linear cross-entropy; liger_rope, liger_rms_norm and
// liger_glu_activation swap the modules --liger-kernels on prices
// (planner/mechanisms/liger_kernels.h), rms_norm and glu_activation together or not at all;
// liger_layer_norm swaps a module priced as the model's own, which keeps at least as much.
Status read_liger_modules(const json& config, std::string_view origin, ConfigImport& out) {
  const auto on = [&](const char* key) { return config.contains(key) && config.at(key) == json(true); };
  if (on("liger_rms_norm") != on("liger_glu_activation")) {
    const bool norm = on("liger_rms_norm");
    return field_error(config, origin, norm ? "liger_rms_norm" : "liger_glu_activation",
                       std::string("false, or true with ") + (norm ? "liger_glu_activation" : "liger_rms_norm") +
                           " true (Liger's norm without its gated MLP, or the MLP alone, is not modelled)");
  }
  if (on("liger_rms_norm")) out.settings.liger_kernels = true;
  return Status::ok();
}

Status read_liger_plugin(const json& config, std::string_view origin, std::vector<std::string>& ignored,
                         ConfigImport& out) {
  for (const char* key : {"liger_fused_linear_cross_entropy", "liger_rope", "liger_rms_norm",
                          "liger_glu_activation", "liger_layer_norm", "liger_cross_entropy"}) {
    if (!config.contains(key) || config.at(key).is_null()) continue;
    if (!config.at(key).is_boolean()) return field_error(config, origin, key, "true or false");
    std::erase(ignored, std::string(key));
    if (config.at(key) != json(true)) continue;
    if (std::string_view(key) == "liger_fused_linear_cross_entropy") {
      out.settings.loss = LossSpec{LossImpl::kFusedLinearCe, 8};
      out.notes.push_back("liger_fused_linear_cross_entropy: priced as --loss fused-linear-ce");
    } else if (std::string_view(key) == "liger_cross_entropy") {
      return field_error(config, origin, key, "false (Liger's cross-entropy over materialised logits is not modelled; "
                                              "liger_fused_linear_cross_entropy is)");
    } else if (std::string_view(key) == "liger_layer_norm") {
      out.notes.push_back(std::string(key) + ": priced as the model's own module, which keeps at least as much "
                          "for backward");
    } else {
      out.notes.push_back(std::string(key) + ": priced with --liger-kernels on");
    }
  }
  return read_liger_modules(config, origin, out);
}

}  // namespace

Result<ConfigImport> import_axolotl_config(std::string_view text, std::string_view origin, RunSettings base) {
  Result<json> root = parse_yaml_config(text, origin, "an axolotl config");
  if (!root.is_ok()) return root.status();
  const json& config = root.value();
  std::vector<std::string> ignored;
  json args = trainer_arguments(config, ignored);
  Adapter adapter;
  if (Status read = read_adapter(config, origin, args, adapter); !read.is_ok()) return read;
  if (Status read = read_precision(config, origin, args); !read.is_ok()) return read;
  Result<ConfigImport> out = import_training_arguments_object(args, origin, std::move(base));
  if (!out.is_ok()) return respelled_error(out.status(), origin);
  respell_notes(out.value(), "max_length", "sequence_len");
  apply_axolotl_settings(config, adapter, out.value());
  if (Status read = read_liger_plugin(config, origin, ignored, out.value()); !read.is_ok()) return read;
  out->ignored = ignored;
  return out;
}

Result<ConfigImport> load_axolotl_config(const std::string& path, RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_axolotl_config(text.value(), path, std::move(base));
}

}  // namespace headroom::planner
