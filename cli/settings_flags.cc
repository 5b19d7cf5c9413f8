#include "cli/settings_flags.h"

#include <algorithm>
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <deque>
#include <optional>

#include "planner/configs/deepspeed_import.h"
#include "planner/configs/pip_freeze.h"
#include "planner/settings/gpu_json.h"
#include "planner/settings/stack_mechanisms.h"
#include "planner/settings/versions_help.h"
#include "reports/units.h"

namespace headroom::cli {
namespace {

using planner::RunSettings;

// The flags' bounds are the documented maxima every way settings arrive is
// held to (planner/settings/run_settings.h); the flag check only names the flag.
using planner::kMaxBucketElements;
using planner::kMaxGlobalBatch;
using planner::kMaxGpusPerNode;
using planner::kMaxGradAccum;
using planner::kMaxLoraRank;
using planner::kMaxMicroBatch;
using planner::kMaxNodes;
using planner::kMaxResolution;
using planner::kMaxSeqLen;

constexpr const char* kHardware = "Hardware and budgets";
constexpr const char* kTraining = "Training";
constexpr const char* kBatch = "Batch and sequence";
constexpr const char* kParallel = "Parallelism, ZeRO and offload";
constexpr const char* kCheckpoints = "Activation checkpointing";
constexpr const char* kFreedom = "What the planner may change";

Status expected(std::string_view what, std::string_view value) {
  return Status::invalid_input("expected " + std::string(what) + ", got '" + std::string(value) +
                               "'");
}

Status parse_int(std::string_view value, int64_t min, int64_t max, int64_t& out) {
  const std::string what = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  int64_t parsed = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, error] = std::from_chars(value.data(), end, parsed);
  if (value.empty() || error != std::errc() || ptr != end || parsed < min || parsed > max) {
    return expected(what, value);
  }
  out = parsed;
  return Status::ok();
}

template <typename T>
Status set_int(std::string_view value, int64_t min, int64_t max, T& out) {
  int64_t parsed = 0;
  Status status = parse_int(value, min, max, parsed);
  if (status.is_ok()) out = static_cast<T>(parsed);
  return status;
}

// A probability or fraction in [min, max), as "0.05" or "5%".
Status set_fraction(std::string_view value, double min, double max, double& out) {
  std::string_view number = value;
  double scale = 1.0;
  if (!number.empty() && number.back() == '%') {
    number.remove_suffix(1);
    scale = 0.01;
  }
  double parsed = 0;
  const char* end = number.data() + number.size();
  const auto [ptr, error] = std::from_chars(number.data(), end, parsed, std::chars_format::fixed);
  parsed *= scale;
  if (number.empty() || error != std::errc() || ptr != end || !std::isfinite(parsed) ||
      parsed < min || parsed >= max) {
    return expected("a fraction in [" + reports::fixed(min, 0) + ", " + reports::fixed(max, 1) +
                        ") such as 0.05 or 5%",
                    value);
  }
  out = parsed;
  return Status::ok();
}

Status set_positive(std::string_view value, double& out) {
  double parsed = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, error] = std::from_chars(value.data(), end, parsed, std::chars_format::fixed);
  if (value.empty() || error != std::errc() || ptr != end || !std::isfinite(parsed) ||
      parsed <= 0) {
    return expected("a positive number", value);
  }
  out = parsed;
  return Status::ok();
}

Status set_size(std::string_view value, int64_t& out) {
  Result<int64_t> bytes = reports::parse_size(value);
  if (!bytes.is_ok()) return bytes.status();
  out = bytes.value();
  return Status::ok();
}

Status set_optional_size(std::string_view value, std::optional<int64_t>& out) {
  int64_t bytes = 0;
  Status status = set_size(value, bytes);
  if (status.is_ok()) out = bytes;
  return status;
}

Status set_optional_int(std::string_view value, int64_t min, int64_t max, std::optional<int64_t>& out) {
  int64_t parsed = 0;
  Status status = parse_int(value, min, max, parsed);
  if (status.is_ok()) out = parsed;
  return status;
}

// "a, b,c" -> {"a", "b", "c"}; empty items are an error.
Status set_list(std::string_view value, std::vector<std::string>& out) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view item = value.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) return expected("a comma-separated list of names without empty items", value);
    items.emplace_back(item);
    start = comma + 1;
  }
  out = std::move(items);
  return Status::ok();
}

template <typename E>
Status set_enum(std::string_view value, std::optional<E> (*parse)(std::string_view),
                std::string_view choices, E& out) {
  const std::optional<E> parsed = parse(value);
  if (!parsed) return expected("one of " + std::string(choices), value);
  out = *parsed;
  return Status::ok();
}

