#include "planner/settings/settings_json.h"

#include <nlohmann/json.hpp>
#include <string>

#include "planner/settings/gpu_json.h"
#include "planner/settings/json_fields.h"
#include "planner/settings/stack_mechanisms.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

Status fail(std::string_view origin, std::string_view field, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": " + std::string(field) + ": " + what);
}

// The model, the stack, precision, optimizer, training mode, attention.
Status read_model_and_stack(JsonFields& r, RunSettings& s, std::string& attention) {
  const Status statuses[] = {
      r.read("model", s.model),
      r.read_enum("stack", s.stack, parse_stack, stack_names()),
      r.read_enum("sharding", s.sharding, parse_sharding, sharding_names()),
      r.read_enum("reduce_dtype", s.reduce_dtype, parse_reduce_dtype, reduce_dtype_names()),
      r.read_enum("fsdp_wrap", s.fsdp_wrap, parse_fsdp_wrap, fsdp_wrap_names()),
      r.read_enum("precision", s.precision, parse_precision, precision_names()),
      r.read_enum("optimizer", s.optimizer, parse_optimizer, optimizer_names()),
      r.read_enum("mode", s.mode, parse_mode, mode_names()),
      r.read("freeze_patterns", s.freeze_patterns),
      r.read("train_patterns", s.train_patterns),
      r.read("quantize_skip", s.quantize_skip),
      r.read("fsdp_own_groups", s.fsdp_own_groups),
      r.read("lora_skip", s.lora_skip),
      r.read("attention", attention),
      r.read("dropout", s.dropout),
      r.read("precomputed_text_embeddings", s.precomputed_text_embeddings),
  };
  for (const Status& status : statuses) {
    if (!status.is_ok()) return status;
  }
  return Status::ok();
}

// The stack's mechanisms a run pins (settings/stack_mechanisms.h), one key per row.
Status read_stack_mechanisms(JsonFields& r, RunSettings& s) {
  for (const MechanismRow& row : stack_mechanisms()) {
    if (Status status = row.read(row, r, s); !status.is_ok()) return status;
  }
  return Status::ok();
}

// GRPO's generation: completion length, completions a prompt, optimizer steps a generation,
// and colocated vLLM's share and context (the engine itself is the `generation` row).
Status read_generation(JsonFields& r, RunSettings& s) {
  for (const Status& status : {r.read("completion_tokens", s.completion_tokens),
                               r.read("num_generations", s.num_generations),
                               r.read("steps_per_generation", s.steps_per_generation),
                               r.read("vllm_gpu_memory_utilization", s.vllm_gpu_memory_utilization),
                               r.read("vllm_max_model_len", s.vllm_max_model_len)}) {
    if (!status.is_ok()) return status;
  }
  return Status::ok();
}

// Batch, sharding and offload, kernels, checkpointing, the GPU, budgets and what the search may change.
Status read_run_and_budgets(JsonFields& r, RunSettings& s, std::string& checkpointing) {
  const Status statuses[] = {
      r.read("micro_batch", s.micro_batch),
      r.read("seq_len", s.seq_len),
      r.read("resolution", s.resolution),
      r.read("grad_accum", s.grad_accum),
      r.read("global_batch", s.global_batch),
      r.read("gpus_per_node", s.gpus_per_node),
      r.read("shard_gpus", s.shard_gpus),
      r.read("nodes", s.nodes),
      r.read("zero_stage", s.zero_stage),
      r.read_enum("offload_optimizer", s.offload_optimizer, parse_offload, offload_names()),
      r.read_enum("cpu_offload", s.cpu_offload, parse_cpu_offload, cpu_offload_names()),
      r.read_enum("offload_param", s.offload_param, parse_offload, offload_names()),
      r.read("reduce_bucket_elements", s.reduce_bucket_elements),
      r.read("allgather_bucket_elements", s.allgather_bucket_elements),
      r.read("prefetch_bucket_elements", s.prefetch_bucket_elements),
      r.read("max_live_parameters", s.max_live_parameters),
      r.read("sub_group_elements", s.sub_group_elements),
      r.read("overlap_comm", s.overlap_comm),
      r.read("compile", s.compile),
      r.read_enum("float8", s.float8, parse_float8_recipe, float8_recipe_names()),
      r.read("float8_all_gather", s.float8_all_gather),
      r.read("nf4_double_quant", s.nf4_double_quant),
      r.read_enum("quant", s.quant, parse_quant_format, quant_format_names()),
      r.read("gptq_group_size", s.gptq_group_size),
      r.read("offload_checkpoint_inputs", s.offload_checkpoint_inputs),
      r.read("expandable_segments", s.expandable_segments),
      r.read("paged_optimizer", s.paged_optimizer),
      r.read("group_by_length", s.group_by_length),
      r.read("checkpointing", checkpointing),
      r.read("checkpoint_blocks", s.checkpoint_blocks),
      r.read("offload_blocks", s.offload_blocks),
      r.read("gpu", s.gpu),
      r.read("calibration_file", s.calibration_file),
      r.read("gpu_memory_bytes", s.gpu_memory_bytes),
      r.read("cuda_context_bytes", s.cuda_context_bytes),
      r.read("document_tokens", s.document_tokens),
      r.read("shortest_sample", s.shortest_sample),
      r.read("text_tokens", s.text_tokens),
      r.read("target_tokens", s.target_tokens),
      r.read("host_ram_bytes", s.host_ram_bytes),
      r.read("disk_free_bytes", s.disk_free_bytes),
      r.read("safety_margin", s.safety_margin),
      r.read("network_gbps", s.network_gbps),
      r.read("nvme_gbps", s.nvme_gbps),
      r.read("checkpoints_kept", s.checkpoints_kept),
      r.read("save_optimizer_state", s.save_optimizer_state),
      r.read("max_zero_stage", s.max_zero_stage),
      r.read("may_change", s.may_change),
      r.read("allow_cpu_offload", s.allow_cpu_offload),
      r.read("allow_nvme_offload", s.allow_nvme_offload),
      r.read("allow_activation_offload", s.allow_activation_offload),
      r.read("allow_micro_batch_change", s.allow_micro_batch_change),
  };
  for (const Status& status : statuses) {
    if (!status.is_ok()) return status;
  }
  return Status::ok();
}

