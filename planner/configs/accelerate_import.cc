#include "planner/configs/accelerate_import.h"

#include <string>

#include "graph/atomic_file.h"
#include "planner/configs/deepspeed_import.h"
#include "planner/configs/yaml_config.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// fsdp_sharding_strategy by name, or by the number older Accelerate versions
// wrote (accelerate/utils/constants.py FSDP_SHARDING_STRATEGY: 1 FULL_SHARD,
// 2 SHARD_GRAD_OP, 3 NO_SHARD, 4 HYBRID_SHARD, 5 HYBRID_SHARD_ZERO2).
void read_sharding_strategy(YamlReader& r, RunSettings& s, ConfigImport& out) {
  std::string strategy = r.string_or("fsdp_config.fsdp_sharding_strategy", "FULL_SHARD");
  const char* numbers[] = {"", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  if (strategy.size() == 1 && strategy[0] >= '1' && strategy[0] <= '5') strategy = numbers[strategy[0] - '0'];
  if (strategy == "FULL_SHARD") {
    s.zero_stage = 3;
  } else if (strategy == "SHARD_GRAD_OP") {
    s.zero_stage = 2;
  } else if (strategy == "NO_SHARD") {
    s.zero_stage = 0;
  } else if (strategy == "HYBRID_SHARD" || strategy == "HYBRID_SHARD_ZERO2") {
    s.zero_stage = strategy == "HYBRID_SHARD" ? 3 : 2;
    out.shard_within_node = true;
  } else {
    r.fail("fsdp_config.fsdp_sharding_strategy",
           "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1 to 5)",
           r.at("fsdp_config.fsdp_sharding_strategy"));
  }
}

// The wrap policy: TRANSFORMER_BASED_WRAP is a unit per layer; NO_WRAP, also
// what a config without the key gets (utils/launch.py sets FSDP_AUTO_WRAP_POLICY
// only when given; FullyShardedDataParallelPlugin.__post_init__ defaults it to
// NO_WRAP), leaves FSDP1 one FlatParameter for the whole model.
void read_wrap_policy(YamlReader& r, RunSettings& s, ConfigImport& out, int64_t version) {
  const bool given_wrap = r.has("fsdp_config.fsdp_auto_wrap_policy");
  const std::string wrap = r.string_or("fsdp_config.fsdp_auto_wrap_policy", "NO_WRAP");
  if (wrap == "NO_WRAP") {
    if (version == 2 && given_wrap) {
      r.fail("fsdp_config.fsdp_auto_wrap_policy",
             "TRANSFORMER_BASED_WRAP with FSDP2 (fully_shard on the root alone is not modelled)", wrap);
    } else if (version == 2) {
      out.notes.push_back("no fsdp_auto_wrap_policy: Accelerate's default is NO_WRAP, fully_shard on the root "
                          "alone, which is not modelled for FSDP2; priced as one unit a layer (give "
                          "fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP)");
    }
    if (version == 1 && s.zero_stage == 3) {
      s.fsdp_wrap = FsdpWrap::kModel;
      if (!given_wrap) {
        out.notes.push_back("no fsdp_auto_wrap_policy: Accelerate's default is NO_WRAP, so FSDP1 wraps the whole "
                            "model as one unit, gathered for the whole step");
      }
    }
  } else if (wrap == "SIZE_BASED_WRAP") {
    out.notes.push_back("fsdp_auto_wrap_policy SIZE_BASED_WRAP: priced as one unit a layer (the units of a size "
                        "policy follow fsdp_min_num_params over the module tree, which is not modelled)");
  } else if (wrap != "TRANSFORMER_BASED_WRAP") {
    r.fail("fsdp_config.fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP", wrap);
  }
}

// The FSDP plugin: strategy, version, offload, wrap policy and checkpointing.
void read_fsdp(YamlReader& r, RunSettings& s, ConfigImport& out) {
  read_sharding_strategy(r, s, out);
  // Which FSDP: fsdp_version, 1 when absent (accelerate/utils/dataclasses.py,
  // FullyShardedDataParallelPlugin: FSDP_VERSION, default "1", at Accelerate 1.15).
  const int64_t version = r.count_or("fsdp_config.fsdp_version", 1);
  if (version != 1 && version != 2) r.fail("fsdp_config.fsdp_version", "1 or 2", r.at("fsdp_config.fsdp_version"));
  s.sharding = version == 2 ? Sharding::kFsdp2 : Sharding::kFsdp1;
  // FSDP2 has no sharding strategy: reshard_after_forward says it.
  if (version == 2 && r.has("fsdp_config.fsdp_reshard_after_forward")) {
    s.zero_stage = r.boolean_or("fsdp_config.fsdp_reshard_after_forward", true) ? 3 : 2;
  }
  // fsdp_offload_params: FSDP1's CPUOffload(offload_params=True) or FSDP2's
  // CPUOffloadPolicy (FullyShardedDataParallelPlugin.set_cpu_offload).
  if (r.boolean_or("fsdp_config.fsdp_offload_params", false)) {
    if (s.zero_stage != 3) r.fail("fsdp_config.fsdp_offload_params", "false unless parameters are fully sharded");
    s.offload_param = Offload::kCpu;
    s.offload_optimizer = Offload::kCpu;
  }
  read_wrap_policy(r, s, out, version);
  // Accelerate accumulates under no_sync by default (accelerator.py accumulate, sync_each_batch False),
  // as the Trainer does: the stack's value unless one was given.
  if (!s.fsdp_no_sync) s.fsdp_no_sync = true;
  if (r.boolean_or("fsdp_config.fsdp_activation_checkpointing", false)) s.checkpointing = CheckpointPolicy::kEveryBlock;
  out.notes.push_back(std::string(version == 2 ? "FSDP2" : "FSDP1") + " at ZeRO stage " + std::to_string(s.zero_stage) +
                      (s.zero_stage == 3 ? "" : " (priced as DeepSpeed's: only full sharding has an FSDP model of its own)"));
}

// The DeepSpeed plugin: its own file, or the keys `accelerate config` asks for.
void read_deepspeed(YamlReader& r, RunSettings& s, ConfigImport& out) {
  if (r.has("deepspeed_config.deepspeed_config_file")) {
    const std::string file = r.string_or("deepspeed_config.deepspeed_config_file", "");
    out.files_read.push_back({"deepspeed_config.deepspeed_config_file", file});
    Result<RunSettings> with_file = load_deepspeed_config(file, s);
    if (!with_file.is_ok()) return r.fail("deepspeed_config.deepspeed_config_file", "a DeepSpeed config DeepSpeed accepts (" + with_file.message() + ")");
    s = with_file.value();
    return;
  }
  // A missing stage is 2, `accelerate config`'s default (docs/source/usage_guides/deepspeed.md).
  const double stage = r.number_or("deepspeed_config.zero_stage", 2);
  if (stage == 0 || stage == 1 || stage == 2 || stage == 3) {
    s.zero_stage = static_cast<int>(stage);
  } else {
    r.fail("deepspeed_config.zero_stage", "0, 1, 2 or 3", r.at("deepspeed_config.zero_stage"));
  }
  for (const auto& [key, field] : {std::pair{"deepspeed_config.offload_optimizer_device", &s.offload_optimizer},
                                   std::pair{"deepspeed_config.offload_param_device", &s.offload_param}}) {
    const std::string device = r.string_or(key, "none");
    if (device == "none") {
      *field = Offload::kNone;
    } else if (device == "cpu") {
      *field = Offload::kCpu;
    } else if (device == "nvme") {
      *field = Offload::kNvme;
    } else {
      r.fail(key, "none, cpu or nvme", r.at(key));
    }
  }
  if (r.has("deepspeed_config.gradient_accumulation_steps")) {
    s.grad_accum = r.count_or("deepspeed_config.gradient_accumulation_steps", s.grad_accum);
  }
  r.at("deepspeed_config.zero3_init_flag");        // how weights are created: the same bytes once trained
  r.at("deepspeed_config.zero3_save_16bit_model");  // what is saved: --keep-checkpoints and the export say
}

}  // namespace

