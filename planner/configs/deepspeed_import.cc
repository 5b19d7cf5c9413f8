#include "planner/configs/deepspeed_import.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "planner/configs/config_import.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// Largest config file read; real ones are a few kB.
constexpr int64_t kMaxFileBytes = int64_t{16} << 20;

// DeepSpeed's defaults for absent keys (deepspeed/runtime/zero/config.py).
constexpr int64_t kDefaultBucketElements =
    500'000'000;  // reduce_bucket_size, allgather_bucket_size
constexpr int64_t kDefaultPrefetchElements = 50'000'000;  // stage3_prefetch_bucket_size
constexpr int64_t kDefaultMaxLive = 1'000'000'000;        // stage3_max_live_parameters
constexpr int64_t kDefaultSubGroup = 1'000'000'000;       // sub_group_size (runtime/zero/config.py)

// The keys DeepSpeed's pydantic models accept (extra="forbid" in
// deepspeed/runtime/config_utils.py), field names and aliases, from
// deepspeed/runtime/zero/config.py (DeepSpeed 0.16).
constexpr std::array<std::string_view, 47> kZeroKeys = {
    "stage",
    "contiguous_gradients",
    "reduce_scatter",
    "reduce_bucket_size",
    "use_multi_rank_bucket_allreduce",
    "allgather_partitions",
    "allgather_bucket_size",
    "overlap_comm",
    "load_from_fp32_weights",
    "elastic_checkpoint",
    "offload_param",
    "offload_optimizer",
    "sub_group_size",
    "cpu_offload_param",
    "cpu_offload_use_pin_memory",
    "cpu_offload",
    "prefetch_bucket_size",
    "stage3_prefetch_bucket_size",
    "param_persistence_threshold",
    "stage3_param_persistence_threshold",
    "model_persistence_threshold",
    "stage3_model_persistence_threshold",
    "max_live_parameters",
    "stage3_max_live_parameters",
    "max_reuse_distance",
    "stage3_max_reuse_distance",
    "gather_16bit_weights_on_model_save",
    "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save",
    "module_granularity_threshold",
    "stage3_module_granularity_threshold",
    "use_all_reduce_for_fetch_params",
    "stage3_use_all_reduce_for_fetch_params",
    "ignore_unused_parameters",
    "legacy_stage1",
    "round_robin_gradients",
    "zero_hpz_partition_size",
    "zero_quantized_weights",
    "zero_quantized_nontrainable_weights",
    "zero_quantized_gradients",
    "zeropp_loco_param",
    "mics_shard_size",
    "mics_hierarchical_params_gather",
    "memory_efficient_linear",
    "pipeline_loading_checkpoint",
    "override_module_apply",
    "log_trace_cache_warnings",
};
constexpr std::array<std::string_view, 6> kOffloadParamKeys = {
    "device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"};
constexpr std::array<std::string_view, 8> kOffloadOptimizerKeys = {
    "device",        "nvme_path",      "buffer_count", "pin_memory",
    "pipeline_read", "pipeline_write", "fast_init",    "ratio"};

Status fail(std::string_view origin, const std::string& path, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": " + path + ": " + what);
}

bool is_auto(const json& value) { return value.is_string() && value.get<std::string>() == "auto"; }

std::string shown(const json& value) { return json_excerpt(value, 60); }

// A key's state: absent, "auto", or a value.
template <typename T>
struct Field {
  enum class Kind { kAbsent, kAuto, kValue } kind = Kind::kAbsent;
  T value{};
  bool given() const { return kind == Kind::kValue; }
  T or_else(T fallback) const { return given() ? value : fallback; }
};

// Context of one import: the origin for messages and the first error.
class Reader {
 public:
  explicit Reader(std::string_view origin) : origin_(origin) {}
  bool ok() const { return status_.is_ok(); }
  const Status& status() const { return status_; }
  void error(const std::string& path, const std::string& what) {
    if (status_.is_ok()) status_ = fail(origin_, path, what);
  }