// settings.lora: rank, targets, dropout.
Status read_lora(JsonFields& r, std::string_view origin, RunSettings& s) {
  if (const nlohmann::json* lora = r.member("lora")) {
    if (!lora->is_object()) return r.expected("lora", "an object {\"rank\", \"targets\", \"dropout\"}", *lora);
    JsonFields l(*lora, origin, "settings.lora.");
    for (const Status& status : {l.read("rank", s.lora.rank), l.read("targets", s.lora.targets),
                                 l.read("dropout", s.lora.dropout), l.read("dora", s.lora.dora), l.unknown_keys()}) {
      if (!status.is_ok()) return status;
    }
  }
  return Status::ok();
}

// settings.scoped_lora: adapters of their own on the modules a glob names.
Status read_scoped_lora(JsonFields& r, std::string_view origin, RunSettings& s) {
  if (const nlohmann::json* scoped = r.member("scoped_lora")) {
    if (!scoped->is_array()) return r.expected("scoped_lora", "a list of {\"scope\", \"rank\", \"targets\", \"dropout\"}", *scoped);
    for (size_t i = 0; i < scoped->size(); ++i) {
      const nlohmann::json& item = (*scoped)[i];
      const std::string prefix = "settings.scoped_lora[" + std::to_string(i) + "].";
      if (!item.is_object()) {
        return fail(origin, "settings.scoped_lora[" + std::to_string(i) + "]",
                    "expected an object {\"scope\", \"rank\", \"targets\", \"dropout\"}");
      }
      ScopedLora l;
      JsonFields f(item, origin, prefix);
      for (const Status& status : {f.read("scope", l.scope), f.read("rank", l.lora.rank), f.read("targets", l.lora.targets),
                                   f.read("dropout", l.lora.dropout), f.unknown_keys()}) {
        if (!status.is_ok()) return status;
      }
      s.scoped_lora.push_back(std::move(l));
    }
  }
  return Status::ok();
}

// settings.versions: {"package": "release"} for the packages whose release changes the price.
Status read_versions(JsonFields& r, std::string_view origin, RunSettings& s) {
  const nlohmann::json* versions = r.member("versions");
  if (versions == nullptr) return Status::ok();
  if (!versions->is_object()) return r.expected("versions", "an object {\"transformers\": \"4.44.2\", ...}", *versions);
  for (const auto& [name, release] : versions->items()) {
    if (!release.is_string()) {
      return fail(origin, "settings.versions." + name, "expected a release as a string, e.g. \"4.44.2\"");
    }
    if (Status status = add_version(name + "=" + release.get<std::string>(), origin, s.versions); !status.is_ok()) {
      return status;
    }
  }
  return Status::ok();
}

