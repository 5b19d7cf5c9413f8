#include "reports/config_export.h"

#include <array>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include "planner/settings/stack.h"

namespace headroom::reports {
namespace {

using planner::BlockChoice;
using planner::Offload;
using planner::Precision;

// Where an NVMe offload writes; a placeholder the user must edit (DeepSpeed
// has no default nvme_path).
constexpr const char* kNvmePathPlaceholder = "/local_nvme";

int world_size(const planner::Plan& plan) { return plan.settings.world_size(); }

int64_t train_batch_size(const planner::Plan& plan) {
  return plan.config.micro_batch * plan.config.grad_accum * world_size(plan);
}

// DeepSpeed's offload sub-config. pin_memory defaults to false in DeepSpeed
// (deepspeed/runtime/zero/offload_config.py); pinned host memory is what the
// planner's transfer times assume.
nlohmann::json offload_json(Offload device) {
  nlohmann::json j = {{"device", planner::offload_name(device)}, {"pin_memory", true}};
  if (device == Offload::kNvme) j["nvme_path"] = kNvmePathPlaceholder;
  return j;
}

nlohmann::json zero_json(const planner::Plan& plan) {
  const planner::GlobalConfig& c = plan.config;
  const planner::RunSettings& s = plan.settings;
  // Every bucket key is written at every stage: DeepSpeed accepts them all and
  // ignores the ones a stage does not use, and the import reads them back.
  nlohmann::json z = {
      {"stage", c.zero_stage},
      {"overlap_comm", s.overlap_comm},
      {"contiguous_gradients", true},
      {"reduce_scatter", true},
      {"allgather_partitions", true},
      {"reduce_bucket_size", s.reduce_bucket_elements},
      {"allgather_bucket_size", s.allgather_bucket_elements},
      {"stage3_prefetch_bucket_size", s.prefetch_bucket_elements},
      {"stage3_max_live_parameters", s.max_live_parameters},
      {"stage3_max_reuse_distance", s.max_live_parameters},
  };
  if (c.zero_stage == 3) z["stage3_gather_16bit_weights_on_model_save"] = true;
  if (c.offload_optimizer != Offload::kNone)
    z["offload_optimizer"] = offload_json(c.offload_optimizer);
  if (c.zero_stage == 3 && c.offload_param != Offload::kNone) {
    z["offload_param"] = offload_json(c.offload_param);
  }
  return z;
}

// The optimizer block makes DeepSpeed build its own optimizer (needed with
// ZeRO-Offload: a client torch optimizer is refused there). lr is a
// placeholder; DeepSpeed passes params straight to the optimizer, so "auto"
// only works under the HF Trainer.
std::optional<nlohmann::json> optimizer_json(planner::OptimizerKind kind) {
  if (kind != planner::OptimizerKind::kAdamW) return std::nullopt;
  return nlohmann::json{
      {"type", "AdamW"},
      {"params", {{"lr", 1e-5}, {"betas", {0.9, 0.999}}, {"eps", 1e-8}, {"weight_decay", 0.0}}}};
}

// Length of the valid UTF-8 sequence starting at text[i], 0 when invalid.
size_t utf8_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  if (lead >= 0xc2 && lead <= 0xdf)
    n = 2;
  else if (lead >= 0xe0 && lead <= 0xef)
    n = 3;
  else if (lead >= 0xf0 && lead <= 0xf4)
    n = 4;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  // Overlong 3/4-byte forms, surrogates and code points above U+10FFFF.
  if ((lead == 0xe0 && byte(i + 1) < 0xa0) || (lead == 0xed && byte(i + 1) >= 0xa0) ||
      (lead == 0xf0 && byte(i + 1) < 0x90) || (lead == 0xf4 && byte(i + 1) >= 0x90)) {
    return 0;
  }
  return n;
}

// A Python string literal for `text`: valid UTF-8 is kept as it is (Python
// source is UTF-8), control characters and stray bytes become \xNN escapes.
std::string escape_python(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    const auto byte = static_cast<unsigned char>(ch);
    if (ch == '\\' || ch == '"') {
      out += '\\';
      out += ch;
    } else if (byte >= 0x80 && utf8_length(text, i) > 0) {
      const size_t n = utf8_length(text, i);
      out.append(text.substr(i, n));
      i += n;
      continue;
    } else if (byte < 0x20 || byte >= 0x7f) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", byte);
      out += buffer;
    } else {
      out += ch;
    }
    ++i;
  }
  return out + "\"";
}

