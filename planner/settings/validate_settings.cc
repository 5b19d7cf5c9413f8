#include "planner/settings/validate_settings.h"

#include <string>

#include "planner/settings/may_change.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_grpo.h"
#include "planner/settings/validate_unsloth.h"
#include "planner/settings/versions.h"

namespace headroom::planner {
namespace {

Status fail(std::string_view origin, std::string_view field, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": " + std::string(field) + ": " + what);
}

}  // namespace

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
    {"target_tokens", [](const RunSettings& s) { return s.target_tokens.value_or(1); }, 1, kMaxSeqLen, ""},
    {"shortest_sample", [](const RunSettings& s) { return s.shortest_sample.value_or(1); }, 1, kMaxSeqLen, ""},
    {"host_ram_bytes", [](const RunSettings& s) { return s.host_ram_bytes.value_or(1); }, 1, kMaxBudgetBytes, ""},
    {"disk_free_bytes", [](const RunSettings& s) { return s.disk_free_bytes.value_or(0); }, 0, kMaxBudgetBytes, ""},
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

// Every integer and real setting within its documented range.
Status check_ranges(const RunSettings& s, std::string_view origin) {
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
  return Status::ok();
}

// The batch: micro-batch x accumulation x GPUs, and the global batch they must make.
Status check_batch(const RunSettings& s, std::string_view origin) {
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
  return Status::ok();
}

// Where the optimizer and the parameters may be offloaded, by whom (DeepSpeed, FSDP2, torchao).
Status check_offload(const RunSettings& s, std::string_view origin) {
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
  return Status::ok();
}

// How the optimizer steps: in backward, paged.
Status check_optimizer(const RunSettings& s, std::string_view origin) {
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
  return Status::ok();
}

// Adapters scoped to parts of the model.
Status check_scoped_lora(const RunSettings& s, std::string_view origin) {
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
  return Status::ok();
}

