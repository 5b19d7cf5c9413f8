#include "planner/run_settings.h"

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace headroom::planner {
namespace {

template <typename E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [key, name] : table) {
    if (key == value) return name;
  }
  return "?";
}

template <typename E, size_t N>
std::optional<E> parse_of(const std::array<std::pair<E, std::string_view>, N>& table,
                          std::string_view text) {
  for (const auto& [key, name] : table) {
    if (name == text) return key;
  }
  return std::nullopt;
}

constexpr std::array<std::pair<Precision, std::string_view>, 4> kPrecisions = {{
    {Precision::kFp32, "fp32"},
    {Precision::kBf16Mixed, "bf16-mixed"},
    {Precision::kFp16Mixed, "fp16-mixed"},
    {Precision::kBf16Pure, "bf16"},
}};
constexpr std::array<std::pair<OptimizerKind, std::string_view>, 4> kOptimizers = {{
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kAdamW8bit, "adamw-8bit"},
    {OptimizerKind::kSgdMomentum, "sgd"},
    {OptimizerKind::kAdafactor, "adafactor"},
}};
constexpr std::array<std::pair<TrainMode, std::string_view>, 3> kModes = {{
    {TrainMode::kFull, "full"},
    {TrainMode::kLora, "lora"},
    {TrainMode::kQlora, "qlora"},
}};
constexpr std::array<std::pair<Offload, std::string_view>, 3> kOffloads = {{
    {Offload::kNone, "none"},
    {Offload::kCpu, "cpu"},
    {Offload::kNvme, "nvme"},
}};
constexpr std::array<std::pair<BlockChoice, std::string_view>, 3> kChoices = {{
    {BlockChoice::kKeep, "keep"},
    {BlockChoice::kCheckpoint, "checkpoint"},
    {BlockChoice::kOffload, "offload"},
}};

Status fail(std::string_view origin, std::string_view field, const std::string& what) {
  return Status::error(std::string(origin) + ": " + std::string(field) + ": " + what);
}

}  // namespace

std::string_view precision_name(Precision value) { return name_of(kPrecisions, value); }
std::string_view optimizer_name(OptimizerKind value) { return name_of(kOptimizers, value); }
std::string_view mode_name(TrainMode value) { return name_of(kModes, value); }
std::string_view offload_name(Offload value) { return name_of(kOffloads, value); }
std::string_view block_choice_name(BlockChoice value) { return name_of(kChoices, value); }
std::optional<Precision> parse_precision(std::string_view text) { return parse_of(kPrecisions, text); }
std::optional<OptimizerKind> parse_optimizer(std::string_view text) { return parse_of(kOptimizers, text); }
std::optional<TrainMode> parse_mode(std::string_view text) { return parse_of(kModes, text); }
std::optional<Offload> parse_offload(std::string_view text) { return parse_of(kOffloads, text); }