// The same for a setting that is unset (as the stack does) until a flag pins it.
template <typename E>
Status set_enum(std::string_view value, std::optional<E> (*parse)(std::string_view),
                std::string_view choices, std::optional<E>& out) {
  E parsed{};
  if (Status status = set_enum(value, parse, choices, parsed); !status.is_ok()) return status;
  out = parsed;
  return Status::ok();
}

// An on|off flag for a setting that is unset (as the stack does) until a flag pins it.
Status set_on_off(std::string_view value, std::optional<bool>& out) {
  if (value != "on" && value != "off") return expected("on or off", value);
  out = value == "on";
  return Status::ok();
}

std::optional<planner::CheckpointPolicy> parse_checkpointing(std::string_view value) {
  if (value == "none") return planner::CheckpointPolicy::kNone;
  if (value == "every") return planner::CheckpointPolicy::kEveryBlock;
  return std::nullopt;
}

// Made from the table of versioned packages, which names what each release changes.
const char* versions_help() {
  static const std::string text = planner::versions_flag_help();
  return text.c_str();
}

const std::vector<SettingsFlag> kFixedFlags = {
    // Hardware and budgets.
    {"--gpu", "ID", kHardware, "GPU from the catalogue (`headroom gpus`), e.g. a6000, 4090, h100",
     false,
     [](RunSettings& s, std::string_view v) {
       if (v.empty()) return expected("a GPU id such as a6000", v);
       s.gpu = std::string(v);
       s.gpu_spec.reset();  // over a --settings file's gpu_spec
       return Status::ok();
     }},
    {"--gpu-file", "FILE", kHardware,
     "a GPU not in the catalogue, described in a JSON file with the catalogue's fields (docs/hardware.md)",
     false,
     [](RunSettings& s, std::string_view v) {
       if (v.empty()) return expected("a GPU JSON file", v);
       Result<planner::GpuSpec> gpu = planner::read_gpu_file(std::string(v));
       if (!gpu.is_ok()) return gpu.status();
       s.gpu = gpu.value().id;
       s.gpu_spec = gpu.value();
       return Status::ok();
     }},
    {"--gpu-mem", "SIZE", kHardware,
     "GPU memory to plan for instead of the catalogue's (24GiB, 48GB, 49140MiB or bytes)", false,
     [](RunSettings& s, std::string_view v) { return set_optional_size(v, s.gpu_memory_bytes); }},
    {"--context-mem", "SIZE", kHardware,
     "measured CUDA context size, overriding the catalogue's estimate", false,
     [](RunSettings& s, std::string_view v) { return set_optional_size(v, s.cuda_context_bytes); }},
    {"--gpus", "N", kHardware, "GPUs per node (default 1)", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, kMaxGpusPerNode, s.gpus_per_node); }},
    {"--nodes", "N", kHardware, "number of nodes (default 1)", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, kMaxNodes, s.nodes); }},
    {"--shard-gpus", "N", kHardware,
     "hybrid sharding (HSDP): ZeRO shards over groups of N GPUs and replicates across groups (default: all GPUs)",
     false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, kMaxGpusPerNode * planner::kMaxNodes, s.shard_gpus); }},
    {"--host-ram", "SIZE", kHardware, "host RAM per node (default 128GiB)", false,
     [](RunSettings& s, std::string_view v) { return set_optional_size(v, s.host_ram_bytes); }},
    {"--disk", "SIZE", kHardware, "free disk for checkpoints and NVMe offload (default 500GB)",
     false, [](RunSettings& s, std::string_view v) { return set_optional_size(v, s.disk_free_bytes); }},
    {"--safety-margin", "F", kHardware, "fraction of GPU memory kept free (default 0.05 = 5%)",
     false,
     [](RunSettings& s, std::string_view v) { return set_fraction(v, 0, 0.5, s.safety_margin); }},
    {"--network-gbps", "GB/s", kHardware, "inter-node bandwidth per node (default 12.5)", false,
     [](RunSettings& s, std::string_view v) { return set_positive(v, s.network_gbps); }},
    {"--nvme-gbps", "GB/s", kHardware, "NVMe sequential bandwidth (default 3.0)", false,
     [](RunSettings& s, std::string_view v) { return set_positive(v, s.nvme_gbps); }},
    // Training.
    {"--precision", "P", kTraining, "fp32, bf16-mixed (default), fp16-mixed, bf16 (pure), or bf16-amp / fp16-amp (torch.autocast over fp32 weights)", false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_precision, planner::precision_names(),
                       s.precision);
     }},
    {"--optimizer", "NAME", kTraining,
     "adamw (default), adamw-8bit (bitsandbytes), adamw-4bit, adamw-8bit-torchao (torchao), sgd (momentum), "
     "sgd-no-momentum or adafactor",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_optimizer, planner::optimizer_names(),
                       s.optimizer);
     }},
    {"--stack", "NAME", kTraining,
     "the training stack: hf-trainer, torchtune, litgpt, torchtitan, deepspeed, torch-amp, composer, unsloth or "
     "unspecified (default; docs/stacks.md)",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_stack, planner::stack_names(), s.stack);
     }},
    {"--offload-checkpoint-inputs", nullptr, kTraining,
     "checkpointed blocks keep their inputs in pinned host memory (torchtune enable_activation_offloading; "
     "docs/stacks.md)",
     false,
     [](RunSettings& s, std::string_view) {
       s.offload_checkpoint_inputs = true;
       return Status::ok();
     }},
    {"--expandable-segments", "on|off", kTraining,
     "the CUDA caching allocator runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (on) or without "
     "(off); default: as the stack's launcher does (torchtitan: on; docs/stacks.md)",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_on_off(v, s.expandable_segments);
     }},
    {"--paged-optimizer", nullptr, kTraining,
     "bitsandbytes PagedAdamW / PagedAdamW8bit: the states of large tensors live in CUDA unified memory, outside "
     "the caching allocator (docs/memory-model.md)",
     false,
     [](RunSettings& s, std::string_view) {
       s.paged_optimizer = true;
       return Status::ok();
     }},
    {"--no-double-quant", nullptr, kTraining,
     "QLoRA without bitsandbytes double quantization (one fp32 absmax per 64 weights, transformers' default)",
     false,
     [](RunSettings& s, std::string_view) {
       s.nf4_double_quant = false;
       return Status::ok();
     }},
    {"--pip-freeze", "FILE", kTraining,
     "the output of pip freeze in the run's environment: the releases --versions takes, read from it (other "
     "packages are skipped; --versions wins where both name a package)",
     true,
     [](RunSettings& s, std::string_view v) { return planner::read_pip_freeze(std::string(v), s.versions); }},
    {"--versions", "PKG=REL,...", kTraining, versions_help(),
     true,
     [](RunSettings& s, std::string_view v) { return planner::parse_versions(v, "", s.versions); }},
    {"--quant", "FORMAT", kTraining,
     "QLoRA's frozen base: nf4 (bitsandbytes, default) or gptq (a GPTQ int4 checkpoint through AutoGPTQ's "
     "QuantLinear, which keeps the unpacked 16-bit weight for backward; docs/memory-model.md)",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_quant_format, planner::quant_format_names(), s.quant);
     }},
    {"--gptq-group-size", "N", kTraining,
     "with --quant gptq: input rows per scale and zero (quantize_config.json group_size; -1: one group per "
     "linear; default 128)",
     false,
     [](RunSettings& s, std::string_view v) {
       if (v == "-1") {
         s.gptq_group_size = -1;
         return Status::ok();
       }
       return set_int(v, 1, int64_t{1} << 20, s.gptq_group_size);
     }},
    {"--compile", nullptr, kTraining,
     "the run uses torch.compile (torchtune compile: True, torchtitan --training.compile): blocks save what "
     "the min-cut partitioner keeps and run their pointwise ops as fused kernels; the loss as the stack "
     "compiles it (docs/stacks.md)",
     false,
     [](RunSettings& s, std::string_view) {
       s.compile = true;
       return Status::ok();
     }},
    {"--float8", "RECIPE", kTraining,
     "fp8 training with torchao's Float8Linear on the layers' linears: none (default), tensorwise (torchao 0.9 "
     "and later: keeps the 16-bit input) or tensorwise-fp8-input (torchao 0.7-0.8: keeps the fp8 input); Ada "
     "or Hopper GPUs only (docs/stacks.md)",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_float8_recipe, planner::float8_recipe_names(), s.float8);
     }},
    {"--float8-all-gather", nullptr, kTraining,
     "with --float8 and FSDP2 (zero stage 3): weight shards are cast to fp8 before the all-gather "
     "(torchao enable_fsdp_float8_all_gather), so unsharded weights take one byte",
     false,
     [](RunSettings& s, std::string_view) {
       s.float8_all_gather = true;
       return Status::ok();
     }},
    {"--mode", "MODE", kTraining, "full (default), lora or qlora", false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_mode, planner::mode_names(), s.mode);
     }},
    {"--lora", nullptr, kTraining, "same as --mode lora", false,
     [](RunSettings& s, std::string_view) {
       s.mode = planner::TrainMode::kLora;
       return Status::ok();
     }},
    {"--qlora", nullptr, kTraining, "same as --mode qlora (4-bit NF4 base, LoRA adapters)", false,
     [](RunSettings& s, std::string_view) {
       s.mode = planner::TrainMode::kQlora;
       return Status::ok();
     }},
    {"--lora-rank", "N", kTraining, "LoRA rank r (default 16)", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, kMaxLoraRank, s.lora.rank); }},
    {"--lora-targets", "A,B,...", kTraining,
     "module-name suffixes that get adapters, e.g. q_proj,v_proj, or all-linear (PEFT's shorthand: every linear "
     "but the output layer) (default: the model's)",
     false,
     [](RunSettings& s, std::string_view v) { return set_list(v, s.lora.targets); }},
    {"--lora-dropout", "F", kTraining, "LoRA dropout probability (default 0.05)", false,
     [](RunSettings& s, std::string_view v) { return set_fraction(v, 0, 1, s.lora.dropout); }},
    {"--dora", nullptr, kTraining,
     "with --lora/--qlora: DoRA (PEFT's use_dora): a trained magnitude per output row and a weight norm per step",
     false,
     [](RunSettings& s, std::string_view) {
       s.lora.dora = true;
       return Status::ok();
     }},
    {"--scoped-lora", "GLOB:RANK[:A,B,...]", kTraining,
     "LoRA/QLoRA: adapters of their own rank on the linears matching GLOB, e.g. '*vision_tower*:64' (XTuner's "
     "visual_encoder_lora), on every linear there or on the listed suffixes; the lora dropout (repeatable)",
     true,
     [](RunSettings& s, std::string_view v) {
       const size_t colon = v.find(':');
       if (colon == std::string_view::npos || colon == 0) {
         return expected("GLOB:RANK[:A,B,...], such as '*vision_tower*:64'", v);
       }
       const std::string_view rest = v.substr(colon + 1);
       const size_t second = rest.find(':');
       planner::ScopedLora scoped;
       scoped.scope = std::string(v.substr(0, colon));
       scoped.lora.dropout = s.lora.dropout;
       if (Status rank = set_int(rest.substr(0, second), 1, planner::kMaxLoraRank, scoped.lora.rank); !rank.is_ok()) {
         return expected("GLOB:RANK[:A,B,...] with a rank from 1 to " + std::to_string(planner::kMaxLoraRank), v);
       }
       if (second != std::string_view::npos) {
         if (Status targets = set_list(rest.substr(second + 1), scoped.lora.targets); !targets.is_ok()) return targets;
       }
       s.scoped_lora.push_back(std::move(scoped));
       return Status::ok();
     }},
    {"--freeze", "PATTERN", kTraining, "freeze parameters of nodes matching the glob (repeatable)",
     true,
     [](RunSettings& s, std::string_view v) {
       if (v.empty()) return expected("a glob pattern such as '*vision_tower*'", v);
       s.freeze_patterns.emplace_back(v);
       return Status::ok();
     }},
    {"--train", "PATTERN", kTraining,
     "LoRA/QLoRA: train nodes matching the glob in full anyway (repeatable)", true,
     [](RunSettings& s, std::string_view v) {
       if (v.empty()) return expected("a glob pattern such as '*projector*'", v);
       s.train_patterns.emplace_back(v);
       return Status::ok();
     }},
    {"--attention", "IMPL", kTraining,
     "eager, sdpa (default; fused/flash attention), flex (torch flex_attention, as torchtune runs packed "
     "samples) or triton (flash-attn's Triton kernel, llm-foundry's attn_impl triton)", false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_attention, planner::attention_names(), s.attention);
     }},
    {"--document-tokens", "N", kTraining,
     "flex attention over packed samples: the mean document length; the document mask skips the tiles between "
     "documents (default: one causal document per row)", false,
     [](RunSettings& s, std::string_view v) {
       return set_optional_int(v, 1, planner::kMaxSeqLen, s.document_tokens);
     }},
    {"--shortest-sample", "N", kTraining,
     "unpacked data padded per batch: samples run from N tokens to --seq and each micro-batch is as long as its "
     "longest; the simulator replays batches of such lengths, whose sizes the allocator's cache grows on "
     "(default: every batch at --seq)", false,
     [](RunSettings& s, std::string_view v) {
       return set_optional_int(v, 1, planner::kMaxSeqLen, s.shortest_sample);
     }},
    {"--group-by-length", nullptr, kTraining,
     "with --shortest-sample: batches come longest first from length-sorted megabatches, as the Trainer's "
     "group_by_length samples them (docs/simulator.md)",
     false,
     [](RunSettings& s, std::string_view) {
       s.group_by_length = true;
       return Status::ok();
     }},
    {"--completion-tokens", "N", kTraining,
     "--recipe grpo: GRPOConfig.max_completion_length, the tokens each completion is generated to (default "
     "512); --seq is the longest prompt and these together", false,
     [](RunSettings& s, std::string_view v) {
       return set_optional_int(v, 1, planner::kMaxSeqLen, s.completion_tokens);
     }},
    {"--num-generations", "N", kTraining,
     "--recipe grpo: completions sampled per prompt (GRPOConfig.num_generations, default 8); the generation "
     "batch holds whole groups", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 2, kMaxGlobalBatch, s.num_generations); }},
    {"--steps-per-generation", "N", kTraining,
     "--recipe grpo: micro-steps one generation feeds (GRPOConfig.steps_per_generation, default --grad-accum); "
     "a generation samples micro-batch x N completions", false,
     [](RunSettings& s, std::string_view v) {
       return set_optional_int(v, 1, kMaxGradAccum, s.steps_per_generation);
     }},
    {"--vllm-gpu-memory-utilization", "F", kTraining,
     "--generation vllm-colocate[-sleep]: GRPOConfig.vllm_gpu_memory_utilization, the GPU's share vLLM takes "
     "(default 0.3)", false,
     [](RunSettings& s, std::string_view v) {
       double share = 0;
       Status status = set_positive(v, share);  // at most 1: validate_grpo.cc
       if (status.is_ok()) s.vllm_gpu_memory_utilization = share;
       return status;
     }},
    {"--vllm-max-model-len", "N", kTraining,
     "--generation vllm-colocate[-sleep]: GRPOConfig.vllm_max_model_length, the context vLLM's KV cache must hold "
     "one of (default: the model's maximum positions, as vLLM infers it)", false,
     [](RunSettings& s, std::string_view v) {
       return set_optional_int(v, 1, planner::kMaxSeqLen, s.vllm_max_model_len);
     }},
    {"--text-tokens", "N", kTraining,
     "Flux / SD3: T5 tokens per sample (diffusers' --max_sequence_length; default 512 for Flux, 77 for SD3, "
     "after SD3's 77 CLIP tokens)", false,
     [](RunSettings& s, std::string_view v) { return set_optional_int(v, 1, planner::kMaxSeqLen, s.text_tokens); }},
    {"--resident-encoders", nullptr, kTraining,
     "Flux / SDXL: the text encoders (SDXL: and the VAE) stay on the GPU and encode each batch "
     "(precomputed_text_embeddings false)", false,
     [](RunSettings& s, std::string_view) {
       s.precomputed_text_embeddings = false;
       return Status::ok();
     }},
    {"--target-seq", "N", kTraining,
     "T5: decoder (target) tokens per sample, the labels' length (default 128); --seq is the encoder's", false,
     [](RunSettings& s, std::string_view v) { return set_optional_int(v, 1, planner::kMaxSeqLen, s.target_tokens); }},
    {"--dropout", "F", kTraining, "override every dropout probability of the model", false,
     [](RunSettings& s, std::string_view v) {
       double p = 0;
       Status status = set_fraction(v, 0, 1, p);
       if (status.is_ok()) s.dropout = p;
       return status;
     }},
    {"--no-optimizer-state", nullptr, kTraining, "training-state checkpoints hold the weights only",
     false,
     [](RunSettings& s, std::string_view) {
       s.save_optimizer_state = false;
       return Status::ok();
     }},
    {"--keep-checkpoints", "N", kTraining, "training-state checkpoints kept on disk (default 2)",
     false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, 1000, s.checkpoints_kept); }},
    // Batch and sequence.
    {"--batch,--micro-batch", "N", kBatch, "micro-batch per GPU (default 1)", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, kMaxMicroBatch, s.micro_batch); }},
    {"--seq", "N", kBatch, "sequence length in tokens (default: the model's)", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, kMaxSeqLen, s.seq_len); }},
    {"--resolution", "PX", kBatch, "image models: pixels per side (overrides --seq); Qwen2.5-VL: the image's side, --seq the whole LM length", false,
     [](RunSettings& s, std::string_view v) {
       return set_int(v, 1, kMaxResolution, s.resolution);
     }},
    {"--grad-accum", "N", kBatch, "gradient accumulation steps (default 1)", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 1, kMaxGradAccum, s.grad_accum); }},
    {"--global-batch", "N", kBatch,
     "samples per optimizer step over all GPUs (default: micro-batch x accumulation x GPUs)", false,
     [](RunSettings& s, std::string_view v) {
       return set_int(v, 1, kMaxGlobalBatch, s.global_batch);
     }},
    // Parallelism, ZeRO and offload.
    {"--zero", "STAGE", kParallel, "ZeRO stage 0 (default), 1, 2 or 3", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 0, 3, s.zero_stage); }},
    {"--sharding", "IMPL", kParallel,
     "who shards at --zero 3: deepspeed, fsdp1 (FullyShardedDataParallel) or fsdp2 (fully_shard); default: as "
     "the stack does (docs/stacks.md, \"Sharding\")",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_sharding, planner::sharding_names(), s.sharding);
     }},
    {"--reduce-dtype", "DTYPE", kParallel,
     "FSDP's gradient reduce-scatter dtype: fp32 or param (the 16-bit compute dtype); default: fp32 under "
     "mixed precision",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_reduce_dtype, planner::reduce_dtype_names(), s.reduce_dtype);
     }},
    {"--fsdp-own-group", "BLOCK", kParallel,
     "FSDP2 stacks: a block outside the layers (embeddings, head) sharded by a fully_shard of its own, as torchtune's "
     "custom_sharded_layers; the others stay unsharded from forward to the end of backward with the root (repeatable)",
     true,
     [](RunSettings& s, std::string_view v) {
       if (v.empty()) return expected("a block name such as 'embeddings' or 'head'", v);
       s.fsdp_own_groups.emplace_back(v);
       return Status::ok();
     }},
    {"--fsdp-wrap", "UNITS", kParallel,
     "FSDP1 (--sharding fsdp1 --zero 3): layers (default: one FlatParameter a layer, the root the rest) or model "
     "(no auto_wrap_policy: the whole model one unit, gathered for the whole step)",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_fsdp_wrap, planner::fsdp_wrap_names(), s.fsdp_wrap);
     }},
    {"--offload-optimizer", "WHERE", kParallel, "none (default), cpu or nvme", false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_offload, planner::offload_names(), s.offload_optimizer);
     }},
    {"--cpu-offload", "IMPL", kParallel,
     "who offloads the optimizer with --offload-optimizer cpu: zero-offload (DeepSpeed, default), torchao "
     "(CPUOffloadOptimizer: one GPU, no ZeRO) or torchao-offload-gradients",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_cpu_offload, planner::cpu_offload_names(),
                       s.cpu_offload);
     }},
    {"--offload-param", "WHERE", kParallel, "none (default), cpu or nvme (needs --zero 3)", false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, planner::parse_offload, planner::offload_names(), s.offload_param);
     }},
    {"--reduce-bucket", "N", kParallel, "ZeRO reduce bucket in elements (default 500000000)", false,
     [](RunSettings& s, std::string_view v) {
       return set_int(v, 1, kMaxBucketElements, s.reduce_bucket_elements);
     }},
    {"--allgather-bucket", "N", kParallel, "ZeRO allgather bucket in elements (default 500000000)",
     false,
     [](RunSettings& s, std::string_view v) {
       return set_int(v, 1, kMaxBucketElements, s.allgather_bucket_elements);
     }},
    // Activation checkpointing.
    {"--checkpointing", "POLICY", kCheckpoints, "none (default) or every (every block)", false,
     [](RunSettings& s, std::string_view v) {
       return set_enum(v, parse_checkpointing, "none, every", s.checkpointing);
     }},
    {"--checkpoint-blocks", "A,B,...", kCheckpoints,
     "checkpoint exactly these blocks, e.g. layers.0,layers.1", false,
     [](RunSettings& s, std::string_view v) {
       s.checkpointing = planner::CheckpointPolicy::kList;
       return set_list(v, s.checkpoint_blocks);
     }},
    {"--offload-blocks", "A,B,...", kCheckpoints,
     "these blocks keep their saved activations in pinned host memory (a plan's offload choice)", false,
     [](RunSettings& s, std::string_view v) { return set_list(v, s.offload_blocks); }},
    // What the planner may change.
    {"--may-change", "LIST", kFreedom,
     "what the plan may change: stack (default: what --stack changes without editing code), all, or a list of "
     "checkpointing, checkpoint-every, checkpoint-blocks, activation-offload, micro-batch, zero, offload, nvme "
     "(docs/stacks.md)",
     false, [](RunSettings& s, std::string_view v) { return set_list(v, s.may_change); }},
    {"--max-zero", "STAGE", kFreedom, "highest ZeRO stage the planner may pick (default 3)", false,
     [](RunSettings& s, std::string_view v) { return set_int(v, 0, 3, s.max_zero_stage); }},
    {"--no-offload", nullptr, kFreedom, "the planner may not offload to the CPU", false,
     [](RunSettings& s, std::string_view) {
       s.allow_cpu_offload = false;
       return Status::ok();
     }},
    {"--allow-nvme", nullptr, kFreedom, "the planner may offload to NVMe (ZeRO-Infinity)", false,
     [](RunSettings& s, std::string_view) {
       s.allow_nvme_offload = true;
       return Status::ok();
     }},
    {"--no-activation-offload", nullptr, kFreedom,
     "the planner may not offload activations to host memory", false,
     [](RunSettings& s, std::string_view) {
       s.allow_activation_offload = false;
       return Status::ok();
     }},
    {"--fixed-micro-batch", nullptr, kFreedom, "the planner keeps the micro-batch as given", false,
     [](RunSettings& s, std::string_view) {
       s.allow_micro_batch_change = false;
       return Status::ok();
     }},
    {"--calibration", "FILE", kHardware,
     "measured efficiencies and context size for this GPU (docs/calibration.md)", false,
     [](RunSettings& s, std::string_view v) {
       if (v.empty()) return expected("a calibration JSON file", v);
       s.calibration_file = std::string(v);
       return Status::ok();
     }},
    // Read before every other flag by resolve_settings (the config is the base the
    // flags refine); the rows give them their help and place.
    {"--torchtune", "FILE", kTraining,
     "answer for this torchtune recipe config (YAML: model, batch, sequence, optimizer, loss, checkpointing, "
     "compile, dtype, FSDP keys; docs/config-import.md); MODEL and the other flags override what it says",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--torchtune-set", "KEY=VALUE", kTraining,
     "a torchtune command-line override of the --torchtune config (batch_size=8, optimizer.fused=True, ~KEY "
     "removes one; repeatable)",
     true, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--hf-args", "FILE", kTraining,
     "answer for this transformers Trainer run: its TrainingArguments as to_json_string() writes them, or the "
     "--key value arguments of the script (TRL SFTConfig keys too; docs/config-import.md); MODEL gives the model",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--accelerate", "FILE", kTraining,
     "the run's Accelerate config (accelerate launch --config_file): processes, machines, mixed precision, the "
     "FSDP or DeepSpeed plugin (docs/config-import.md); read before --hf-args, whose arguments win",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--axolotl", "FILE", kTraining,
     "answer for this axolotl config (YAML: adapter, lora_*, sequence_len, sample_packing, micro_batch_size, "
     "optimizer, bf16, gradient_checkpointing, deepspeed, fsdp; docs/config-import.md); MODEL gives the model",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--llamafactory", "FILE", kTraining,
     "answer for this LLaMA-Factory training config (YAML: finetuning_type, lora_*, quantization_bit, cutoff_len, "
     "and the Trainer's own keys; docs/config-import.md); MODEL gives the model",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--xtuner", "FILE", kTraining,
     "answer for this XTuner config (the MMEngine Python config of `xtuner train`, read by MMEngine's own loader, "
     "or the JSON scripts/exporter/read_mmengine_config.py prints; with --deepspeed as xtuner train takes it; "
     "docs/config-import.md); MODEL gives the model. A .py config RUNS AS PYTHON CODE with your privileges "
     "(as xtuner train runs it): give only configs you trust. It runs once, under limits: "
     "HEADROOM_CONFIG_TIMEOUT_S (60 s), HEADROOM_CONFIG_MEMORY_MIB (8192), 1 MiB of code, 16 MiB of output",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--mmengine", "FILE", kTraining,
     "answer for this MMEngine config (the Python config of an OpenMMLab tools/train.py, read by MMEngine's own "
     "loader, or the JSON scripts/exporter/read_mmengine_config.py prints): mmpretrain's ImageClassifier names "
     "its zoo model; XTuner's models are read as --xtuner reads them (MODEL gives the LLM); docs/config-import.md. "
     "A .py config RUNS AS PYTHON CODE with your privileges: give only configs you trust (limits as --xtuner)",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--peft", "FILE", kTraining,
     "the run's PEFT adapter_config.json: LoRA rank, targets, dropout, modules_to_save (docs/config-import.md)",
     false, [](RunSettings&, std::string_view) { return Status::ok(); }},
    {"--deepspeed", "FILE", kTraining,
     "answer for this DeepSpeed config (ZeRO stage, offload, buckets, bf16/fp16, batch keys; "
     "\"auto\" keeps the other flags' values)",
     false,
     [](RunSettings& s, std::string_view v) {
       if (v.empty()) return expected("a DeepSpeed config JSON file", v);
       Result<RunSettings> imported = planner::load_deepspeed_config(std::string(v), s);
       if (!imported.is_ok()) return imported.status();
       s = imported.value();
       return Status::ok();
     },
     true},
};