// Stack mechanisms and the runs they apply to: paged states, compiled loss, fp8, GPTQ.
Status check_mechanisms(const RunSettings& s, std::string_view origin) {
  if (s.paged_optimizer && s.offload_optimizer != Offload::kNone) {
    return fail(origin, "paged_optimizer", "a paged optimizer runs on the GPU: expected offload_optimizer none");
  }
  if (s.compile_loss && !s.compile) {
    return fail(origin, "compile_loss", "only torch.compile compiles the loss: expected compile true with it");
  }
  if (s.repeat_kv && s.attention == models::AttentionImpl::kEager) {
    return fail(origin, "repeat_kv", "eager attention always copies grouped K/V to every head: expected attention "
                                     "sdpa, flex or triton with repeat_kv");
  }
  if (s.layer_rope_caches && s.stack != Stack::kTorchtune && !runs_transformers_models(s.stack)) {
    return fail(origin, "layer_rope_caches",
                "only transformers' and torchtune's rotary modules keep caches: expected stack hf-trainer, deepspeed, "
                "torch-amp, torchtune or unspecified with it, got " + std::string(stack_name(s.stack)));
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
  return Status::ok();
}

// What the batches hold: padded samples or packed documents.
// DoRA: PEFT's use_dora or torchtune's DoRALinear on LoRA's adapted linears
// (planner/mechanisms/dora.h); litgpt's and Unsloth's own LoRA layers have none priced.
Status check_dora(const RunSettings& s, std::string_view origin) {
  if (!s.lora.dora) return Status::ok();
  if (s.mode == TrainMode::kFull) {
    return fail(origin, "lora.dora", "DoRA decomposes LoRA's adapted weights: expected mode lora or qlora with it, got full");
  }
  if (s.stack == Stack::kLitgpt || s.stack == Stack::kUnsloth) {
    return fail(origin, "lora.dora", "DoRA is priced as PEFT and torchtune build it; the " +
                                         std::string(stack_name(s.stack)) + " stack's LoRA layers are its own: expected "
                                         "false, or stack hf-trainer or torchtune");
  }
  return Status::ok();
}

Status check_sequences(const RunSettings& s, std::string_view origin) {
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
  return Status::ok();
}

// Hybrid sharding and FSDP-only settings.
Status check_sharding(const RunSettings& s, std::string_view origin) {
  if (s.shard_gpus > 0 && s.world_size() % s.shard_gpus != 0) {
    return fail(origin, "shard_gpus",
                "expected a divisor of the GPU count (" + std::to_string(s.world_size()) +
                    "): hybrid sharding replicates whole shard groups, got " + std::to_string(s.shard_gpus));
  }
  if (s.reduce_dtype && !shards_with_fsdp(s)) {
    return fail(origin, "reduce_dtype",
                "FSDP's reduce dtype: expected sharding fsdp1 or fsdp2 (or a stack that shards with FSDP) with it");
  }
  // litgpt/finetune/lora.py (at 2685705): "Quantization is currently not supported
  // for multi-GPU training" (NotImplementedError before the strategy is built).
  if (s.stack == Stack::kLitgpt && s.mode == TrainMode::kQlora && s.world_size() > 1) {
    return fail(origin, "mode", "litgpt's finetune scripts refuse a quantized model on more than one GPU "
                "(litgpt/finetune/lora.py: NotImplementedError); expected gpus 1 with qlora under stack litgpt");
  }
  if (s.fsdp_no_sync && !shards_with_fsdp(s)) {
    return fail(origin, "fsdp_no_sync",
                "FSDP's accumulation: expected sharding fsdp1 or fsdp2 (or a stack that shards with FSDP) with it");
  }
  return Status::ok();
}

// The QLoRA preparation and autocast over 16-bit weights.
Status check_kbit_prep(const RunSettings& s, std::string_view origin) {
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
  return Status::ok();
}

// What torch's FSDPs can offload and wrap.
Status check_fsdp(const RunSettings& s, std::string_view origin) {
  if (shards_with_fsdp(s) && s.offload_param == Offload::kNvme) {
    return fail(origin, "offload_param", "FSDP offloads parameters to the CPU only: expected cpu or none");
  }
  if (s.zero_stage == 3 && shards_with_fsdp(s) && s.offload_optimizer == Offload::kNvme) {
    return fail(origin, "offload_optimizer", "FSDP has no NVMe offload (ZeRO-Infinity is DeepSpeed's): expected cpu or none");
  }
  // Without resharding (zero_stage 2) FSDP has no offload: its CPU offload moves the
  // parameters with the optimizer, which needs zero_stage 3.
  if (fsdp_keeps_unsharded(s, s.zero_stage) && s.offload_optimizer != Offload::kNone) {
    return fail(origin, "offload_optimizer",
                "FSDP offloads the optimizer only with the parameters (CPUOffloadPolicy, CPUOffload(offload_params=True)), "
                "which needs zero_stage 3: expected none at zero_stage 2 under FSDP");
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
  return Status::ok();
}

// The checkpointing policy.
Status check_checkpointing(const RunSettings& s, std::string_view origin) {
  if (s.checkpointing == CheckpointPolicy::kList && s.checkpoint_blocks.empty()) {
    return fail(origin, "checkpoint_blocks", "expected at least one block name with a list checkpointing policy");
  }
  // An offloaded block's copies run beside the ZeRO-3 parameter fetches the
  // step model does not overlap them with (step_builder.cc allow_offload).
  if (Result<KnobSet> knobs = knobs_of(s, origin); !knobs.is_ok()) return knobs.status();
  if (!s.offload_blocks.empty() && s.offload_param != Offload::kNone) {
    return fail(origin, "offload_blocks",
                "expected no activation offload with parameter offload (offload_param none, or no offload_blocks)");
  }
  return Status::ok();
}

}  // namespace

// Reward modelling as TRL 1.16's RewardTrainer runs it (docs/stacks.md, "Recipes").
Status check_reward_recipe(const RunSettings& s, std::string_view origin) {
  if (s.stack != Stack::kHfTrainer && s.stack != Stack::kUnspecified) {
    return fail(origin, "recipe", "reward modelling is modelled as TRL's RewardTrainer over the Trainer: expected "
                                  "stack hf-trainer, got " + std::string(stack_name(s.stack)));
  }
  const std::optional<Release> trl = release_of(s.versions, "trl");
  if (trl && *trl < Release{0, 24, 0}) {
    return fail(origin, "recipe", "RewardTrainer before TRL 0.24 runs the chosen and the rejected rows as two "
                                  "forwards (compute_loss), which is not modelled: expected trl 0.24 or later");
  }
  return Status::ok();
}

// DPO as TRL 1.16's DPOTrainer runs it (docs/stacks.md, "Recipes"): what is modelled.
Status check_recipe(const RunSettings& s, std::string_view origin) {
  const bool dpo = s.recipe == Recipe::kDpo;
  if (Status grpo = check_grpo_recipe(s, origin); !grpo.is_ok() || s.recipe == Recipe::kGrpo) return grpo;
  if (s.reference && !dpo) {
    return fail(origin, "reference", "the reference model is DPO's and GRPO's: expected recipe dpo or grpo with it");
  }
  if (s.recipe == Recipe::kReward) return check_reward_recipe(s, origin);
  if (!dpo) return Status::ok();
  if (s.stack != Stack::kHfTrainer && s.stack != Stack::kUnspecified) {
    return fail(origin, "recipe", "DPO is modelled as TRL's DPOTrainer over the Trainer: expected stack hf-trainer, got " +
                                      std::string(stack_name(s.stack)));
  }
  const std::optional<Release> trl = release_of(s.versions, "trl");
  if (trl && *trl < Release{1, 15, 0}) {
    return fail(origin, "recipe", "TRL before 1.15 scores DPO over the full logits (concatenated_forward), which is not "
                                  "modelled: expected trl 1.15 or later (its fused LM head)");
  }
  if (s.zero_stage == 3) {
    return fail(origin, "recipe", "DPO's reference model under ZeRO-3 or FSDP (prepare_deepspeed, prepare_fsdp) is not "
                                  "modelled: expected zero_stage 0 to 2");
  }
  const Reference reference = s.reference.value_or(s.mode == TrainMode::kFull ? Reference::kCopy
                                                                              : Reference::kAdapterDisabled);
  if (reference == Reference::kAdapterDisabled && s.mode == TrainMode::kFull) {
    return fail(origin, "reference", "adapter-disabled needs adapters to disable: expected mode lora or qlora, or "
                                     "reference copy or precomputed");
  }
  if (reference == Reference::kCopy && s.mode != TrainMode::kFull) {
    return fail(origin, "reference", "a second model beside a LoRA policy is not modelled: expected reference "
                                     "adapter-disabled (TRL's default with PEFT) or precomputed");
  }
  return Status::ok();
}

Status validate_settings(const RunSettings& s, std::string_view origin) {
  // In this order: the first check a run fails names its field.
  using Check = Status (*)(const RunSettings&, std::string_view);
  for (Check check : {check_ranges, check_batch, check_offload, check_optimizer, check_scoped_lora, check_dora, check_mechanisms, check_sequences, check_sharding, check_kbit_prep, check_fsdp, check_checkpointing, check_recipe, check_unsloth}) {
    if (Status status = check(s, origin); !status.is_ok()) return status;
  }
  return Status::ok();
}

}  // namespace headroom::planner
