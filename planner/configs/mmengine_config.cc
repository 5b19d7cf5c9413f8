#include "planner/configs/mmengine_config.h"

#include <algorithm>
#include <vector>

namespace headroom::planner {

using nlohmann::json;

const json* MmengineReader::at(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Status MmengineReader::fail(const std::string& path, const std::string& expected, const json& got) const {
  return config_field_error(origin_, path, expected, got);
}

void MmengineReader::rest(const json& obj, const std::string& path, std::initializer_list<const char*> read) {
  if (!obj.is_object()) return;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    if (std::none_of(read.begin(), read.end(), [&](const char* k) { return key == k; })) {
      out_.ignored.push_back(path.empty() ? key : path + "." + key);
    }
  }
}

std::optional<std::string> import_name(const json* value) {
  if (value == nullptr) return std::nullopt;
  if (value->is_string()) return value->get<std::string>();
  if (value->is_object() && value->contains("import") && value->at("import").is_string()) {
    return value->at("import").get<std::string>();
  }
  return std::nullopt;
}

std::string last_name(const std::string& dotted) {
  const size_t dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

bool is_true(const json* value) { return value != nullptr && *value == json(true); }

Result<const json*> mmengine_config_of(const json& dump, std::string_view origin) {
  if (!dump.is_object() || dump.value("format", "") != "headroom.mmengine-config" || !dump.contains("config") ||
      !dump.at("config").is_object()) {
    return config_field_error(
        origin, "format", "the JSON scripts/exporter/read_mmengine_config.py prints (format headroom.mmengine-config)",
        dump.is_object() ? dump.value("format", json()) : dump);
  }
  return &dump.at("config");
}

std::string mmengine_model_type(const json& cfg) {
  const json* model = MmengineReader::at(cfg, "model");
  if (model == nullptr) return "";
  return last_name(import_name(MmengineReader::at(*model, "type")).value_or(""));
}

namespace {

// The optimizer dict (torch.optim classes are registered in MMEngine's
// OPTIMIZERS by name: mmengine/optim/optimizer/builder.py register_torch_optimizers).
Status read_optimizer(MmengineReader& r, const json* optimizer, RunSettings& s, OptimWrapperConfig& out) {
  const std::string path = "optim_wrapper.optimizer";
  const std::string type = optimizer != nullptr ? import_name(MmengineReader::at(*optimizer, "type")).value_or("") : "";
  const std::string name = last_name(type);
  const bool bitsandbytes = type.find("bitsandbytes") != std::string::npos;
  s.paged_optimizer = false;
  if ((name == "AdamW" || name == "Adam") && !bitsandbytes) {
    // Adam keeps the same two states as AdamW; the weight decay is applied
    // elsewhere in the update, not in memory.
    s.optimizer = OptimizerKind::kAdamW;
    if (name == "Adam") r.note(path + ".type Adam: priced as AdamW (the same two fp32 states)");
  } else if (name == "SGD") {
    // torch.optim.SGD keeps one momentum buffer a parameter, none without momentum.
    const json* momentum = MmengineReader::at(*optimizer, "momentum");
    if (momentum != nullptr && !momentum->is_number()) return r.fail(path + ".momentum", "a number", *momentum);
    const bool with_momentum = momentum != nullptr && momentum->get<double>() > 0;
    s.optimizer = with_momentum ? OptimizerKind::kSgdMomentum : OptimizerKind::kSgd;
  } else if (name == "AdamW8bit" || name == "PagedAdamW8bit") {
    s.optimizer = OptimizerKind::kAdamW8bit;
    s.paged_optimizer = name == "PagedAdamW8bit";
  } else if (name == "PagedAdamW" || name == "PagedAdamW32bit") {
    s.optimizer = OptimizerKind::kAdamW;
    s.paged_optimizer = true;
  } else {
    return r.fail(path + ".type",
                  "AdamW, Adam, SGD (torch.optim) or bitsandbytes' AdamW8bit, PagedAdamW8bit, PagedAdamW (the "
                  "others' states are not modelled here)",
                  optimizer != nullptr ? optimizer->value("type", json()) : json());
  }
  // torch.optim's implementation: foreach on CUDA unless told (torch/optim/optimizer.py
  // _default_to_fused_or_foreach).
  if (is_true(MmengineReader::at(*optimizer, "fused"))) {
    out.impl = OptimizerImpl::kFused;
  } else if (const json* foreach = MmengineReader::at(*optimizer, "foreach"); foreach != nullptr && *foreach == json(false)) {
    out.impl = OptimizerImpl::kForLoop;
  }
  r.rest(*optimizer, path, {"type", "lr", "betas", "weight_decay", "eps", "momentum", "nesterov", "dampening",
                            "amsgrad", "fused", "foreach"});
  if (is_true(MmengineReader::at(*optimizer, "amsgrad"))) {
    return r.fail(path + ".amsgrad", "false (AMSGrad's third state is not modelled)", true);
  }
  return Status::ok();
}

}  // namespace

Result<OptimWrapperConfig> read_optim_wrapper(MmengineReader& r, const json& cfg, RunSettings& s) {
  const json* wrapper = MmengineReader::at(cfg, "optim_wrapper");
  if (wrapper == nullptr || !wrapper->is_object()) return r.fail("optim_wrapper", "a dict with an optimizer");
  OptimWrapperConfig out;
  // DefaultOptimWrapperConstructor: optim_wrapper_cfg.setdefault('type', 'OptimWrapper').
  out.type = last_name(import_name(MmengineReader::at(*wrapper, "type")).value_or("OptimWrapper"));
  if (out.type != "AmpOptimWrapper" && out.type != "OptimWrapper" && out.type != "DeepSpeedOptimWrapper") {
    return r.fail("optim_wrapper.type", "AmpOptimWrapper, OptimWrapper or DeepSpeedOptimWrapper",
                  wrapper->value("type", json()));
  }
  if (const json* accum = MmengineReader::at(*wrapper, "accumulative_counts")) {
    if (!accum->is_number_integer() || accum->get<int64_t>() < 1) {
      return r.fail("optim_wrapper.accumulative_counts", "a positive integer", *accum);
    }
    s.grad_accum = accum->get<int64_t>();
  } else {
    s.grad_accum = 1;  // OptimWrapper's default
  }
  // AmpOptimWrapper's dtype: None autocasts to torch.get_autocast_gpu_dtype(),
  // float16 unless changed (mmengine/runner/amp.py autocast); a string must be one
  // of its valid_dtypes (amp_optimizer_wrapper.py).
  if (const json* dtype = MmengineReader::at(*wrapper, "dtype")) {
    const std::string name = last_name(import_name(dtype).value_or(""));
    if (out.type != "AmpOptimWrapper") {
      return r.fail("optim_wrapper.dtype", "none unless type is AmpOptimWrapper (only it autocasts)", *dtype);
    }
    if (name == "bfloat16") {
      out.bf16 = true;
    } else if (name == "float32") {
      out.autocast_fp32 = true;
    } else if (name != "float16" && name != "half") {
      return r.fail("optim_wrapper.dtype", "float16, bfloat16 or float32", *dtype);
    }
  }
  if (const json* constructor = MmengineReader::at(*wrapper, "constructor")) {
    // Constructors set per-parameter lr and decay (layer-wise lr decay); none
    // changes what is stored.
    r.note("optim_wrapper.constructor " + json_excerpt(*constructor, 200) + ": read, sets learning rates only");
  }
  if (Status read = read_optimizer(r, MmengineReader::at(*wrapper, "optimizer"), s, out); !read.is_ok()) return read;
  r.rest(*wrapper, "optim_wrapper",
         {"type", "optimizer", "accumulative_counts", "dtype", "clip_grad", "loss_scale", "paramwise_cfg",
          "constructor"});
  return out;
}

Result<const json*> read_train_batch(MmengineReader& r, const json& cfg, RunSettings& s) {
  const json* loader = MmengineReader::at(cfg, "train_dataloader");
  if (loader == nullptr || !loader->is_object()) return r.fail("train_dataloader", "a dict with batch_size and dataset");
  const json* batch = MmengineReader::at(*loader, "batch_size");
  if (batch == nullptr || !batch->is_number_integer() || batch->get<int64_t>() < 1) {
    return r.fail("train_dataloader.batch_size", "a positive integer", loader->value("batch_size", json()));
  }
  s.micro_batch = batch->get<int64_t>();
  return loader;
}

namespace {

// MMDistributedDataParallel: every GPU holds everything.
Status read_ddp_wrapper(MmengineReader& r, const json* wrapper, RunSettings& s) {
  s.zero_stage = 0;
  if (is_true(MmengineReader::at(*wrapper, "find_unused_parameters"))) {
    r.note("model_wrapper_cfg.find_unused_parameters: DDP walks the autograd graph after every forward; that "
           "time is not priced");
  }
  r.rest(*wrapper, "model_wrapper_cfg", {"type", "find_unused_parameters", "broadcast_buffers", "static_graph",
                                         "detect_anomalous_params", "bucket_cap_mb", "gradient_as_bucket_view"});
  return Status::ok();
}

Status read_fsdp1_wrapper(MmengineReader& r, const json* wrapper, RunSettings& s) {
  // mmengine/model/wrappers/fully_sharded_distributed.py (at 254342938d) hands its
  // arguments to torch's FSDP1: sharding_strategy None is FULL_SHARD; a bool
  // cpu_offload becomes CPUOffload(offload_params=cpu_offload); mixed_precision None
  // keeps the fp32 FlatParameters (autocast, if any, comes from AmpOptimWrapper);
  // auto_wrap_policy None wraps only the root, so the whole model is one
  // FlatParameter (docs/memory-model.md, "FSDP1").
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp1;
  if (const json* strategy = MmengineReader::at(*wrapper, "sharding_strategy");
      strategy != nullptr && !strategy->is_null() && *strategy != json("FULL_SHARD")) {
    return r.fail("model_wrapper_cfg.sharding_strategy",
                  "FULL_SHARD or absent (FSDP1's other strategies are not modelled)", *strategy);
  }
  if (const json* policy = MmengineReader::at(*wrapper, "auto_wrap_policy"); policy != nullptr && !policy->is_null()) {
    return r.fail("model_wrapper_cfg.auto_wrap_policy",
                  "absent (the whole model one FlatParameter): a policy's units depend on its callable, which is "
                  "not read",
                  *policy);
  }
  s.fsdp_wrap = FsdpWrap::kModel;
  if (const json* precision = MmengineReader::at(*wrapper, "mixed_precision");
      precision != nullptr && !precision->is_null()) {
    return r.fail("model_wrapper_cfg.mixed_precision",
                  "absent (fp32 FlatParameters; AmpOptimWrapper's autocast is read from optim_wrapper): FSDP1's "
                  "MixedPrecision is not read here",
                  *precision);
  }
  if (const json* offload = MmengineReader::at(*wrapper, "cpu_offload"); offload != nullptr) {
    if (!offload->is_boolean()) {
      return r.fail("model_wrapper_cfg.cpu_offload", "true or false (a bool, as MMEngine converts it)", *offload);
    }
    if (offload->get<bool>()) {
      s.offload_param = Offload::kCpu;
      s.offload_optimizer = Offload::kCpu;
    }
  }
  // OptimWrapper enters model.no_sync() on the iterations that do not step
  // (optimizer_wrapper.py optim_context), but the wrapper's train_step runs only
  // the forward inside it and backward after (fully_sharded_distributed.py), and
  // FSDP1 reads the flag in backward: every micro-step reduce-scatters. With
  // CPUOffload that means each offloaded gradient replaces the last.
  s.fsdp_no_sync = false;
  if (s.grad_accum > 1 && s.offload_param == Offload::kCpu) {
    return r.fail("optim_wrapper.accumulative_counts",
                  "1 with MMFullyShardedDataParallel(cpu_offload=True): train_step leaves backward outside "
                  "no_sync, so FSDP1 reduce-scatters and offloads every micro-step, each gradient replacing the "
                  "last, and all but the last micro-batch of each step are lost",
                  json(s.grad_accum));
  }
  r.rest(*wrapper, "model_wrapper_cfg",
         {"type", "sharding_strategy", "auto_wrap_policy", "mixed_precision", "cpu_offload", "use_orig_params",
          "limit_all_gathers", "backward_prefetch", "forward_prefetch", "sync_module_states"});
  return Status::ok();
}

}  // namespace

Status read_model_wrapper(MmengineReader& r, const json& cfg, RunSettings& s) {
  const json* wrapper = MmengineReader::at(cfg, "model_wrapper_cfg");
  if (wrapper == nullptr) return Status::ok();
  if (!wrapper->is_object()) return r.fail("model_wrapper_cfg", "a dict", *wrapper);
  // Runner.wrap_model: model_wrapper_cfg.setdefault('type', 'MMDistributedDataParallel').
  const std::string type =
      last_name(import_name(MmengineReader::at(*wrapper, "type")).value_or("MMDistributedDataParallel"));
  if (type == "MMDistributedDataParallel") return read_ddp_wrapper(r, wrapper, s);
  if (type == "MMFullyShardedDataParallel") return read_fsdp1_wrapper(r, wrapper, s);
  return r.fail("model_wrapper_cfg.type", "MMDistributedDataParallel (MMEngine's Runner default)",
                wrapper->value("type", json()));
}

void read_checkpoint_hook(MmengineReader& r, const json& cfg, RunSettings& s) {
  const json* hooks = MmengineReader::at(cfg, "default_hooks");
  if (hooks == nullptr) return;
  r.rest(*hooks, "default_hooks", {"checkpoint"});
  const json* checkpoint = MmengineReader::at(*hooks, "checkpoint");
  if (checkpoint == nullptr) return;
  // CheckpointHook (mmengine/hooks/checkpoint_hook.py): max_keep_ckpts -1 keeps
  // every checkpoint; save_optimizer (True) saves the optimizer's state with it.
  const json* keep = MmengineReader::at(*checkpoint, "max_keep_ckpts");
  if (keep != nullptr && keep->is_number_integer() && keep->get<int64_t>() > 0) {
    s.checkpoints_kept = static_cast<int>(std::min<int64_t>(keep->get<int64_t>(), 1000));
  } else {
    r.note("default_hooks.checkpoint.max_keep_ckpts: every checkpoint is kept; the disk figure counts " +
           std::to_string(s.checkpoints_kept) + " (give --keep-checkpoints)");
  }
  if (const json* optimizer = MmengineReader::at(*checkpoint, "save_optimizer"); optimizer != nullptr) {
    s.save_optimizer_state = *optimizer != json(false);
  }
  r.rest(*checkpoint, "default_hooks.checkpoint", {"type", "max_keep_ckpts", "save_optimizer", "interval", "by_epoch",
                                                   "save_best", "rule", "out_dir", "save_last", "published_keys",
                                                   "save_param_scheduler", "filename_tmpl"});
}

void list_unread_top_level(MmengineReader& r, const json& cfg, const std::set<std::string>& read) {
  std::string variables;
  for (const auto& [key, value] : cfg.items()) {
    if (read.count(key) > 0) continue;
    const bool scalar = !value.is_object() && !(value.is_array() && std::any_of(value.begin(), value.end(), [](const json& v) {
      return v.is_object();
    }));
    if (scalar) {
      variables += (variables.empty() ? "" : ", ") + key;
    } else {
      r.out().ignored.push_back(key);
    }
  }
  if (!variables.empty()) {
    r.note("top-level variables, not read themselves (the dicts read carry the values they feed): " + variables);
  }
}

}  // namespace headroom::planner