// The stack's mechanisms, one flag per row of planner/settings/stack_mechanisms.h.
constexpr const char* kMechanisms = "Stack mechanisms";

// Every flag: the fixed rows above, then one per stack mechanism. The names and
// help of the generated rows live as long as the table (the rows keep pointers).
const std::vector<SettingsFlag>& all_flags() {
  static const std::vector<SettingsFlag> flags = [] {
    static std::deque<std::string> texts;
    std::vector<SettingsFlag> out = kFixedFlags;
    for (const planner::MechanismRow& row : planner::stack_mechanisms()) {
      const char* name = texts.emplace_back(planner::mechanism_flag(row)).c_str();
      const char* help = texts.emplace_back(planner::mechanism_help(row)).c_str();
      out.push_back({name, row.value_name, kMechanisms, help, false, nullptr, false, &row});
    }
    return out;
  }();
  return flags;
}

}  // namespace

const std::vector<SettingsFlag>& settings_flag_table() { return all_flags(); }

Status apply_flag(const SettingsFlag& flag, RunSettings& settings, std::string_view value) {
  return flag.mechanism != nullptr ? flag.mechanism->set(*flag.mechanism, settings, value)
                                   : flag.apply(settings, value);
}

std::string primary_name(const SettingsFlag& flag) {
  const std::string names = flag.names;
  return names.substr(0, names.find(','));
}