// The choices read as text first: attention and the checkpointing policy.
Status apply_text_choices(const std::string& attention, const std::string& checkpointing, std::string_view origin,
                          RunSettings& s) {
  if (const std::optional<models::AttentionImpl> parsed = parse_attention(attention)) {
    s.attention = *parsed;
  } else {
    return fail(origin, "settings.attention", "expected one of " + attention_names() + ", got \"" + attention + "\"");
  }
  if (checkpointing == "every") {
    s.checkpointing = CheckpointPolicy::kEveryBlock;
  } else if (checkpointing == "list") {
    s.checkpointing = CheckpointPolicy::kList;
  } else if (checkpointing != "none") {
    return fail(origin, "settings.checkpointing", "expected \"none\", \"every\" or \"list\", got \"" + checkpointing + "\"");
  }
  return Status::ok();
}

// settings.gpu_spec: the GPU of a --gpu-file the settings were made with; its id is settings.gpu.
Status read_gpu_spec(JsonFields& r, std::string_view origin, RunSettings& s) {
  const nlohmann::json* spec = r.member("gpu_spec");
  if (spec == nullptr) return Status::ok();
  Result<GpuSpec> gpu = gpu_from_json(*spec, origin, "settings.gpu_spec.");
  if (!gpu.is_ok()) return gpu.status();
  if (gpu.value().id != s.gpu) {
    return fail(origin, "settings.gpu",
                "expected \"" + gpu.value().id + "\", the id of settings.gpu_spec, got \"" + s.gpu + "\"");
  }
  s.gpu_spec = gpu.value();
  return Status::ok();
}

// The writers below mirror the readers above, group for group; nlohmann::json
// keeps keys sorted, so the order they are written in does not show.

// The model, the stack, precision, optimizer, training mode, attention.
void write_model_and_stack(const RunSettings& s, nlohmann::json& j) {
  j["model"] = s.model;
  j["stack"] = stack_name(s.stack);
  if (s.sharding) j["sharding"] = sharding_name(*s.sharding);
  if (s.reduce_dtype) j["reduce_dtype"] = reduce_dtype_name(*s.reduce_dtype);
  if (s.fsdp_wrap != FsdpWrap::kLayers) j["fsdp_wrap"] = fsdp_wrap_name(s.fsdp_wrap);
  if (!s.versions.empty()) j["versions"] = s.versions;
  j["compile"] = s.compile;
  if (s.float8 != Float8Recipe::kNone) j["float8"] = float8_recipe_name(s.float8);
  if (s.float8_all_gather) j["float8_all_gather"] = true;
  j["nf4_double_quant"] = s.nf4_double_quant;
  if (s.quant != QuantFormat::kNf4) {
    j["quant"] = quant_format_name(s.quant);
    j["gptq_group_size"] = s.gptq_group_size;
  }
  j["offload_checkpoint_inputs"] = s.offload_checkpoint_inputs;
  if (s.expandable_segments) j["expandable_segments"] = *s.expandable_segments;
  j["paged_optimizer"] = s.paged_optimizer;
  if (s.group_by_length) j["group_by_length"] = true;
  j["precision"] = precision_name(s.precision);
  j["optimizer"] = optimizer_name(s.optimizer);
  j["mode"] = mode_name(s.mode);
  j["freeze_patterns"] = s.freeze_patterns;
  j["train_patterns"] = s.train_patterns;
  j["quantize_skip"] = s.quantize_skip;
  j["fsdp_own_groups"] = s.fsdp_own_groups;
  j["lora_skip"] = s.lora_skip;
  j["attention"] = attention_name(s.attention);
  if (s.dropout) j["dropout"] = *s.dropout;
  j["precomputed_text_embeddings"] = s.precomputed_text_embeddings;
}

// settings.lora and settings.scoped_lora.
void write_lora(const RunSettings& s, nlohmann::json& j) {
  j["lora"] = {{"rank", s.lora.rank}, {"targets", s.lora.targets}, {"dropout", s.lora.dropout}};
  if (s.lora.dora) j["lora"]["dora"] = true;  // written only when on: plans without DoRA read as before
  if (!s.scoped_lora.empty()) {
    nlohmann::json scoped = nlohmann::json::array();
    for (const ScopedLora& l : s.scoped_lora) {
      scoped.push_back({{"scope", l.scope}, {"rank", l.lora.rank}, {"targets", l.lora.targets}, {"dropout", l.lora.dropout}});
    }
    j["scoped_lora"] = scoped;
  }
}