std::string python_list(const std::vector<std::string>& names) {
  if (names.empty()) return "[]";
  std::string out = "[\n";
  for (const std::string& name : names) out += "    " + escape_python(name) + ",\n";
  return out + "]";
}

// A YAML scalar: plain when it cannot be read as anything but a string,
// single-quoted otherwise ('no' would be a boolean in YAML 1.1).
std::string yaml_scalar(std::string_view text) {
  static constexpr std::array<std::string_view, 12> kReserved = {
      "yes", "no", "true", "false", "on", "off", "null", "y", "n", "~", "Yes", "No"};
  bool plain =
      !text.empty() && !(text[0] >= '0' && text[0] <= '9') && text[0] != '-' && text[0] != '.';
  for (const std::string_view word : kReserved) plain = plain && text != word;
  for (const char ch : text) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == ',' || ch == '/' ||
                    ch == '-';
    plain = plain && ok;
  }
  if (plain) return std::string(text);
  std::string out = "'";
  for (const char ch : text) {
    if (ch == '\'')
      out += "''";
    else if (ch == '\n' || ch == '\r')
      out += ' ';
    else
      out += ch;
  }
  return out + "'";
}

std::string yaml_comment(std::string_view text) {
  std::string out = "# ";
  for (const char ch : text) out += (ch == '\n' || ch == '\r') ? ' ' : ch;
  return out + "\n";
}

int count(const planner::Plan& plan, BlockChoice choice) {
  int n = 0;
  for (const BlockChoice b : plan.blocks) n += b == choice ? 1 : 0;
  return n;
}

}  // namespace

CheckpointModules checkpoint_modules(const planner::Plan& plan) {
  CheckpointModules modules;
  for (size_t b = 0; b < plan.blocks.size() && b < plan.block_names.size(); ++b) {
    if (plan.blocks[b] == BlockChoice::kCheckpoint)
      modules.checkpoint.push_back(plan.block_names[b]);
    if (plan.blocks[b] == BlockChoice::kOffload) modules.offload.push_back(plan.block_names[b]);
  }
  return modules;
}

nlohmann::json deepspeed_config(const planner::Plan& plan) {
  nlohmann::json ds;
  ds["train_micro_batch_size_per_gpu"] = plan.config.micro_batch;
  ds["gradient_accumulation_steps"] = plan.config.grad_accum;
  ds["train_batch_size"] = train_batch_size(plan);
  ds["gradient_clipping"] = 1.0;
  ds["steps_per_print"] = 10;
  ds["wall_clock_breakdown"] = false;
  const Precision precision = plan.settings.precision;
  // DeepSpeed's bf16 mode keeps fp32 master weights: pure bf16 has no
  // DeepSpeed form and is written as bf16 mixed (deepspeed_notes says so).
  ds["bf16"] = {
      {"enabled", precision == Precision::kBf16Mixed || precision == Precision::kBf16Pure}};
  if (precision == Precision::kFp16Mixed) {
    // Dynamic loss scaling (loss_scale 0) starting at 2^16: DeepSpeed's defaults.
    ds["fp16"] = {{"enabled", true},           {"loss_scale", 0}, {"initial_scale_power", 16},
                  {"loss_scale_window", 1000}, {"hysteresis", 2}, {"min_loss_scale", 1}};
  } else {
    ds["fp16"] = {{"enabled", false}};
  }
  ds["zero_optimization"] = zero_json(plan);
  if (auto optimizer = optimizer_json(plan.settings.optimizer)) ds["optimizer"] = *optimizer;
  // Read only by deepspeed.checkpointing.checkpoint(); the plain torch
  // checkpointing of the snippet ignores it. cpu_checkpointing mirrors the
  // plan's activation offload for models that use DeepSpeed's API.
  ds["activation_checkpointing"] = {{"partition_activations", false},
                                    {"cpu_checkpointing", count(plan, BlockChoice::kOffload) > 0},
                                    {"contiguous_memory_optimization", false},
                                    {"number_checkpoints", nullptr},
                                    {"synchronize_checkpoint_boundary", false},
                                    {"profile", false}};
  return ds;
}