  // A non-negative element or sample count >= min; integral floats (5e8) are accepted.
  Field<int64_t> count(const json& parent, std::string_view key, const std::string& path,
                       int64_t min) {
    Field<int64_t> field;
    const auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return field;
    if (is_auto(*it)) {
      field.kind = Field<int64_t>::Kind::kAuto;
      return field;
    }
    const std::string expected =
        "expected an integer >= " + std::to_string(min) + " (or \"auto\"), got ";
    if (it->is_number_integer()) {
      if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        error(path, expected + shown(*it));
        return field;
      }
      field.value = it->get<int64_t>();
    } else if (it->is_number_float()) {
      const double d = it->get<double>();
      // 9.2e18 keeps the conversion inside int64.
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.2e18) {
        error(path, expected + shown(*it) + " (a whole number such as 5e8)");
        return field;
      }
      field.value = static_cast<int64_t>(d);
    } else {
      error(path, expected + shown(*it));
      return field;
    }
    if (field.value < min) {
      error(path, expected + shown(*it));
      return field;
    }
    field.kind = Field<int64_t>::Kind::kValue;
    return field;
  }

  Field<bool> flag(const json& parent, std::string_view key, const std::string& path) {
    Field<bool> field;
    const auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return field;
    if (is_auto(*it)) {
      field.kind = Field<bool>::Kind::kAuto;
    } else if (it->is_boolean()) {
      field.kind = Field<bool>::Kind::kValue;
      field.value = it->get<bool>();
    } else {
      error(path, "expected true, false or \"auto\", got " + shown(*it));
    }
    return field;
  }

  // An object member (absent, null or "auto" -> nullptr); anything else is an error.
  const json* object(const json& parent, std::string_view key, const std::string& path) {
    const auto it = parent.find(key);
    if (it == parent.end() || it->is_null() || is_auto(*it)) return nullptr;
    if (!it->is_object()) {
      error(path, "expected an object, got " + shown(*it));
      return nullptr;
    }
    return &*it;
  }

  template <size_t N>
  void known_keys(const json& object, const std::array<std::string_view, N>& keys,
                  const std::string& path) {
    for (const auto& [key, value] : object.items()) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        error(path + "." + key, "unknown key (DeepSpeed rejects unknown keys here; a typo?)");
      }
    }
  }

 private:
  std::string_view origin_;
  Status status_;
};

// offload_*.device: none, cpu or nvme ("auto" and absent keep `current`).
Offload read_device(Reader& reader, const json& zero, std::string_view key, Offload current) {
  const std::string path = "zero_optimization." + std::string(key);
  const json* block = reader.object(zero, key, path);
  if (block == nullptr)
    return zero.contains(key) && is_auto(zero.at(key)) ? current : Offload::kNone;
  if (key == "offload_param") reader.known_keys(*block, kOffloadParamKeys, path);
  if (key == "offload_optimizer") reader.known_keys(*block, kOffloadOptimizerKeys, path);
  const auto it = block->find("device");
  if (it == block->end() || it->is_null())
    return Offload::kNone;  // DeepSpeed's default device is "none"
  if (is_auto(*it)) return current;
  const std::optional<Offload> device =
      it->is_string() ? parse_offload(it->get<std::string>()) : std::nullopt;
  if (!device)
    reader.error(path + ".device", "expected \"none\", \"cpu\" or \"nvme\", got " + shown(*it));
  return device.value_or(Offload::kNone);
}

void read_zero(Reader& reader, const json& ds, RunSettings& s) {
  const auto it = ds.find("zero_optimization");
  if (it == ds.end() || it->is_null()) {
    s.zero_stage = 0;
    s.offload_optimizer = s.offload_param = Offload::kNone;
    return;
  }
  if (it->is_boolean()) {  // the deprecated form: true means stage 1
    s.zero_stage = it->get<bool>() ? 1 : 0;
    s.offload_optimizer = s.offload_param = Offload::kNone;
    return;
  }
  if (is_auto(*it)) return;
  const json* zero = reader.object(ds, "zero_optimization", "zero_optimization");
  if (zero == nullptr) return;
  reader.known_keys(*zero, kZeroKeys, "zero_optimization");

  const Field<int64_t> stage = reader.count(*zero, "stage", "zero_optimization.stage", 0);
  if (stage.given() && stage.value > 3) {
    reader.error("zero_optimization.stage",
                 "expected 0, 1, 2 or 3, got " + std::to_string(stage.value));
  }
  s.zero_stage =
      stage.kind == Field<int64_t>::Kind::kAuto ? s.zero_stage : static_cast<int>(stage.or_else(0));
  s.offload_optimizer = read_device(reader, *zero, "offload_optimizer", s.offload_optimizer);
  s.offload_param = read_device(reader, *zero, "offload_param", s.offload_param);

  // Each bucket: "auto" keeps base, absent takes DeepSpeed's default. The
  // field name (max_live_parameters) is accepted like its stage3_ alias.
  const auto bucket = [&](std::string_view key, std::string_view alias, int64_t current,
                          int64_t fallback) {
    std::string_view used = zero->contains(alias) && !zero->contains(key) ? alias : key;
    const Field<int64_t> f = reader.count(*zero, used, "zero_optimization." + std::string(used), 1);
    return f.kind == Field<int64_t>::Kind::kAuto ? current : f.or_else(fallback);
  };
  s.reduce_bucket_elements = bucket("reduce_bucket_size", "reduce_bucket_size",
                                    s.reduce_bucket_elements, kDefaultBucketElements);
  s.allgather_bucket_elements = bucket("allgather_bucket_size", "allgather_bucket_size",
                                       s.allgather_bucket_elements, kDefaultBucketElements);
  s.prefetch_bucket_elements = bucket("stage3_prefetch_bucket_size", "prefetch_bucket_size",
                                      s.prefetch_bucket_elements, kDefaultPrefetchElements);
  s.max_live_parameters = bucket("stage3_max_live_parameters", "max_live_parameters",
                                 s.max_live_parameters, kDefaultMaxLive);
  s.sub_group_elements = bucket("sub_group_size", "sub_group_size", s.sub_group_elements, kDefaultSubGroup);
  // DeepSpeed's default: overlap_comm on for stage 3 only (overlap_comm_valid).
  const Field<bool> overlap = reader.flag(*zero, "overlap_comm", "zero_optimization.overlap_comm");
  s.overlap_comm = overlap.kind == Field<bool>::Kind::kAuto ? s.overlap_comm
                                                            : overlap.or_else(s.zero_stage == 3);
}