Result<ConfigImport> import_accelerate_config(std::string_view text, std::string_view origin, RunSettings base) {
  Result<nlohmann::json> root = parse_yaml_config(text, origin, "an Accelerate config");
  if (!root.is_ok()) return root.status();
  {
    YamlReader r(root.value(), origin);
    ConfigImport out;
    RunSettings& s = out.settings;
    s = std::move(base);
    if (r.boolean_or("use_cpu", false)) r.fail("use_cpu", "false (headroom answers for a GPU run)");
    const int64_t machines = r.count_or("num_machines", 1);
    const int64_t processes = r.count_or("num_processes", 1);
    if (processes % machines != 0) {
      r.fail("num_processes", "a multiple of num_machines (" + std::to_string(machines) + ")", r.at("num_processes"));
    } else if (processes / machines > kMaxGpusPerNode || machines > kMaxNodes) {
      r.fail("num_processes", "at most " + std::to_string(kMaxGpusPerNode) + " GPUs per machine", r.at("num_processes"));
    } else {
      s.nodes = static_cast<int>(machines);
      s.gpus_per_node = static_cast<int>(processes / machines);
    }
    // `accelerate config` writes 'no' quoted; unquoted, YAML 1.1 reads it as false.
    const std::string precision =
        r.at("mixed_precision") == nlohmann::json(false) ? "no" : r.string_or("mixed_precision", "no");
    if (precision == "bf16") {
      s.precision = s.precision == Precision::kBf16Pure ? Precision::kBf16Pure : Precision::kBf16Amp;
      out.notes.push_back("mixed_precision bf16: autocast over the model as loaded, priced for an fp32 load; give "
                          "--precision bf16 for a model loaded in bf16");
    } else if (precision == "fp16") {
      s.precision = Precision::kFp16Amp;
    } else if (precision == "no") {
      s.precision = Precision::kFp32;
    } else {
      r.fail("mixed_precision", "no, fp16 or bf16 (fp8 training is not modelled)", r.at("mixed_precision"));
    }
    const std::string type = r.string_or("distributed_type", "NO");
    if (type == "FSDP") {
      read_fsdp(r, s, out);
    } else if (type == "DEEPSPEED") {
      read_deepspeed(r, s, out);
    } else if (type == "NO" || type == "MULTI_GPU") {
      s.zero_stage = 0;  // one process, or DistributedDataParallel: every GPU holds everything
    } else {
      r.fail("distributed_type", "NO, MULTI_GPU, FSDP or DEEPSPEED", r.at("distributed_type"));
    }
    if (!r.status().is_ok()) return r.status();
  // What the file says must hold together on its own (DeepSpeed refuses NVMe optimizer
  // offload below ZeRO-3, torchtune in-backward with accumulation, ...).
  if (Status valid = validate_settings(out.settings, origin); !valid.is_ok()) return valid;
    out.ignored = r.unread();
    return out;
  }
}

Result<ConfigImport> load_accelerate_config(const std::string& path, RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_accelerate_config(text.value(), path, std::move(base));
}

}  // namespace headroom::planner