Status give_flag(SettingsFlags& flags, std::string_view name, std::string value) {
  for (const SettingsFlag& flag : all_flags()) {
    std::string_view names = flag.names;
    while (!names.empty()) {
      const size_t comma = names.find(',');
      if (names.substr(0, comma) == name) {
        if (flag.value_name == nullptr && !value.empty()) {
          return Status::invalid_input(std::string(name) + ": a switch takes no value, got '" +
                                       value + "'");
        }
        flags.given.emplace_back(&flag, std::move(value));
        return Status::ok();
      }
      names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
    }
  }
  return Status::invalid_input(
      std::string(name) +
      ": unknown settings flag (expected one of docs/cli.md's settings flags, "
      "e.g. --hf-args)");
}

void add_settings_flags(CLI::App& command, SettingsFlags& flags) {
  command
      .add_option("--settings", flags.settings_file,
                  "RunSettings JSON file (docs/cli-json.md); flags override its fields")
      ->type_name("FILE")
      ->group("Settings file");
  for (const SettingsFlag& flag : all_flags()) {
    const SettingsFlag* row = &flag;
    if (flag.value_name == nullptr) {
      command
          .add_flag_function(
              flag.names,
              [&flags, row](int64_t count) {
                if (count > 0) flags.given.emplace_back(row, "");  // not for --lora=false
              },
              flag.help)
          ->group(flag.group);
      continue;
    }
    command.add_option(flag.names, flag.help)
        ->type_name(flag.value_name)
        ->group(flag.group)
        ->multi_option_policy(flag.repeatable ? CLI::MultiOptionPolicy::TakeAll
                                              : CLI::MultiOptionPolicy::TakeLast)
        ->each([&flags, row](const std::string& value) { flags.given.emplace_back(row, value); });
  }
}

bool flag_given(const SettingsFlags& flags, std::string_view wanted) {
  return std::any_of(flags.given.begin(), flags.given.end(),
                     [&](const auto& given) { return primary_name(*given.first) == wanted; });
}

std::vector<std::string> given_values(const SettingsFlags& flags, std::string_view wanted) {
  std::vector<std::string> values;
  for (const auto& [flag, value] : flags.given) {
    if (primary_name(*flag) == wanted) values.push_back(value);
  }
  return values;
}

}  // namespace headroom::cli