// Batch, sharding and offload, checkpointing, the GPU, budgets and what the search may change.
void write_run_and_budgets(const RunSettings& s, nlohmann::json& j) {
  j["micro_batch"] = s.micro_batch;
  j["seq_len"] = s.seq_len;
  j["resolution"] = s.resolution;
  j["grad_accum"] = s.grad_accum;
  j["global_batch"] = s.global_batch;
  j["gpus_per_node"] = s.gpus_per_node;
  if (s.shard_gpus > 0) j["shard_gpus"] = s.shard_gpus;
  j["nodes"] = s.nodes;
  j["zero_stage"] = s.zero_stage;
  j["offload_optimizer"] = offload_name(s.offload_optimizer);
  if (s.cpu_offload != CpuOffloadImpl::kZeroOffload) j["cpu_offload"] = cpu_offload_name(s.cpu_offload);
  j["offload_param"] = offload_name(s.offload_param);
  j["reduce_bucket_elements"] = s.reduce_bucket_elements;
  j["allgather_bucket_elements"] = s.allgather_bucket_elements;
  j["prefetch_bucket_elements"] = s.prefetch_bucket_elements;
  j["max_live_parameters"] = s.max_live_parameters;
  j["sub_group_elements"] = s.sub_group_elements;
  j["overlap_comm"] = s.overlap_comm;
  j["checkpointing"] = s.checkpointing == CheckpointPolicy::kNone         ? "none"
                       : s.checkpointing == CheckpointPolicy::kEveryBlock ? "every"
                                                                          : "list";
  j["checkpoint_blocks"] = s.checkpoint_blocks;
  j["offload_blocks"] = s.offload_blocks;
  j["gpu"] = s.gpu;
  if (s.gpu_spec) j["gpu_spec"] = gpu_to_json(*s.gpu_spec);
  if (s.gpu_memory_bytes) j["gpu_memory_bytes"] = *s.gpu_memory_bytes;
  if (s.cuda_context_bytes) j["cuda_context_bytes"] = *s.cuda_context_bytes;
  if (s.document_tokens) j["document_tokens"] = *s.document_tokens;
  if (s.shortest_sample) j["shortest_sample"] = *s.shortest_sample;
  if (s.text_tokens) j["text_tokens"] = *s.text_tokens;
  if (s.target_tokens) j["target_tokens"] = *s.target_tokens;
  if (s.completion_tokens) j["completion_tokens"] = *s.completion_tokens;
  if (s.num_generations != RunSettings{}.num_generations) j["num_generations"] = s.num_generations;
  if (s.steps_per_generation) j["steps_per_generation"] = *s.steps_per_generation;
  if (s.vllm_gpu_memory_utilization) j["vllm_gpu_memory_utilization"] = *s.vllm_gpu_memory_utilization;
  if (s.vllm_max_model_len) j["vllm_max_model_len"] = *s.vllm_max_model_len;
  if (!s.calibration_file.empty()) j["calibration_file"] = s.calibration_file;
  if (s.host_ram_bytes) j["host_ram_bytes"] = *s.host_ram_bytes;
  if (s.disk_free_bytes) j["disk_free_bytes"] = *s.disk_free_bytes;
  j["safety_margin"] = s.safety_margin;
  j["network_gbps"] = s.network_gbps;
  j["nvme_gbps"] = s.nvme_gbps;
  j["checkpoints_kept"] = s.checkpoints_kept;
  j["save_optimizer_state"] = s.save_optimizer_state;
  j["max_zero_stage"] = s.max_zero_stage;
  j["may_change"] = s.may_change;
  j["allow_cpu_offload"] = s.allow_cpu_offload;
  j["allow_nvme_offload"] = s.allow_nvme_offload;
  j["allow_activation_offload"] = s.allow_activation_offload;
  j["allow_micro_batch_change"] = s.allow_micro_batch_change;
}

}  // namespace

nlohmann::json settings_to_json(const RunSettings& s) {
  nlohmann::json j;
  write_model_and_stack(s, j);
  for (const MechanismRow& row : stack_mechanisms()) row.write(row, s, j);
  write_lora(s, j);
  write_run_and_budgets(s, j);
  return j;
}


Result<RunSettings> settings_from_json(const nlohmann::json& j, std::string_view origin) {
  if (!j.is_object()) return fail(origin, "settings", "expected a JSON object");
  RunSettings s;
  std::string attention = "sdpa";
  std::string checkpointing = "none";
  // Strict: no coercion, and a key no reader below reads is refused (JsonFields).
  JsonFields r(j, origin, "settings.");
  for (const Status& status : {read_model_and_stack(r, s, attention), read_stack_mechanisms(r, s), read_run_and_budgets(r, s, checkpointing),
                               read_generation(r, s), read_gpu_spec(r, origin, s),
                               read_lora(r, origin, s), read_scoped_lora(r, origin, s), read_versions(r, origin, s),
                               r.unknown_keys(),
                               apply_text_choices(attention, checkpointing, origin, s)}) {
    if (!status.is_ok()) return status;
  }
  const Status valid = validate_settings(s, origin);
  if (!valid.is_ok()) return valid;
  return s;
}

}  // namespace headroom::planner