std::vector<std::string> deepspeed_notes(const planner::Plan& plan) {
  std::vector<std::string> notes;
  const CheckpointModules modules = checkpoint_modules(plan);
  notes.push_back(
      "DeepSpeed's config cannot say which modules to checkpoint: apply the torch snippet "
      "(" +
      std::to_string(modules.checkpoint.size()) + " checkpointed, " +
      std::to_string(modules.offload.size()) + " offloaded blocks) before deepspeed.initialize.");
  if (plan.settings.optimizer == planner::OptimizerKind::kAdamW) {
    notes.push_back("optimizer.params.lr is a placeholder (1e-5): set your learning rate.");
  } else {
    notes.push_back("no optimizer block: DeepSpeed has no built-in " +
                    std::string(planner::optimizer_name(plan.settings.optimizer)) +
                    "; pass yours to deepspeed.initialize(optimizer=...)" +
                    (plan.config.offload_optimizer != Offload::kNone
                         ? " (ZeRO-Offload refuses client optimizers unless "
                           "zero_allow_untested_optimizer is set)."
                         : "."));
  }
  if (plan.config.offload_optimizer != Offload::kNone) {
    notes.push_back(
        "with offload_optimizer, let DeepSpeed build the optimizer from the config: a client "
        "torch.optim.AdamW raises ZeRORuntimeException (ZeRO-Offload needs DeepSpeedCPUAdam).");
  }
  if (plan.config.offload_optimizer == Offload::kNvme ||
      plan.config.offload_param == Offload::kNvme) {
    notes.push_back(std::string("nvme_path is a placeholder (") + kNvmePathPlaceholder +
                    "): point it at a local NVMe file system.");
  }
  if (planner::is_autocast(plan.settings.precision)) {
    notes.push_back(std::string(planner::precision_name(plan.settings.precision)) +
                    " is torch.autocast over fp32 weights: DeepSpeed's bf16 / fp16 modes would hold 16-bit weights "
                    "and fp32 master copies instead, so both are off here; run the forward under torch.autocast "
                    "yourself (the PyTorch export shows the loop).");
  }
  if (plan.settings.precision == Precision::kBf16Pure) {
    notes.push_back(
        "pure bf16 has no DeepSpeed form: the config uses bf16 with fp32 master weights, "
        "which needs more memory than the plan assumed.");
  }
  return notes;
}

std::string transformer_layer_classes(const planner::Plan& plan) {
  // Class names of the Hugging Face (or LAVIS, for EVA ViT-g) implementations
  // of the zoo models; first match on the model name prefix wins.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kClasses = {{
      {"llava", "LlamaDecoderLayer,CLIPEncoderLayer"},
      {"llama", "LlamaDecoderLayer"},
      {"mistral", "MistralDecoderLayer"},
      {"qwen-7b", "QWenBlock"},
      {"gpt2", "GPT2Block"},
      {"flux", "FluxTransformerBlock,FluxSingleTransformerBlock"},
      {"eva-vit-g", "Block"},
      {"vit-", "ViTLayer"},
      {"bert", "BertLayer"},
  }};
  for (const auto& [prefix, classes] : kClasses) {
    if (plan.model.rfind(prefix, 0) == 0) return std::string(classes);
  }
  return kLayerClassPlaceholder;
}