Status validate_settings(const RunSettings& s, std::string_view origin) {
  if (s.micro_batch < 1) return fail(origin, "micro_batch", "expected an integer >= 1, got " + std::to_string(s.micro_batch));
  if (s.seq_len < 0) return fail(origin, "seq_len", "expected an integer >= 1 (or 0 for the model default), got " + std::to_string(s.seq_len));
  if (s.resolution < 0) return fail(origin, "resolution", "expected pixels >= 1 (or 0 for the model default), got " + std::to_string(s.resolution));
  if (s.grad_accum < 1) return fail(origin, "grad_accum", "expected an integer >= 1, got " + std::to_string(s.grad_accum));
  if (s.gpus_per_node < 1 || s.gpus_per_node > 64) return fail(origin, "gpus_per_node", "expected 1..64, got " + std::to_string(s.gpus_per_node));
  if (s.nodes < 1 || s.nodes > 4096) return fail(origin, "nodes", "expected 1..4096, got " + std::to_string(s.nodes));
  if (s.global_batch < 0) return fail(origin, "global_batch", "expected an integer >= 1 (or 0 to derive it), got " + std::to_string(s.global_batch));
  if (s.global_batch > 0 && s.global_batch % s.world_size() != 0) {
    return fail(origin, "global_batch", "expected a multiple of the number of GPUs (" + std::to_string(s.world_size()) + "), got " + std::to_string(s.global_batch));
  }
  if (s.global_batch > 0 && s.global_batch != s.micro_batch * s.grad_accum * s.world_size() && s.grad_accum != 1) {
    return fail(origin, "global_batch", "expected micro_batch x grad_accum x GPUs = " +
                std::to_string(s.micro_batch * s.grad_accum * s.world_size()) + ", got " + std::to_string(s.global_batch) +
                " (give either the global batch or the accumulation steps)");
  }
  if (s.zero_stage < 0 || s.zero_stage > 3) return fail(origin, "zero_stage", "expected 0, 1, 2 or 3, got " + std::to_string(s.zero_stage));
  if (s.max_zero_stage < 0 || s.max_zero_stage > 3) return fail(origin, "max_zero_stage", "expected 0..3, got " + std::to_string(s.max_zero_stage));
  if (s.offload_param != Offload::kNone && s.zero_stage != 3) {
    return fail(origin, "offload_param", "parameter offload needs ZeRO stage 3 (DeepSpeed refuses it below), got stage " + std::to_string(s.zero_stage));
  }
  if (s.offload_optimizer == Offload::kNvme && s.zero_stage != 3) {
    return fail(origin, "offload_optimizer", "NVMe optimizer offload needs ZeRO stage 3 (ZeRO-Infinity), got stage " + std::to_string(s.zero_stage));
  }
  if (s.offload_optimizer == Offload::kCpu && s.zero_stage == 0) {
    return fail(origin, "offload_optimizer", "optimizer offload needs ZeRO stage 1, 2 or 3 (ZeRO-Offload), got stage 0");
  }
  if (s.lora.rank < 1 || s.lora.rank > 65536) return fail(origin, "lora.rank", "expected 1..65536, got " + std::to_string(s.lora.rank));
  if (s.lora.dropout < 0 || s.lora.dropout >= 1) return fail(origin, "lora.dropout", "expected a probability in [0, 1)");
  if (s.dropout && (*s.dropout < 0 || *s.dropout >= 1)) return fail(origin, "dropout", "expected a probability in [0, 1)");
  if (s.reduce_bucket_elements < 1 || s.allgather_bucket_elements < 1 || s.prefetch_bucket_elements < 1 || s.max_live_parameters < 1 ||
      s.sub_group_elements < 1) {
    return fail(origin, "bucket sizes", "expected positive element counts");
  }
  if (s.gpu_memory_bytes && *s.gpu_memory_bytes <= 0) return fail(origin, "gpu_mem", "expected a positive size");
  if (s.host_ram_bytes <= 0) return fail(origin, "host_ram", "expected a positive size");
  if (s.disk_free_bytes < 0) return fail(origin, "disk", "expected a size >= 0");
  if (!(s.safety_margin >= 0 && s.safety_margin < 0.5)) return fail(origin, "safety_margin", "expected a fraction in [0, 0.5)");
  if (!(s.network_gbps > 0) || !(s.nvme_gbps > 0)) return fail(origin, "network_gbps/nvme_gbps", "expected positive bandwidths");
  if (s.checkpoints_kept < 1 || s.checkpoints_kept > 1000) return fail(origin, "checkpoints_kept", "expected 1..1000");
  if (s.optimizer_impl == OptimizerImpl::kInBackward &&
      (s.grad_accum > 1 || s.zero_stage > 0 || s.offload_optimizer != Offload::kNone)) {
    // torchtune's recipes refuse the same (full_finetune_single_device.py: optimizer_in_bwd).
    return fail(origin, "optimizer_impl",
                "in-backward steps each gradient as it is produced: expected grad_accum 1, zero_stage 0 and no "
                "optimizer offload");
  }
  if (s.checkpointing == CheckpointPolicy::kList && s.checkpoint_blocks.empty()) {
    return fail(origin, "checkpoint_blocks", "expected at least one block name with a list checkpointing policy");
  }
  return Status::ok();
}