// bf16 (alias bfloat16) and fp16. Neither enabled means fp32 training, as in DeepSpeed.
void read_precision(Reader& reader, const json& ds, RunSettings& s) {
  const auto enabled = [&](std::string_view key) {
    const json* block = reader.object(ds, key, std::string(key));
    if (block == nullptr) {
      Field<bool> f;
      if (ds.contains(key) && is_auto(ds.at(key))) f.kind = Field<bool>::Kind::kAuto;
      return f;
    }
    return reader.flag(*block, "enabled", std::string(key) + ".enabled");
  };
  const Field<bool> bf16 = ds.contains("bf16") ? enabled("bf16") : enabled("bfloat16");
  const Field<bool> fp16 = enabled("fp16");
  if (!reader.ok()) return;
  const bool bf16_on = bf16.given() && bf16.value;
  const bool fp16_on = fp16.given() && fp16.value;
  if (bf16_on && fp16_on) {
    reader.error("bf16.enabled",
                 "expected at most one of bf16.enabled and fp16.enabled to be true, got both");
    return;
  }
  const bool any_auto =
      bf16.kind == Field<bool>::Kind::kAuto || fp16.kind == Field<bool>::Kind::kAuto;
  if (bf16_on) {
    s.precision = Precision::kBf16Mixed;  // DeepSpeed's bf16 keeps fp32 master weights
  } else if (fp16_on) {
    s.precision = Precision::kFp16Mixed;
  } else if (!any_auto) {
    s.precision = Precision::kFp32;
  }
}

// optimizer.type: the Adam family maps to adamw (same states); others keep base.
void read_optimizer(Reader& reader, const json& ds, RunSettings& s) {
  const json* optimizer = reader.object(ds, "optimizer", "optimizer");
  if (optimizer == nullptr) return;
  const auto it = optimizer->find("type");
  if (it == optimizer->end() || is_auto(*it)) return;
  if (!it->is_string()) {
    reader.error("optimizer.type", "expected a string such as \"AdamW\", got " + shown(*it));
    return;
  }
  std::string type = it->get<std::string>();
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (type == "adam" || type == "adamw" || type == "fusedadam" || type == "cpuadam") {
    s.optimizer = OptimizerKind::kAdamW;
  }
}