std::string accelerate_config_yaml(const planner::Plan& plan) {
  const planner::GlobalConfig& c = plan.config;
  const int checkpointed = count(plan, BlockChoice::kCheckpoint);
  const int offloaded = count(plan, BlockChoice::kOffload);
  const std::string classes = transformer_layer_classes(plan);
  std::ostringstream out;
  out << yaml_comment("Accelerate FSDP config written by headroom for " + plan.model + " on " +
                      plan.gpu + ". Launch: accelerate launch --config_file THIS_FILE train.py");
  out << yaml_comment(
      "Gradient accumulation is not a config key: use Accelerator(gradient_accumulation_steps=" +
      std::to_string(c.grad_accum) + "), micro-batch " + std::to_string(c.micro_batch) +
      " per GPU.");
  if (c.zero_stage == 1) {
    out << yaml_comment(
        "FSDP has no optimizer-only sharding (ZeRO-1): SHARD_GRAD_OP also shards gradients.");
  }
  if (c.offload_optimizer != Offload::kNone || c.offload_param != Offload::kNone) {
    out << yaml_comment(
        "fsdp_offload_params moves parameters and gradients to the CPU and runs the optimizer "
        "there;"
        " FSDP has no NVMe offload.");
  }
  if (checkpointed > 0) {
    out << yaml_comment(
        "fsdp_activation_checkpointing checkpoints every wrapped layer; the plan checkpoints " +
        std::to_string(checkpointed) + " of " + std::to_string(plan.blocks.size()) +
        " blocks (the torch snippet does exactly those).");
  }
  if (offloaded > 0) {
    out << yaml_comment(
        std::to_string(offloaded) + (offloaded == 1 ? " block keeps" : " blocks keep") +
        " activations on the CPU: FSDP v1 has no key for that, use the torch snippet.");
  }
  if (classes == kLayerClassPlaceholder) {
    out << yaml_comment(
        "Set fsdp_transformer_layer_cls_to_wrap to your model's decoder layer class name.");
  }
  const char* strategy = c.zero_stage == 3   ? "FULL_SHARD"
                         : c.zero_stage == 0 ? "NO_SHARD"
                                             : "SHARD_GRAD_OP";
  // The FSDP the plan was priced for (docs/stacks.md, "Sharding"): FSDP2 is Accelerate's
  // fsdp_version 2, whose reshard_after_forward replaces the sharding strategy
  // (accelerate/utils/dataclasses.py, FullyShardedDataParallelPlugin). FSDP2 cannot
  // leave parameters unsharded (NO_SHARD): below stage 2 the file is FSDP1's.
  const planner::Sharding sharding = planner::sharding_of(plan.settings);
  const bool fsdp2 = sharding == planner::Sharding::kFsdp2 && c.zero_stage >= 2;
  if (c.zero_stage == 3 && sharding == planner::Sharding::kDeepspeed) {
    out << yaml_comment(
        "The plan priced DeepSpeed's ZeRO-3 buffers; FSDP1 holds others: re-plan with --sharding fsdp1 "
        "(or fsdp2) for FSDP's.");
  }
  const Precision precision = plan.settings.precision;
  const char* mixed = precision == Precision::kFp16Mixed || precision == Precision::kFp16Amp ? "fp16"
                      : precision == Precision::kFp32    ? "no"
                                                         : "bf16";
  const auto yes_no = [](bool value) { return value ? "true" : "false"; };
  out << "compute_environment: LOCAL_MACHINE\n"
      << "debug: false\n"
      << "distributed_type: FSDP\n"
      << "downcast_bf16: 'no'\n"
      << "fsdp_config:\n"
      << "  fsdp_activation_checkpointing: " << yes_no(checkpointed > 0) << "\n"
      << "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
  if (!fsdp2) out << "  fsdp_backward_prefetch: BACKWARD_PRE\n";
  out << "  fsdp_cpu_ram_efficient_loading: true\n";
  if (!fsdp2) out << "  fsdp_forward_prefetch: false\n";
  out << "  fsdp_offload_params: "
      << yes_no(c.offload_optimizer != Offload::kNone || c.offload_param != Offload::kNone) << "\n";
  if (fsdp2) {
    out << "  fsdp_reshard_after_forward: " << yes_no(c.zero_stage == 3) << "\n";
  } else {
    out << "  fsdp_sharding_strategy: " << strategy << "\n";
  }
  out << "  fsdp_state_dict_type: SHARDED_STATE_DICT\n";
  if (!fsdp2) out << "  fsdp_sync_module_states: true\n";
  out << "  fsdp_transformer_layer_cls_to_wrap: " << yaml_scalar(classes) << "\n";
  if (!fsdp2) out << "  fsdp_use_orig_params: true\n";
  // FSDP1 leaves fsdp_version out: 1 is the default, and Accelerate before 1.6 does not know the key.
  if (fsdp2) out << "  fsdp_version: 2\n";
  out << "machine_rank: 0\n"
      << "main_training_function: main\n"
      << "mixed_precision: " << yaml_scalar(mixed) << "\n"
      << "num_machines: " << plan.settings.nodes << "\n"
      << "num_processes: " << world_size(plan) << "\n"
      << "rdzv_backend: static\n"
      << "same_network: true\n"
      << "use_cpu: false\n";
  return out.str();
}