nlohmann::json settings_to_json(const RunSettings& s) {
  nlohmann::json j;
  j["model"] = s.model;
  j["stack"] = stack_name(s.stack);
  if (s.optimizer_impl) j["optimizer_impl"] = optimizer_impl_name(*s.optimizer_impl);
  if (s.loss) j["loss"] = loss_name(*s.loss);
  if (s.recompute) j["recompute"] = recompute_name(*s.recompute);
  if (s.adapter_dtype) j["adapter_dtype"] = adapter_dtype_name(*s.adapter_dtype);
  j["compile"] = s.compile;
  j["precision"] = precision_name(s.precision);
  j["optimizer"] = optimizer_name(s.optimizer);
  j["mode"] = mode_name(s.mode);
  j["freeze_patterns"] = s.freeze_patterns;
  j["train_patterns"] = s.train_patterns;
  j["quantize_skip"] = s.quantize_skip;
  j["lora_skip"] = s.lora_skip;
  j["lora"] = {{"rank", s.lora.rank}, {"targets", s.lora.targets}, {"dropout", s.lora.dropout}};
  j["attention"] = s.attention == models::AttentionImpl::kEager ? "eager" : "sdpa";
  if (s.dropout) j["dropout"] = *s.dropout;
  j["precomputed_text_embeddings"] = s.precomputed_text_embeddings;
  j["micro_batch"] = s.micro_batch;
  j["seq_len"] = s.seq_len;
  j["resolution"] = s.resolution;
  j["grad_accum"] = s.grad_accum;
  j["global_batch"] = s.global_batch;
  j["gpus_per_node"] = s.gpus_per_node;
  j["nodes"] = s.nodes;
  j["zero_stage"] = s.zero_stage;
  j["offload_optimizer"] = offload_name(s.offload_optimizer);
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
  j["gpu"] = s.gpu;
  if (s.gpu_memory_bytes) j["gpu_memory_bytes"] = *s.gpu_memory_bytes;
  if (s.cuda_context_bytes) j["cuda_context_bytes"] = *s.cuda_context_bytes;
  if (!s.calibration_file.empty()) j["calibration_file"] = s.calibration_file;
  j["host_ram_bytes"] = s.host_ram_bytes;
  j["disk_free_bytes"] = s.disk_free_bytes;
  j["safety_margin"] = s.safety_margin;
  j["network_gbps"] = s.network_gbps;
  j["nvme_gbps"] = s.nvme_gbps;
  j["checkpoints_kept"] = s.checkpoints_kept;
  j["save_optimizer_state"] = s.save_optimizer_state;
  j["max_zero_stage"] = s.max_zero_stage;
  j["allow_cpu_offload"] = s.allow_cpu_offload;
  j["allow_nvme_offload"] = s.allow_nvme_offload;
  j["allow_activation_offload"] = s.allow_activation_offload;
  j["allow_micro_batch_change"] = s.allow_micro_batch_change;
  return j;
}

