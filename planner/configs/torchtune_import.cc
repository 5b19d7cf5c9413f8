#include "planner/configs/torchtune_import.h"

#include <optional>
#include <string>
#include <vector>

#include "graph/atomic_file.h"
#include "models/torchtune_models.h"
#include "planner/configs/yaml_config.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// torchtune's LoRA module names onto the graph's (HF) names: the builders'
// lora_attn_modules q_proj, k_proj, v_proj, output_proj; apply_lora_to_mlp adds
// w1, w2, w3 (gate, down, up); apply_lora_to_output the output projection.
Status read_lora(YamlReader& r, RunSettings& s, bool tied) {
  std::vector<std::string> targets;
  for (const std::string& module : r.strings("model.lora_attn_modules")) {
    if (module == "q_proj" || module == "k_proj" || module == "v_proj") {
      targets.push_back(module);
    } else if (module == "output_proj") {
      targets.push_back("o_proj");
    } else {
      r.fail("model.lora_attn_modules", "names among q_proj, k_proj, v_proj, output_proj, got \"" + module + "\"");
    }
  }
  if (r.boolean_or("model.apply_lora_to_mlp", false)) {
    targets.insert(targets.end(), {"gate_proj", "up_proj", "down_proj"});
  }
  if (r.boolean_or("model.apply_lora_to_output", false)) {
    // Llama 3.2's builders tie the output to the embeddings, and lora_llama3_2 raises
    // on apply_lora_to_output (models/llama3_2/_component_builders.py).
    if (tied) r.fail("model.apply_lora_to_output", "false: this builder ties the output to the embeddings, and torchtune refuses a LoRA output then");
    targets.push_back("lm_head");
  }
  if (targets.empty()) r.fail("model.lora_attn_modules", "at least one module to adapt");
  s.lora.targets = targets;
  s.lora.rank = r.count_or("model.lora_rank", 8);
  s.lora.dropout = r.number_or("model.lora_dropout", 0.0);
  if (!(s.lora.dropout >= 0 && s.lora.dropout < 1)) r.fail("model.lora_dropout", "a probability in [0, 1)");
  r.at("model.lora_alpha");  // a scale: no bytes, no time
  s.lora.dora = r.boolean_or("model.use_dora", false);  // the lora_ builders' use_dora: DoRALinear
  if (r.has("model.quantize_base") && r.boolean_or("model.quantize_base", false) != (s.mode == TrainMode::kQlora)) {
    r.fail("model.quantize_base", s.mode == TrainMode::kQlora ? "true with a qlora_ builder" : "false with a lora_ builder (use the qlora_ builder)");
  }
  return r.status();
}