std::string torch_snippet(const planner::Plan& plan) {
  const CheckpointModules modules = checkpoint_modules(plan);
  const Precision precision = plan.settings.precision;
  const char* dtype = precision == Precision::kFp16Mixed || precision == Precision::kFp16Amp ? "torch.float16"
                      : precision == Precision::kFp32    ? "None"
                                                         : "torch.bfloat16";
  std::ostringstream out;
  out << "# Written by headroom for " << escape_python(plan.model) << " on "
      << escape_python(plan.gpu) << ".\n"
      << "# apply_headroom_plan(model) checkpoints and offloads exactly the blocks of the plan.\n"
      << "# Do not also call model.gradient_checkpointing_enable(): blocks would be checkpointed "
         "twice.\n"
      << "import functools\n\n"
      << "import torch\n"
      << "from torch.utils.checkpoint import checkpoint\n\n"
      << "MICRO_BATCH = " << plan.config.micro_batch << "  # per GPU\n"
      << "GRAD_ACCUM = " << plan.config.grad_accum << "  # micro-batches per optimizer step\n"
      << "WORLD_SIZE = " << world_size(plan) << "  # global batch " << train_batch_size(plan)
      << "\n"
      << "AUTOCAST_DTYPE = " << dtype << "\n\n"
      << "CHECKPOINT_MODULES = " << python_list(modules.checkpoint) << "\n\n"
      << "OFFLOAD_MODULES = " << python_list(modules.offload) << "\n\n\n"
      << "def _checkpointed(module):\n"
      << "    forward = module.forward\n\n"
      << "    @functools.wraps(forward)\n"
      << "    def wrapped(*args, **kwargs):\n"
      << "        # use_reentrant=False: works when no input requires grad (frozen\n"
      << "        # embeddings, LoRA) and with keyword arguments. The recompute calls\n"
      << "        # forward directly: parameters must live in submodules (true of\n"
      << "        # Hugging Face decoder layers) for ZeRO-3/FSDP hooks to gather them.\n"
      << "        return checkpoint(forward, *args, use_reentrant=False, **kwargs)\n\n"
      << "    module.forward = wrapped\n\n\n"
      << "def _offloaded(module):\n"
      << "    forward = module.forward\n\n"
      << "    @functools.wraps(forward)\n"
      << "    def wrapped(*args, **kwargs):\n"
      << "        with torch.autograd.graph.save_on_cpu(pin_memory=True):\n"
      << "            return forward(*args, **kwargs)\n\n"
      << "    module.forward = wrapped\n\n\n"
      << "def apply_headroom_plan(model):\n"
      << "    if getattr(model, \"config\", None) is not None and hasattr(model.config, "
         "\"use_cache\"):\n"
      << "        model.config.use_cache = False  # a KV cache is useless in training\n"
      << "    for name in CHECKPOINT_MODULES:\n"
      << "        _checkpointed(model.get_submodule(name))\n"
      << "    for name in OFFLOAD_MODULES:\n"
      << "        _offloaded(model.get_submodule(name))\n"
      << "    return model\n\n\n"
      << "# Training loop, one optimizer step per GRAD_ACCUM micro-batches of MICRO_BATCH:\n"
      << "#\n"
      << "# apply_headroom_plan(model)\n";
  if (precision == Precision::kBf16Pure)
    out << "# model.to(torch.bfloat16)  # pure bf16: no fp32 master weights\n";
  const bool scaled = precision == Precision::kFp16Mixed || precision == Precision::kFp16Amp;
  if (scaled) out << "# scaler = torch.amp.GradScaler(\"cuda\")\n";
  out << "# for step, batch in enumerate(loader):  # DataLoader(batch_size=MICRO_BATCH)\n";
  if (precision == Precision::kFp32) {
    out << "#     loss = model(**batch).loss / GRAD_ACCUM\n";
  } else {
    out << "#     with torch.autocast(\"cuda\", dtype=AUTOCAST_DTYPE):\n"
        << "#         loss = model(**batch).loss / GRAD_ACCUM\n";
  }
  if (scaled) {
    out << "#     scaler.scale(loss).backward()\n"
        << "#     if (step + 1) % GRAD_ACCUM == 0:\n"
        << "#         scaler.unscale_(optimizer)\n"
        << "#         torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        << "#         scaler.step(optimizer)\n"
        << "#         scaler.update()\n"
        << "#         optimizer.zero_grad(set_to_none=True)\n";
  } else {
    out << "#     loss.backward()\n"
        << "#     if (step + 1) % GRAD_ACCUM == 0:\n"
        << "#         torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        << "#         optimizer.step()\n"
        << "#         optimizer.zero_grad(set_to_none=True)\n";
  }
  return out.str();
}

}  // namespace headroom::reports