namespace {

// Reads json[key] into `out` when present, with a typed message when it is not `T`.
template <typename T>
Status read_field(const nlohmann::json& j, const char* key, T& out, std::string_view origin,
                  const char* expected) {
  if (!j.contains(key)) return Status::ok();
  try {
    out = j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    return fail(origin, std::string("settings.") + key, std::string("expected ") + expected);
  }
  return Status::ok();
}

template <typename E, typename Parse>
Status read_enum(const nlohmann::json& j, const char* key, E& out, std::string_view origin,
                 Parse parse, const char* expected) {
  if (!j.contains(key)) return Status::ok();
  if (!j.at(key).is_string()) return fail(origin, std::string("settings.") + key, std::string("expected one of ") + expected);
  const auto parsed = parse(j.at(key).get<std::string>());
  if (!parsed) return fail(origin, std::string("settings.") + key, std::string("expected one of ") + expected + ", got \"" + j.at(key).get<std::string>() + "\"");
  out = *parsed;
  return Status::ok();
}

// As read_enum, for a setting that is absent (nullopt) unless the file gives it.
template <typename E, typename Parse>
Status read_optional_enum(const nlohmann::json& j, const char* key, std::optional<E>& out, std::string_view origin,
                          Parse parse, const char* expected) {
  if (!j.contains(key)) return Status::ok();
  E value{};
  if (Status status = read_enum(j, key, value, origin, parse, expected); !status.is_ok()) return status;
  out = value;
  return Status::ok();
}

}  // namespace

