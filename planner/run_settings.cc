#include "planner/run_settings.h"

#include <array>
#include <nlohmann/json.hpp>

#include "planner/json_fields.h"
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

constexpr std::array<std::pair<Precision, std::string_view>, 6> kPrecisions = {{
    {Precision::kFp32, "fp32"},
    {Precision::kBf16Mixed, "bf16-mixed"},
    {Precision::kFp16Mixed, "fp16-mixed"},
    {Precision::kBf16Pure, "bf16"},
    {Precision::kBf16Amp, "bf16-amp"},
    {Precision::kFp16Amp, "fp16-amp"},
}};
constexpr std::array<std::pair<OptimizerKind, std::string_view>, 5> kOptimizers = {{
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kAdamW8bit, "adamw-8bit"},
    {OptimizerKind::kAdamW4bit, "adamw-4bit"},
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
constexpr std::array<std::pair<models::AttentionImpl, std::string_view>, 4> kAttentions = {{
    {models::AttentionImpl::kEager, "eager"},
    {models::AttentionImpl::kSdpa, "sdpa"},
    {models::AttentionImpl::kFlex, "flex"},
    {models::AttentionImpl::kTritonFlash, "triton"},
}};
constexpr std::array<std::pair<CpuOffloadImpl, std::string_view>, 3> kCpuOffloads = {{
    {CpuOffloadImpl::kZeroOffload, "zero-offload"},
    {CpuOffloadImpl::kTorchao, "torchao"},
    {CpuOffloadImpl::kTorchaoGradients, "torchao-offload-gradients"},
}};
constexpr std::array<std::pair<BlockChoice, std::string_view>, 3> kChoices = {{
    {BlockChoice::kKeep, "keep"},
    {BlockChoice::kCheckpoint, "checkpoint"},
    {BlockChoice::kOffload, "offload"},
}};

Status fail(std::string_view origin, std::string_view field, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": " + std::string(field) + ": " + what);
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
std::optional<BlockChoice> parse_block_choice(std::string_view text) { return parse_of(kChoices, text); }
std::string_view cpu_offload_name(CpuOffloadImpl value) { return name_of(kCpuOffloads, value); }
std::string_view attention_name(models::AttentionImpl value) { return name_of(kAttentions, value); }
std::optional<models::AttentionImpl> parse_attention(std::string_view text) { return parse_of(kAttentions, text); }
std::optional<CpuOffloadImpl> parse_cpu_offload(std::string_view text) { return parse_of(kCpuOffloads, text); }

namespace {

// One row per integer setting: its name in messages and JSON, its value, and
// the documented range (docs/cli-json.md). A new setting is one row.
struct IntegerRange {
  std::string_view field;
  int64_t (*value)(const RunSettings&);
  int64_t min;
  int64_t max;
  std::string_view note;  // what a special value means, for the message
};

const IntegerRange kIntegerRanges[] = {
    {"micro_batch", [](const RunSettings& s) { return s.micro_batch; }, 1, kMaxMicroBatch, ""},
    {"seq_len", [](const RunSettings& s) { return s.seq_len; }, 0, kMaxSeqLen, "0: the model's default"},
    {"resolution", [](const RunSettings& s) { return s.resolution; }, 0, kMaxResolution, "0: the model's default"},
    {"grad_accum", [](const RunSettings& s) { return s.grad_accum; }, 1, kMaxGradAccum, ""},
    {"global_batch", [](const RunSettings& s) { return s.global_batch; }, 0, kMaxGlobalBatch,
     "0: micro_batch x grad_accum x GPUs"},
    {"gpus_per_node", [](const RunSettings& s) -> int64_t { return s.gpus_per_node; }, 1, kMaxGpusPerNode, ""},
    {"shard_gpus", [](const RunSettings& s) -> int64_t { return s.shard_gpus; }, 0, kMaxGpusPerNode * kMaxNodes,
     "0: every GPU"},
    {"nodes", [](const RunSettings& s) -> int64_t { return s.nodes; }, 1, kMaxNodes, ""},
    {"zero_stage", [](const RunSettings& s) -> int64_t { return s.zero_stage; }, 0, 3, ""},
    {"max_zero_stage", [](const RunSettings& s) -> int64_t { return s.max_zero_stage; }, 0, 3, ""},
    {"lora.rank", [](const RunSettings& s) { return s.lora.rank; }, 1, kMaxLoraRank, ""},
    {"reduce_bucket_elements", [](const RunSettings& s) { return s.reduce_bucket_elements; }, 1, kMaxBucketElements, ""},
    {"allgather_bucket_elements", [](const RunSettings& s) { return s.allgather_bucket_elements; }, 1,
     kMaxBucketElements, ""},
    {"prefetch_bucket_elements", [](const RunSettings& s) { return s.prefetch_bucket_elements; }, 1,
     kMaxBucketElements, ""},
    {"max_live_parameters", [](const RunSettings& s) { return s.max_live_parameters; }, 1, kMaxBucketElements, ""},
    {"sub_group_elements", [](const RunSettings& s) { return s.sub_group_elements; }, 1, kMaxBucketElements, ""},
    {"gpu_memory_bytes", [](const RunSettings& s) { return s.gpu_memory_bytes.value_or(1); }, 1, kMaxBudgetBytes, ""},
    {"cuda_context_bytes", [](const RunSettings& s) { return s.cuda_context_bytes.value_or(0); }, 0,
     kMaxContextBytes, ""},
    {"document_tokens", [](const RunSettings& s) { return s.document_tokens.value_or(1); }, 1, kMaxSeqLen, ""},
    {"text_tokens", [](const RunSettings& s) { return s.text_tokens.value_or(1); }, 1, kMaxSeqLen, ""},
    {"shortest_sample", [](const RunSettings& s) { return s.shortest_sample.value_or(1); }, 1, kMaxSeqLen, ""},
    {"host_ram_bytes", [](const RunSettings& s) { return s.host_ram_bytes; }, 1, kMaxBudgetBytes, ""},
    {"disk_free_bytes", [](const RunSettings& s) { return s.disk_free_bytes; }, 0, kMaxBudgetBytes, ""},
    {"checkpoints_kept", [](const RunSettings& s) -> int64_t { return s.checkpoints_kept; }, 1, 1000, ""},
};

// One row per real-valued setting: its value and whether it is in range.
struct RealRange {
  std::string_view field;
  double (*value)(const RunSettings&);
  bool (*in_range)(double);
  std::string_view expected;
};

const RealRange kRealRanges[] = {
    {"safety_margin", [](const RunSettings& s) { return s.safety_margin; }, [](double v) { return v >= 0 && v < 0.5; },
     "a fraction in [0, 0.5)"},
    {"lora.dropout", [](const RunSettings& s) { return s.lora.dropout; }, [](double v) { return v >= 0 && v < 1; },
     "a probability in [0, 1)"},
    {"dropout", [](const RunSettings& s) { return s.dropout.value_or(0); }, [](double v) { return v >= 0 && v < 1; },
     "a probability in [0, 1)"},
    {"network_gbps", [](const RunSettings& s) { return s.network_gbps; },
     [](double v) { return v > 0 && v <= kMaxBandwidthGbps; }, "a bandwidth in GB/s above 0, at most 1000000"},
    {"nvme_gbps", [](const RunSettings& s) { return s.nvme_gbps; },
     [](double v) { return v > 0 && v <= kMaxBandwidthGbps; }, "a bandwidth in GB/s above 0, at most 1000000"},
};

}  // namespace

Status validate_settings(const RunSettings& s, std::string_view origin) {
  for (const IntegerRange& range : kIntegerRanges) {
    const int64_t value = range.value(s);
    if (value < range.min || value > range.max) {
      return fail(origin, range.field,
                  "expected an integer from " + std::to_string(range.min) + " to " + std::to_string(range.max) +
                      (range.note.empty() ? "" : " (" + std::string(range.note) + ")") + ", got " +
                      std::to_string(value));
    }
  }
  for (const RealRange& range : kRealRanges) {
    const double value = range.value(s);
    if (!range.in_range(value)) {  // NaN fails every comparison, so it is refused too
      return fail(origin, range.field, "expected " + std::string(range.expected) + ", got " + std::to_string(value));
    }
  }
  // In range one by one, the product may still be absurd; the ranges above
  // keep it far inside int64 (1024 x 10^6 x 262144 < 2^63).
  const int64_t product = s.micro_batch * s.grad_accum * s.world_size();
  if (product > kMaxGlobalBatch) {
    return fail(origin, "grad_accum",
                "expected micro_batch x grad_accum x GPUs at most " + std::to_string(kMaxGlobalBatch) +
                    " samples per step, got " + std::to_string(s.micro_batch) + " x " + std::to_string(s.grad_accum) +
                    " x " + std::to_string(s.world_size()) + " = " + std::to_string(product));
  }
  if (s.global_batch > 0 && s.global_batch % s.world_size() != 0) {
    return fail(origin, "global_batch", "expected a multiple of the number of GPUs (" + std::to_string(s.world_size()) + "), got " + std::to_string(s.global_batch));
  }
  if (s.global_batch > 0 && s.global_batch != product && s.grad_accum != 1) {
    return fail(origin, "global_batch", "expected micro_batch x grad_accum x GPUs = " + std::to_string(product) +
                ", got " + std::to_string(s.global_batch) + " (give either the global batch or the accumulation steps)");
  }
  if (s.global_batch > 0 && s.global_batch / s.world_size() / s.micro_batch > kMaxGradAccum) {
    return fail(origin, "global_batch",
                "expected at most " + std::to_string(kMaxGradAccum) + " accumulation steps of micro_batch " +
                    std::to_string(s.micro_batch) + " per GPU, got " + std::to_string(s.global_batch) +
                    " samples (raise micro_batch or lower global_batch)");
  }
  if (s.offload_param != Offload::kNone && s.zero_stage != 3) {
    return fail(origin, "offload_param", "parameter offload needs ZeRO stage 3 (DeepSpeed refuses it below), got stage " + std::to_string(s.zero_stage));
  }
  if (s.offload_optimizer == Offload::kNvme && s.zero_stage != 3) {
    return fail(origin, "offload_optimizer", "NVMe optimizer offload needs ZeRO stage 3 (ZeRO-Infinity), got stage " + std::to_string(s.zero_stage));
  }
  if (s.zero_stage == 3 && shards_with_fsdp2(s) &&
      (s.offload_param == Offload::kCpu) != (s.offload_optimizer == Offload::kCpu) &&
      s.offload_param != Offload::kNvme && s.offload_optimizer != Offload::kNvme) {
    // fully_shard(offload_policy=CPUOffloadPolicy()) moves the sharded parameters,
    // their gradients and so the optimizer step to the host at once.
    return fail(origin, s.offload_param == Offload::kCpu ? "offload_optimizer" : "offload_param",
                "FSDP2's CPUOffloadPolicy (stack " + std::string(stack_name(s.stack)) +
                    ") offloads parameters, gradients and the optimizer together: expected offload_param cpu and "
                    "offload_optimizer cpu, or neither");
  }
  // cpu_offload says how a CPU optimizer offload runs, whether the user or the
  // planner chooses it.
  const bool torchao_offload = s.cpu_offload != CpuOffloadImpl::kZeroOffload;
  if (torchao_offload && s.offload_optimizer == Offload::kCpu && (s.world_size() != 1 || s.zero_stage != 0)) {
    // torchao/optim/cpu_offload.py: "Offload optimizer to CPU for single-GPU training".
    return fail(origin, "cpu_offload", "torchao's CPUOffloadOptimizer is for single-GPU training: expected 1 GPU and zero_stage 0");
  }
  if (s.cpu_offload == CpuOffloadImpl::kTorchaoGradients && s.grad_accum > 1) {
    return fail(origin, "cpu_offload",
                "offload_gradients frees each gradient once copied out, which torchao says is not compatible with "
                "gradient accumulation: expected grad_accum 1");
  }
  if (s.offload_optimizer == Offload::kCpu && s.zero_stage == 0 && !torchao_offload) {
    return fail(origin, "offload_optimizer", "optimizer offload needs ZeRO stage 1, 2 or 3 (ZeRO-Offload), got stage 0");
  }
  if (s.optimizer_impl == OptimizerImpl::kInBackward &&
      (s.grad_accum > 1 || s.zero_stage > 0 || s.offload_optimizer != Offload::kNone)) {
    // torchtune's recipes refuse the same (full_finetune_single_device.py: optimizer_in_bwd).
    return fail(origin, "optimizer_impl",
                "in-backward steps each gradient as it is produced: expected grad_accum 1, zero_stage 0 and no "
                "optimizer offload");
  }
  if (s.paged_optimizer && s.optimizer != OptimizerKind::kAdamW && s.optimizer != OptimizerKind::kAdamW8bit) {
    return fail(origin, "paged_optimizer",
                "bitsandbytes has paged AdamW (32-bit) and AdamW8bit only: expected optimizer adamw or adamw-8bit, got " +
                    std::string(optimizer_name(s.optimizer)));
  }
  for (size_t i = 0; i < s.scoped_lora.size(); ++i) {
    const ScopedLora& l = s.scoped_lora[i];
    const std::string field = "scoped_lora[" + std::to_string(i) + "]";
    if (s.mode == TrainMode::kFull) return fail(origin, field, "adapters need mode lora or qlora, got full");
    if (l.scope.empty()) return fail(origin, field + ".scope", "expected a glob over module names, such as *vision_tower*");
    if (l.lora.rank < 1 || l.lora.rank > kMaxLoraRank) {
      return fail(origin, field + ".rank",
                  "expected an integer from 1 to " + std::to_string(kMaxLoraRank) + ", got " + std::to_string(l.lora.rank));
    }
    if (!(l.lora.dropout >= 0 && l.lora.dropout < 1)) {
      return fail(origin, field + ".dropout", "expected a probability in [0, 1), got " + std::to_string(l.lora.dropout));
    }
  }
  if (s.paged_optimizer && s.offload_optimizer != Offload::kNone) {
    return fail(origin, "paged_optimizer", "a paged optimizer runs on the GPU: expected offload_optimizer none");
  }
  if (s.compile_loss && !s.compile) {
    return fail(origin, "compile_loss", "only torch.compile compiles the loss: expected compile true with it");
  }
  if (s.float8 != Float8Recipe::kNone && s.mode != TrainMode::kFull) {
    return fail(origin, "float8",
                "torchao's Float8Linear converts the trained linears of a full fine-tune (LoRA and QLoRA bases are "
                "not converted): expected mode full, got " + std::string(mode_name(s.mode)));
  }
  if (s.quant == QuantFormat::kGptq && s.mode != TrainMode::kQlora) {
    return fail(origin, "quant", "GPTQ stores the frozen base of QLoRA: expected mode qlora with quant gptq, got " +
                                     std::string(mode_name(s.mode)));
  }
  if (s.quant == QuantFormat::kGptq && s.precision == Precision::kFp32) {
    return fail(origin, "quant", "AutoGPTQ's QuantLinear computes in fp16 (x.half(), fp16 scales): expected a 16-bit "
                                 "precision with quant gptq, got fp32");
  }
  if (s.gptq_group_size < 1 && s.gptq_group_size != -1) {
    return fail(origin, "gptq_group_size", "a positive number of input rows per scale, or -1 for one group per "
                                           "linear (GPTQ group_size; 128 usually), got " + std::to_string(s.gptq_group_size));
  }
  if (s.gptq_group_size != kGptqDefaultGroupSize && s.quant != QuantFormat::kGptq) {
    return fail(origin, "gptq_group_size", "GPTQ's group size applies to a GPTQ base: expected quant gptq with it");
  }
  if (s.float8_all_gather && s.float8 == Float8Recipe::kNone) {
    return fail(origin, "float8_all_gather", "the fp8 all-gather is of Float8Linear weights: expected float8 tensorwise "
                "or tensorwise-fp8-input with it");
  }
  if (s.float8_all_gather && (s.zero_stage != 3 || !shards_with_fsdp2(s))) {
    return fail(origin, "float8_all_gather",
                "enable_fsdp_float8_all_gather casts FSDP2's weight shards before their all-gather: expected "
                "zero_stage 3 with a stack that shards with FSDP2 (torchtitan, torchtune, litgpt)");
  }
  if (s.shortest_sample && s.seq_len > 0 && *s.shortest_sample > s.seq_len) {
    return fail(origin, "shortest_sample",
                "expected at most seq_len (" + std::to_string(s.seq_len) + "), the longest a padded batch can be, got " +
                    std::to_string(*s.shortest_sample));
  }
  if (s.shortest_sample && s.document_tokens) {
    return fail(origin, "shortest_sample",
                "document_tokens describes packed rows, shortest_sample unpacked batches padded to their longest "
                "sample: expected one of them");
  }
  if (s.document_tokens && s.attention != models::AttentionImpl::kFlex) {
    return fail(origin, "document_tokens",
                "a document mask skips tiles only in flex attention (SDPA and eager attention compute every tile of "
                "a dense mask): expected attention flex");
  }
  if (s.shard_gpus > 0 && s.world_size() % s.shard_gpus != 0) {
    return fail(origin, "shard_gpus",
                "expected a divisor of the GPU count (" + std::to_string(s.world_size()) +
                    "): hybrid sharding replicates whole shard groups, got " + std::to_string(s.shard_gpus));
  }
  if (s.reduce_dtype && !shards_with_fsdp(s)) {
    return fail(origin, "reduce_dtype",
                "FSDP's reduce dtype: expected sharding fsdp1 or fsdp2 (or a stack that shards with FSDP) with it");
  }
  if (s.fsdp_no_sync && !shards_with_fsdp(s)) {
    return fail(origin, "fsdp_no_sync",
                "FSDP's accumulation: expected sharding fsdp1 or fsdp2 (or a stack that shards with FSDP) with it");
  }
  if (s.kbit_prep && s.mode != TrainMode::kQlora) {
    return fail(origin, "kbit_prep",
                "the QLoRA preparation: expected it only with mode qlora, got mode " + std::string(mode_name(s.mode)));
  }
  if (s.autocast && !autocast_matters(s)) {
    return fail(origin, "autocast",
                "autocast over the 16-bit weights: expected it only with precision bf16, or bf16-mixed/fp16-mixed "
                "sharded by FSDP at zero_stage 3 (bf16-amp and fp16-amp are autocast over fp32 weights by "
                "definition, DeepSpeed-style mixed precision runs the engine's 16-bit module), got precision " +
                    std::string(precision_name(s.precision)));
  }
  if (s.kbit_prep && *s.kbit_prep != KbitPrep::kNone) {
    const std::string given = "got " + std::string(kbit_prep_name(*s.kbit_prep));
    // peft/utils/other.py prepare_model_for_kbit_training: `if not is_gptq_quantized ...`
    // around the fp32 cast (peft >= 0.5).
    if (s.quant == QuantFormat::kGptq) {
      return fail(origin, "kbit_prep",
                  "none with quant gptq: PEFT's prepare_model_for_kbit_training casts nothing in a GPTQ model; " +
                      given);
    }
    // DeepSpeed's engine casts the module to 16 bits after the script's preparation
    // (runtime/engine.py _configure_distributed_model: module.bfloat16()).
    if (s.precision == Precision::kBf16Mixed || s.precision == Precision::kFp16Mixed) {
      return fail(origin, "kbit_prep",
                  "none under precision " + std::string(precision_name(s.precision)) +
                      " (the model is cast to 16 bits with fp32 masters, undoing the upcast; for the Trainer's "
                      "bf16=True over a model loaded in bf16 give precision bf16); " + given);
    }
    if (s.zero_stage > 0) {
      return fail(origin, "kbit_prep",
                  "none with zero_stage " + std::to_string(s.zero_stage) +
                      " (DeepSpeed's engine casts the module to 16 bits after the preparation, and TRL skips it for "
                      "sharded QLoRA); " + given);
    }
    if (s.precision == Precision::kBf16Pure && s.stack != Stack::kHfTrainer && s.stack != Stack::kUnspecified) {
      return fail(origin, "kbit_prep",
                  "none under stack " + std::string(stack_name(s.stack)) +
                      " with precision bf16 (the upcast is modelled under the Trainer's autocast, stack "
                      "hf-trainer); " + given);
    }
    if (s.autocast == false) {
      return fail(origin, "kbit_prep",
                  "none with autocast off (without autocast the upcast residual stream would meet 16-bit "
                  "matmuls; the preparation is modelled under the Trainer's autocast); " + given);
    }
  }
  if (shards_with_fsdp(s) && s.offload_param == Offload::kNvme) {
    return fail(origin, "offload_param", "FSDP offloads parameters to the CPU only: expected cpu or none");
  }
  if (s.zero_stage == 3 && shards_with_fsdp(s) && s.offload_optimizer == Offload::kNvme) {
    return fail(origin, "offload_optimizer", "FSDP has no NVMe offload (ZeRO-Infinity is DeepSpeed's): expected cpu or none");
  }
  const bool fsdp1 = s.zero_stage == 3 && sharding_of(s) == Sharding::kFsdp1;
  if (s.fsdp_wrap != FsdpWrap::kLayers && !fsdp1) {
    return fail(origin, "fsdp_wrap", "FSDP1's wrapping: expected layers unless zero_stage is 3 with sharding fsdp1");
  }
  // FSDP1's CPUOffload(offload_params=True) moves parameters, gradients and so the
  // optimizer step to the host together (torch/distributed/fsdp/api.py CPUOffload).
  if (fsdp1 && (s.offload_param != Offload::kNone || s.offload_optimizer != Offload::kNone)) {
    if (s.offload_param != Offload::kCpu || s.offload_optimizer != Offload::kCpu) {
      return fail(origin, s.offload_param != Offload::kCpu ? "offload_param" : "offload_optimizer",
                  "FSDP1's CPUOffload offloads parameters and the optimizer together: expected offload_param and "
                  "offload_optimizer both cpu, or both none");
    }
    // Its docstring's limitation (fully_sharded_data_parallel.py, "Limitations"): outside
    // no_sync() the offloaded gradient is overwritten, not accumulated, each micro-step
    // (_flat_param.py prepare_gradient_for_backward). Only a stack that accumulates
    // under no_sync (the Trainer, Accelerate) trains on every micro-batch.
    if (s.accumulates() && !resolve_stack(s).bottom.fsdp_no_sync) {
      return fail(origin, "grad_accum",
                  "1 with FSDP1's CPUOffload unless the stack accumulates under no_sync (fsdp_no_sync true, as the "
                  "Trainer and Accelerate do): outside no_sync each micro-step's offloaded gradient replaces the "
                  "last one, so all but the last micro-batch are lost");
    }
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
  if (s.sharding) j["sharding"] = sharding_name(*s.sharding);
  if (s.reduce_dtype) j["reduce_dtype"] = reduce_dtype_name(*s.reduce_dtype);
  if (s.fsdp_wrap != FsdpWrap::kLayers) j["fsdp_wrap"] = fsdp_wrap_name(s.fsdp_wrap);
  if (s.fsdp_no_sync) j["fsdp_no_sync"] = *s.fsdp_no_sync;
  if (s.kbit_prep) j["kbit_prep"] = kbit_prep_name(*s.kbit_prep);
  if (s.autocast) j["autocast"] = *s.autocast;
  j["compile"] = s.compile;
  if (s.compile_loss) j["compile_loss"] = *s.compile_loss;
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
  j["lora"] = {{"rank", s.lora.rank}, {"targets", s.lora.targets}, {"dropout", s.lora.dropout}};
  if (!s.scoped_lora.empty()) {
    nlohmann::json scoped = nlohmann::json::array();
    for (const ScopedLora& l : s.scoped_lora) {
      scoped.push_back({{"scope", l.scope}, {"rank", l.lora.rank}, {"targets", l.lora.targets}, {"dropout", l.lora.dropout}});
    }
    j["scoped_lora"] = scoped;
  }
  j["attention"] = attention_name(s.attention);
  if (s.dropout) j["dropout"] = *s.dropout;
  j["precomputed_text_embeddings"] = s.precomputed_text_embeddings;
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
  j["gpu"] = s.gpu;
  if (s.gpu_memory_bytes) j["gpu_memory_bytes"] = *s.gpu_memory_bytes;
  if (s.cuda_context_bytes) j["cuda_context_bytes"] = *s.cuda_context_bytes;
  if (s.document_tokens) j["document_tokens"] = *s.document_tokens;
  if (s.shortest_sample) j["shortest_sample"] = *s.shortest_sample;
  if (s.text_tokens) j["text_tokens"] = *s.text_tokens;
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

Result<RunSettings> settings_from_json(const nlohmann::json& j, std::string_view origin) {
  if (!j.is_object()) return fail(origin, "settings", "expected a JSON object");
  RunSettings s;
  std::string attention = "sdpa";
  std::string checkpointing = "none";
  // Strict: no coercion, and a key no line below reads is refused (JsonFields).
  JsonFields r(j, origin, "settings.");
  const Status statuses[] = {
      r.read("model", s.model),
      r.read_enum("stack", s.stack, parse_stack, kStackNames),
      r.read_enum("optimizer_impl", s.optimizer_impl, parse_optimizer_impl, kOptimizerImplNames),
      r.read_enum("loss", s.loss, parse_loss, kLossNames),
      r.read_enum("recompute", s.recompute, parse_recompute, kRecomputeNames),
      r.read_enum("adapter_dtype", s.adapter_dtype, parse_adapter_dtype, kAdapterDtypeNames),
      r.read_enum("sharding", s.sharding, parse_sharding, kShardingNames),
      r.read_enum("reduce_dtype", s.reduce_dtype, parse_reduce_dtype, kReduceDtypeNames),
      r.read_enum("fsdp_wrap", s.fsdp_wrap, parse_fsdp_wrap, kFsdpWrapNames),
      r.read("fsdp_no_sync", s.fsdp_no_sync),
      r.read_enum("kbit_prep", s.kbit_prep, parse_kbit_prep, kKbitPrepNames),
      r.read("autocast", s.autocast),
      r.read_enum("precision", s.precision, parse_precision, "fp32, bf16-mixed, fp16-mixed, bf16"),
      r.read_enum("optimizer", s.optimizer, parse_optimizer, "adamw, adamw-8bit, sgd, adafactor"),
      r.read_enum("mode", s.mode, parse_mode, "full, lora, qlora"),
      r.read("freeze_patterns", s.freeze_patterns),
      r.read("train_patterns", s.train_patterns),
      r.read("quantize_skip", s.quantize_skip),
      r.read("fsdp_own_groups", s.fsdp_own_groups),
      r.read("lora_skip", s.lora_skip),
      r.read("attention", attention),
      r.read("dropout", s.dropout),
      r.read("precomputed_text_embeddings", s.precomputed_text_embeddings),
      r.read("micro_batch", s.micro_batch),
      r.read("seq_len", s.seq_len),
      r.read("resolution", s.resolution),
      r.read("grad_accum", s.grad_accum),
      r.read("global_batch", s.global_batch),
      r.read("gpus_per_node", s.gpus_per_node),
      r.read("shard_gpus", s.shard_gpus),
      r.read("nodes", s.nodes),
      r.read("zero_stage", s.zero_stage),
      r.read_enum("offload_optimizer", s.offload_optimizer, parse_offload, "none, cpu, nvme"),
      r.read_enum("cpu_offload", s.cpu_offload, parse_cpu_offload, "zero-offload, torchao, torchao-offload-gradients"),
      r.read_enum("offload_param", s.offload_param, parse_offload, "none, cpu, nvme"),
      r.read("reduce_bucket_elements", s.reduce_bucket_elements),
      r.read("allgather_bucket_elements", s.allgather_bucket_elements),
      r.read("prefetch_bucket_elements", s.prefetch_bucket_elements),
      r.read("max_live_parameters", s.max_live_parameters),
      r.read("sub_group_elements", s.sub_group_elements),
      r.read("overlap_comm", s.overlap_comm),
      r.read("compile", s.compile),
      r.read("compile_loss", s.compile_loss),
      r.read_enum("float8", s.float8, parse_float8_recipe, kFloat8RecipeNames),
      r.read("float8_all_gather", s.float8_all_gather),
      r.read("nf4_double_quant", s.nf4_double_quant),
      r.read_enum("quant", s.quant, parse_quant_format, kQuantFormatNames),
      r.read("gptq_group_size", s.gptq_group_size),
      r.read("offload_checkpoint_inputs", s.offload_checkpoint_inputs),
      r.read("expandable_segments", s.expandable_segments),
      r.read("paged_optimizer", s.paged_optimizer),
      r.read("group_by_length", s.group_by_length),
      r.read("checkpointing", checkpointing),
      r.read("checkpoint_blocks", s.checkpoint_blocks),
      r.read("gpu", s.gpu),
      r.read("calibration_file", s.calibration_file),
      r.read("gpu_memory_bytes", s.gpu_memory_bytes),
      r.read("cuda_context_bytes", s.cuda_context_bytes),
      r.read("document_tokens", s.document_tokens),
      r.read("shortest_sample", s.shortest_sample),
      r.read("text_tokens", s.text_tokens),
      r.read("host_ram_bytes", s.host_ram_bytes),
      r.read("disk_free_bytes", s.disk_free_bytes),
      r.read("safety_margin", s.safety_margin),
      r.read("network_gbps", s.network_gbps),
      r.read("nvme_gbps", s.nvme_gbps),
      r.read("checkpoints_kept", s.checkpoints_kept),
      r.read("save_optimizer_state", s.save_optimizer_state),
      r.read("max_zero_stage", s.max_zero_stage),
      r.read("allow_cpu_offload", s.allow_cpu_offload),
      r.read("allow_nvme_offload", s.allow_nvme_offload),
      r.read("allow_activation_offload", s.allow_activation_offload),
      r.read("allow_micro_batch_change", s.allow_micro_batch_change),
  };
  for (const Status& status : statuses) {
    if (!status.is_ok()) return status;
  }
  if (const nlohmann::json* lora = r.member("lora")) {
    if (!lora->is_object()) return r.expected("lora", "an object {\"rank\", \"targets\", \"dropout\"}", *lora);
    JsonFields l(*lora, origin, "settings.lora.");
    for (const Status& status : {l.read("rank", s.lora.rank), l.read("targets", s.lora.targets),
                                 l.read("dropout", s.lora.dropout), l.unknown_keys()}) {
      if (!status.is_ok()) return status;
    }
  }
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
  if (Status unknown = r.unknown_keys(); !unknown.is_ok()) return unknown;
  if (const std::optional<models::AttentionImpl> parsed = parse_attention(attention)) {
    s.attention = *parsed;
  } else {
    return fail(origin, "settings.attention", "expected \"eager\", \"sdpa\", \"flex\" or \"triton\", got \"" + attention + "\"");
  }
  if (checkpointing == "every") {
    s.checkpointing = CheckpointPolicy::kEveryBlock;
  } else if (checkpointing == "list") {
    s.checkpointing = CheckpointPolicy::kList;
  } else if (checkpointing != "none") {
    return fail(origin, "settings.checkpointing", "expected \"none\", \"every\" or \"list\", got \"" + checkpointing + "\"");
  }
  const Status valid = validate_settings(s, origin);
  if (!valid.is_ok()) return valid;
  return s;
}

}  // namespace headroom::planner