// The batch keys, resolved the way DeepSpeed's _set_batch_related_parameters
// does, then checked like its _batch_assertion. "auto" micro-batch and
// accumulation take base's values; "auto" train_batch_size is derived.
void read_batch(Reader& reader, const json& ds, RunSettings& s) {
  const Field<int64_t> tb = reader.count(ds, "train_batch_size", "train_batch_size", 1);
  Field<int64_t> mb =
      reader.count(ds, "train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu", 1);
  Field<int64_t> ga =
      reader.count(ds, "gradient_accumulation_steps", "gradient_accumulation_steps", 1);
  if (!reader.ok()) return;
  using Kind = Field<int64_t>::Kind;
  if (mb.kind == Kind::kAuto) mb = {Kind::kValue, s.micro_batch};
  if (ga.kind == Kind::kAuto) ga = {Kind::kValue, s.grad_accum};
  // Neither batch key given: DeepSpeed would refuse; keep the base's batch.
  if (!tb.given() && !mb.given()) {
    mb = {Kind::kValue, s.micro_batch};
    if (!ga.given()) ga = {Kind::kValue, s.grad_accum};
  }
  const int64_t world = s.world_size();
  if (world < 1) {
    reader.error("train_batch_size",
                 "expected at least one GPU in the settings, got " + std::to_string(world));
    return;
  }
  int64_t micro = mb.value;
  int64_t accum = ga.or_else(1);
  if (tb.given() && !mb.given()) {
    micro = tb.value / world / accum;
  } else if (tb.given() && !ga.given()) {
    accum = tb.value / micro / world;
  }
  if (tb.given() && (micro < 1 || accum < 1 || tb.value != micro * accum * world)) {
    reader.error("train_batch_size",
                 "expected train_micro_batch_size_per_gpu x gradient_accumulation_steps x GPUs = " +
                     std::to_string(micro) + " x " + std::to_string(accum) + " x " +
                     std::to_string(world) + " = " + std::to_string(micro * accum * world) +
                     ", got " + std::to_string(tb.value) +
                     " (DeepSpeed refuses this; GPUs = gpus_per_node x nodes of the settings)");
    return;
  }
  s.micro_batch = micro;
  s.grad_accum = accum;
  s.global_batch = 0;  // derived: micro x accumulation x GPUs
}

// DeepSpeed's stage rules for offload (docs of offload_param and
// offload_optimizer in deepspeed/runtime/zero/offload_config.py and
// ZeRO-Infinity), with the key path of the config.
void check_offload_stage(Reader& reader, const RunSettings& s) {
  if (!reader.ok()) return;
  const std::string stage = "got stage " + std::to_string(s.zero_stage);
  if (s.offload_param != Offload::kNone && s.zero_stage != 3) {
    reader.error("zero_optimization.offload_param.device",
                 "parameter offload needs zero_optimization.stage 3, " + stage);
  } else if (s.offload_optimizer == Offload::kNvme && s.zero_stage != 3) {
    reader.error(
        "zero_optimization.offload_optimizer.device",
        "NVMe optimizer offload (ZeRO-Infinity) needs zero_optimization.stage 3, " + stage);
  } else if (s.offload_optimizer != Offload::kNone && s.zero_stage == 0) {
    reader.error("zero_optimization.offload_optimizer.device",
                 "optimizer offload needs zero_optimization.stage 1, 2 or 3, " + stage);
  }
}

}  // namespace

Result<RunSettings> apply_deepspeed_config(const json& ds, RunSettings base,
                                           std::string_view origin) {
  if (!ds.is_object())
    return fail(origin, "(top level)", "expected a JSON object, got " + shown(ds));
  Reader reader(origin);
  read_zero(reader, ds, base);
  read_precision(reader, ds, base);
  read_optimizer(reader, ds, base);
  read_batch(reader, ds, base);
  check_offload_stage(reader, base);
  if (!reader.ok()) return reader.status();
  if (Status status = validate_settings(base, origin); !status.is_ok()) return status;
  return base;
}

Result<RunSettings> load_deepspeed_config(const std::string& path, RunSettings base) {
  // An inline object, as the Trainer's `deepspeed` argument also takes one
  // (transformers' HfDeepSpeedConfig reads a dict or JSON text as well as a path).
  const size_t first = path.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && path[first] == '{') {
    if (path.size() > kMaxFileBytes) return Status::invalid_input("--deepspeed: the inline config is too large");
    Result<json> inline_ds = graph::parse_json_text(path, "--deepspeed (inline)");
    if (!inline_ds.is_ok()) return inline_ds.status();
    return apply_deepspeed_config(inline_ds.value(), std::move(base), "--deepspeed (inline)");
  }
  // The reader every JSON input shares: a regular file only (a FIFO would block),
  // a size limit, a depth limit, duplicate keys refused (as DeepSpeed's
  // dict_raise_error_on_duplicate_keys does), numbers a double can hold.
  Result<std::string> text = graph::read_file(path, kMaxFileBytes);
  if (!text.is_ok()) return text.status();
  Result<json> ds = graph::parse_json_text(text.value(), path);
  if (!ds.is_ok()) return ds.status();
  return apply_deepspeed_config(ds.value(), std::move(base), path);
}

}  // namespace headroom::planner