Result<RunSettings> settings_from_json(const nlohmann::json& j, std::string_view origin) {
  if (!j.is_object()) return fail(origin, "settings", "expected a JSON object");
  RunSettings s;
  std::string attention = "sdpa";
  std::string checkpointing = "none";
  double dropout = -1;
  int64_t gpu_memory = 0;
  int64_t context = 0;
  const Status statuses[] = {
      read_field(j, "model", s.model, origin, "a string"),
      read_enum(j, "stack", s.stack, origin, parse_stack, kStackNames),
      read_enum(j, "precision", s.precision, origin, parse_precision, "fp32, bf16-mixed, fp16-mixed, bf16"),
      read_enum(j, "optimizer", s.optimizer, origin, parse_optimizer, "adamw, adamw-8bit, sgd, adafactor"),
      read_enum(j, "mode", s.mode, origin, parse_mode, "full, lora, qlora"),
      read_field(j, "freeze_patterns", s.freeze_patterns, origin, "a list of strings"),
      read_field(j, "train_patterns", s.train_patterns, origin, "a list of strings"),
      read_field(j, "quantize_skip", s.quantize_skip, origin, "a list of strings"),
      read_field(j, "lora_skip", s.lora_skip, origin, "a list of strings"),
      read_field(j, "attention", attention, origin, "\"eager\" or \"sdpa\""),
      read_field(j, "dropout", dropout, origin, "a number"),
      read_field(j, "precomputed_text_embeddings", s.precomputed_text_embeddings, origin, "true or false"),
      read_field(j, "micro_batch", s.micro_batch, origin, "an integer"),
      read_field(j, "seq_len", s.seq_len, origin, "an integer"),
      read_field(j, "resolution", s.resolution, origin, "an integer"),
      read_field(j, "grad_accum", s.grad_accum, origin, "an integer"),
      read_field(j, "global_batch", s.global_batch, origin, "an integer"),
      read_field(j, "gpus_per_node", s.gpus_per_node, origin, "an integer"),
      read_field(j, "nodes", s.nodes, origin, "an integer"),
      read_field(j, "zero_stage", s.zero_stage, origin, "an integer"),
      read_enum(j, "offload_optimizer", s.offload_optimizer, origin, parse_offload, "none, cpu, nvme"),
      read_enum(j, "offload_param", s.offload_param, origin, parse_offload, "none, cpu, nvme"),
      read_field(j, "reduce_bucket_elements", s.reduce_bucket_elements, origin, "an integer"),
      read_field(j, "allgather_bucket_elements", s.allgather_bucket_elements, origin, "an integer"),
      read_field(j, "prefetch_bucket_elements", s.prefetch_bucket_elements, origin, "an integer"),
      read_field(j, "max_live_parameters", s.max_live_parameters, origin, "an integer"),
      read_field(j, "sub_group_elements", s.sub_group_elements, origin, "an integer"),
      read_field(j, "overlap_comm", s.overlap_comm, origin, "true or false"),
      read_field(j, "compile", s.compile, origin, "true or false"),
      read_field(j, "checkpointing", checkpointing, origin, "\"none\", \"every\" or \"list\""),
      read_field(j, "checkpoint_blocks", s.checkpoint_blocks, origin, "a list of block names"),
      read_field(j, "gpu", s.gpu, origin, "a GPU id"),
      read_field(j, "calibration_file", s.calibration_file, origin, "a file path"),
      read_field(j, "gpu_memory_bytes", gpu_memory, origin, "an integer"),
      read_field(j, "cuda_context_bytes", context, origin, "an integer"),
      read_field(j, "host_ram_bytes", s.host_ram_bytes, origin, "an integer"),
      read_field(j, "disk_free_bytes", s.disk_free_bytes, origin, "an integer"),
      read_field(j, "safety_margin", s.safety_margin, origin, "a number"),
      read_field(j, "network_gbps", s.network_gbps, origin, "a number"),
      read_field(j, "nvme_gbps", s.nvme_gbps, origin, "a number"),
      read_field(j, "checkpoints_kept", s.checkpoints_kept, origin, "an integer"),
      read_field(j, "save_optimizer_state", s.save_optimizer_state, origin, "true or false"),
      read_field(j, "max_zero_stage", s.max_zero_stage, origin, "an integer"),
      read_field(j, "allow_cpu_offload", s.allow_cpu_offload, origin, "true or false"),
      read_field(j, "allow_nvme_offload", s.allow_nvme_offload, origin, "true or false"),
      read_field(j, "allow_activation_offload", s.allow_activation_offload, origin, "true or false"),
      read_field(j, "allow_micro_batch_change", s.allow_micro_batch_change, origin, "true or false"),
  };
  for (const Status& status : statuses) {
    if (!status.is_ok()) return status;
  }
  if (j.contains("lora")) {
    const auto& lora = j.at("lora");
    if (!lora.is_object()) return fail(origin, "settings.lora", "expected an object");
    for (const Status& status : {read_field(lora, "rank", s.lora.rank, origin, "an integer"),
                                 read_field(lora, "targets", s.lora.targets, origin, "a list of strings"),
                                 read_field(lora, "dropout", s.lora.dropout, origin, "a number")}) {
      if (!status.is_ok()) return status;
    }
  }
  if (attention == "eager") {
    s.attention = models::AttentionImpl::kEager;
  } else if (attention != "sdpa") {
    return fail(origin, "settings.attention", "expected \"eager\" or \"sdpa\", got \"" + attention + "\"");
  }
  if (checkpointing == "every") {
    s.checkpointing = CheckpointPolicy::kEveryBlock;
  } else if (checkpointing == "list") {
    s.checkpointing = CheckpointPolicy::kList;
  } else if (checkpointing != "none") {
    return fail(origin, "settings.checkpointing", "expected \"none\", \"every\" or \"list\", got \"" + checkpointing + "\"");
  }
  for (const Status& status :
       {read_optional_enum(j, "optimizer_impl", s.optimizer_impl, origin, parse_optimizer_impl, kOptimizerImplNames),
        read_optional_enum(j, "loss", s.loss, origin, parse_loss, kLossNames),
        read_optional_enum(j, "recompute", s.recompute, origin, parse_recompute, kRecomputeNames),
        read_optional_enum(j, "adapter_dtype", s.adapter_dtype, origin, parse_adapter_dtype, kAdapterDtypeNames)}) {
    if (!status.is_ok()) return status;
  }
  if (j.contains("dropout")) s.dropout = dropout;
  if (j.contains("gpu_memory_bytes")) s.gpu_memory_bytes = gpu_memory;
  if (j.contains("cuda_context_bytes")) s.cuda_context_bytes = context;
  const Status valid = validate_settings(s, origin);
  if (!valid.is_ok()) return valid;
  return s;
}

}  // namespace headroom::planner