// optimizer._component_ onto the optimizer and its implementation.
void read_optimizer(YamlReader& r, RunSettings& s) {
  const std::string component = r.string_or("optimizer._component_", "");
  if (component == "torch.optim.AdamW" || component == "torch.optim.Adam") {
    s.optimizer = OptimizerKind::kAdamW;
    if (r.boolean_or("optimizer.fused", false)) {
      s.optimizer_impl = OptimizerImpl::kFused;
    } else {
      // torch picks foreach on CUDA unless told not to (optimizer.py _default_to_fused_or_foreach).
      s.optimizer_impl = r.has("optimizer.foreach") && !r.boolean_or("optimizer.foreach", true)
                             ? OptimizerImpl::kForLoop
                             : OptimizerImpl::kForeach;
    }
  } else if (component == "bitsandbytes.optim.PagedAdamW8bit" || component == "bitsandbytes.optim.AdamW8bit") {
    s.optimizer = OptimizerKind::kAdamW8bit;
    s.paged_optimizer = component.find("Paged") != std::string::npos;
    s.optimizer_impl = OptimizerImpl::kFused;  // one kernel per tensor, no foreach lists
  } else if (component == "bitsandbytes.optim.PagedAdamW" || component == "bitsandbytes.optim.PagedAdamW32bit") {
    s.optimizer = OptimizerKind::kAdamW;
    s.paged_optimizer = true;
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (component == "torchao.optim.AdamW4bit" || component == "torchao.prototype.low_bit_optim.AdamW4bit") {
    s.optimizer = OptimizerKind::kAdamW4bit;
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (component == "torchao.optim.AdamW8bit" || component == "torchao.prototype.low_bit_optim.AdamW8bit") {
    s.optimizer = OptimizerKind::kAdamW8bitTorchao;
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (component == "torch.optim.SGD") {
    // Only SGD with momentum keeps a state (one buffer a parameter); without it none.
    s.optimizer = r.number_or("optimizer.momentum", 0.0) > 0 ? OptimizerKind::kSgdMomentum : OptimizerKind::kSgd;
    s.optimizer_impl = OptimizerImpl::kForeach;
  } else {
    r.fail("optimizer._component_",
           "torch.optim.AdamW / Adam / SGD, bitsandbytes.optim.AdamW8bit / PagedAdamW8bit / PagedAdamW, or "
           "torchao.optim.AdamW8bit / AdamW4bit",
           r.at("optimizer._component_"));
  }
}

void read_loss(YamlReader& r, RunSettings& s) {
  const std::string component = r.string_or("loss._component_", "torchtune.modules.loss.CEWithChunkedOutputLoss");
  if (component == "torchtune.modules.loss.CEWithChunkedOutputLoss" ||
      component == "torchtune.modules.loss.LinearCrossEntropyLoss") {
    s.loss = LossSpec{LossImpl::kChunked, static_cast<int>(r.count_or("loss.num_output_chunks", 8))};
  } else if (component == "torch.nn.CrossEntropyLoss") {
    s.loss = LossSpec{LossImpl::kFull, 8};
  } else {
    r.fail("loss._component_",
           "torchtune.modules.loss.CEWithChunkedOutputLoss, LinearCrossEntropyLoss or torch.nn.CrossEntropyLoss",
           r.at("loss._component_"));
  }
}

// model._component_: the builder, the training mode and the LoRA it takes.
// Returns an error only where reading further makes no sense.
Status read_model(YamlReader& r, RunSettings& s) {
  const std::string component = r.string_or("model._component_", "");
  const std::optional<models::TorchtuneComponent> model = models::parse_torchtune_component(component);
  if (!model) {
    r.fail("model._component_",
           "a torchtune model builder headroom knows (torchtune.models.<" + models::torchtune_builder_names() +
               ">, optionally lora_ or qlora_)",
           r.at("model._component_"));
    return r.status();
  }
  s.model = component;
  s.mode = model->variant == models::TorchtuneComponent::Variant::kFull    ? TrainMode::kFull
           : model->variant == models::TorchtuneComponent::Variant::kLora ? TrainMode::kLora
                                                                            : TrainMode::kQlora;
  if (s.mode != TrainMode::kFull) {
    if (Status lora = read_lora(r, s, models::torchtune_builder_ties_embeddings(model->builder)); !lora.is_ok()) {
      return lora;
    }
  }
  if (r.has("model.tie_word_embeddings") && !r.boolean_or("model.tie_word_embeddings", true)) {
    r.fail("model.tie_word_embeddings", "true (the builders' default; untied Llama 3.2 is not built)");
  }
  return Status::ok();
}

// The sequence: packed rows are exactly max_seq_len; unpacked batches are padded
// to their longest sample (torchtune padded_collate_sft), at most max_seq_len.
void read_sequence(YamlReader& r, RunSettings& s, ConfigImport& out) {
  const bool packed = r.boolean_or("dataset.packed", false);
  const int64_t max_seq = r.count_or("tokenizer.max_seq_len", 0);
  if (packed && max_seq == 0) r.fail("tokenizer.max_seq_len", "a length: packing fills rows of max_seq_len tokens");
  if (max_seq > 0) s.seq_len = max_seq;
  out.sequence_unknown = max_seq == 0;
  if (!packed && max_seq > 0) {
    s.shortest_sample = 1;  // the dataset's lengths are not in the config
    out.notes.push_back("dataset.packed is false: batches are padded to their longest sample; priced at "
                        "tokenizer.max_seq_len, the most a batch can hold" + padded_batches_band("1 token"));
  }
  // torchtune's attention: flex_attention with the document mask for packed rows
  // (modules/attention_utils.py _sdpa_or_flex_attention), SDPA otherwise.
  s.attention = packed ? models::AttentionImpl::kFlex : models::AttentionImpl::kSdpa;
}

// The step: batch, accumulation, optimizer, loss, compile, checkpointing, dtype, device.
void read_step(YamlReader& r, RunSettings& s) {
  // The recipes read cfg.batch_size for their DataLoader and have no default: a
  // config without one (or with null) does not run, so it is not priced as 1.
  if (!r.has("batch_size")) r.fail("batch_size", "a positive whole number (torchtune's recipes have no default)");
  s.micro_batch = r.count_or("batch_size", 1);
  s.grad_accum = r.count_or("gradient_accumulation_steps", 1);
  read_optimizer(r, s);
  if (r.boolean_or("optimizer_in_bwd", false)) {
    if (s.grad_accum > 1) r.fail("optimizer_in_bwd", "false with gradient_accumulation_steps above 1 (torchtune refuses both)");
    s.optimizer_impl = OptimizerImpl::kInBackward;
  }
  read_loss(r, s);
  const nlohmann::json& compile = r.at("compile");
  if (compile.is_object() || compile.is_array()) {
    r.fail("compile", "true or false (a per-component compile mapping is not read)", compile);
  }
  s.compile = r.boolean_or("compile", false);
  s.checkpointing =
      r.boolean_or("enable_activation_checkpointing", false) ? CheckpointPolicy::kEveryBlock : CheckpointPolicy::kNone;
  s.offload_checkpoint_inputs = r.boolean_or("enable_activation_offloading", false);
  if (s.offload_checkpoint_inputs && s.checkpointing == CheckpointPolicy::kNone) {
    r.fail("enable_activation_offloading",
           "false without enable_activation_checkpointing (offloading every activation is not modelled)");
  }
  const std::string dtype = r.string_or("dtype", "bf16");
  if (dtype == "bf16") {
    s.precision = Precision::kBf16Pure;
  } else if (dtype == "fp32") {
    s.precision = Precision::kFp32;
  } else {
    r.fail("dtype", "bf16 or fp32 (torchtune refuses fp16)", r.at("dtype"));
  }
  const std::string device = r.string_or("device", "cuda");
  if (device != "cuda") r.fail("device", "cuda", r.at("device"));
}

// The distributed recipes shard with FSDP2 (training.shard_model): ZeRO-3, or
// ZeRO-2's layout when parameters stay unsharded between forward and backward.
void read_fsdp2(YamlReader& r, RunSettings& s, ConfigImport& out) {
  s.zero_stage = r.boolean_or("fsdp_reshard_after_forward", true) ? 3 : 2;
  // Modules wrapped by a fully_shard of their own besides the layers (shard_model's
  // custom_sharded_layers); the others outside the layers stay in the root group.
  for (const std::string& module : r.strings("custom_sharded_layers")) {
    if (module == "tok_embeddings") {
      s.fsdp_own_groups.push_back("embeddings");
    } else if (module == "output") {
      s.fsdp_own_groups.push_back("head");
    } else {
      r.fail("custom_sharded_layers", "names among tok_embeddings and output, got \"" + module + "\"");
    }
  }
  if (r.has("fsdp_sharding_strategy")) {
    const std::string strategy = r.string_or("fsdp_sharding_strategy", "FULL_SHARD");
    if (strategy != "FULL_SHARD") r.fail("fsdp_sharding_strategy", "FULL_SHARD", r.at("fsdp_sharding_strategy"));
  }
  if (r.boolean_or("fsdp_cpu_offload", false)) {
    if (s.zero_stage != 3) r.fail("fsdp_cpu_offload", "false with fsdp_reshard_after_forward false");
    s.offload_optimizer = Offload::kCpu;
    s.offload_param = Offload::kCpu;
    out.notes.push_back("fsdp_cpu_offload: FSDP2's CPUOffloadPolicy (sharded parameters, their gradients and "
                        "the optimizer step on the host)");
  }
  out.notes.push_back("a distributed recipe: FSDP2 over --gpus x --nodes GPUs (the config does not say how many)");
}

// Keys of newer or distributed recipes: those that change memory and are not
// modelled are refused; the distributed recipes' sharding is read.
void read_parallelism(YamlReader& r, RunSettings& s, ConfigImport& out) {
  if (r.has("ac_mode") || r.has("ac_option")) {
    r.fail(r.has("ac_mode") ? "ac_mode" : "ac_option",
           "absent (layer-selective checkpointing: give --checkpoint-blocks with the layers it checkpoints)");
  }
  if (r.count_or("tensor_parallel_dim", 1) != 1) r.fail("tensor_parallel_dim", "1 (tensor parallelism is not modelled)");
  if (r.has("data_parallel_replicate_dim") && r.count_or("data_parallel_replicate_dim", 1) != 1) {
    out.notes.push_back("data_parallel_replicate_dim: hybrid sharding; give --shard-gpus with the shard group size");
  }
  r.at("data_parallel_shard_dim");  // -1: every GPU, as --gpus and --nodes say
  const bool distributed = r.has("fsdp_cpu_offload") || r.has("fsdp_reshard_after_forward") ||
                           r.has("custom_sharded_layers") || r.has("fsdp_sharding_strategy");
  // On more than one GPU only the distributed recipes run, and they always shard
  // (training.shard_model): resolved once --gpus and --nodes are known.
  out.shard_when_distributed = true;
  if (distributed) read_fsdp2(r, s, out);
}

Result<ConfigImport> import_tree(const nlohmann::json& root, std::string_view origin, RunSettings base) {
  YamlReader r(root, origin);
  ConfigImport out;
  RunSettings& s = out.settings;
  s = std::move(base);
  s.stack = Stack::kTorchtune;
  if (Status model = read_model(r, s); !model.is_ok()) return model;
  read_sequence(r, s, out);
  read_step(r, s);
  read_parallelism(r, s, out);
  if (!r.status().is_ok()) return r.status();
  // What the file says must hold together on its own (DeepSpeed refuses NVMe optimizer
  // offload below ZeRO-3, torchtune in-backward with accumulation, ...).
  if (Status valid = validate_settings(out.settings, origin); !valid.is_ok()) return valid;
  out.ignored = r.unread();
  return out;
}

}  // namespace

Result<ConfigImport> import_torchtune_config(std::string_view text, std::string_view origin,
                                                const std::vector<std::string>& overrides, RunSettings base) {
  Result<nlohmann::json> root = parse_yaml_config(text, origin, "a YAML torchtune config", overrides);
  if (!root.is_ok()) return root.status();
  return import_tree(root.value(), origin, std::move(base));
}

Result<ConfigImport> load_torchtune_config(const std::string& path, const std::vector<std::string>& overrides,
                                              RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_torchtune_config(text.value(), path, overrides, std::move(base));
}

}  // namespace headroom::planner
