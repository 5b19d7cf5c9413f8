// The torch-free half of executor/run.h: what the executor can apply, option
// checks, and, in builds without LibTorch, a train_plan() that says so.
#include <algorithm>
#include <cmath>
#include <string>

#include "executor/executable_model.h"
#include "executor/run.h"
#include "planner/predict/moe_notes.h"
#include "planner/settings/bnb_release.h"
#include "planner/settings/stack.h"

namespace headroom::executor {
namespace {

// A plan the executor cannot apply (well-formed: the planner prices it).
Status refuse(std::string_view origin, const std::string& field, const std::string& why) {
  return Status::unsupported(std::string(origin) + ": " + field + ": " + why);
}

// A plan or option that is wrong in itself.
Status invalid(std::string_view origin, const std::string& field, const std::string& why) {
  return Status::invalid_input(std::string(origin) + ": " + field + ": " + why);
}

// ZeRO-3 runs as DeepSpeed's stage 3 (executor/zero3_parameters.h), with AdamW,
// for the families whose modules run every block through the BlockRunner.
Status check_zero3(const planner::Plan& plan, const ExecutableModel& model, std::string_view origin) {
  const planner::RunSettings& s = plan.settings;
  if (plan.config.offload_param != planner::Offload::kNone) {
    return refuse(origin, "config.offload_param",
                  "parameter offload (ZeRO-Infinity's offload_param) is not implemented in the executor; expected none");
  }
  // FSDP at ZeRO-2 shards the parameters too (planner::fsdp_shards_params).
  if (planner::fsdp_shards_params(s, plan.config.zero_stage)) {
    return refuse(origin, "settings.sharding",
                  std::string(planner::sharding_of(s) == planner::Sharding::kFsdp1 ? "FSDP1's FlatParameter units"
                                                                                   : "FSDP2's per-parameter DTensor shards") +
                      " are priced but not run by the executor, which shards ZeRO-2 and ZeRO-3 as DeepSpeed does; "
                      "expected sharding deepspeed (--sharding deepspeed)");
  }
  if (plan.config.zero_stage != 3) return Status::ok();
  if (s.optimizer != planner::OptimizerKind::kAdamW) {
    return refuse(origin, "settings.optimizer",
                  "the executor partitions only AdamW at ZeRO-3; expected adamw, or zero_stage 0 for " +
                      std::string(planner::optimizer_name(s.optimizer)));
  }
  if (s.mode == planner::TrainMode::kQlora) {
    return refuse(origin, "settings.mode",
                  "QLoRA's NF4 base weights are not partitioned by the executor's ZeRO-3; expected lora or full, or "
                  "zero_stage 0-2");
  }
  if (!model_family(model.family).runs_every_block) {
    return refuse(origin, "config.zero_stage",
                  std::string(model_family(model.family).name) +
                      " modules do not run their embeddings and head as blocks, which ZeRO-3 gathers; expected "
                      "zero_stage 0-2 (ZeRO-3 runs Llama, Flux and ViT)");
  }
  return Status::ok();
}

// Several ranks over c10d (issue 11): data parallel, ZeRO-1 and ZeRO-2.
Status check_ranks(const planner::Plan& plan, std::string_view origin) {
  const planner::RunSettings& s = plan.settings;
  if (s.world_size() <= 1) return Status::ok();
  if (s.shard_gpus > 0 && s.shard_gpus != s.world_size()) {
    return refuse(origin, "settings.shard_gpus",
                  "hybrid sharding is priced but not run by the executor; expected 0 (one group of every rank)");
  }
  if (plan.config.zero_stage >= 1 && plan.config.zero_stage <= 2 && s.optimizer != planner::OptimizerKind::kAdamW) {
    return refuse(origin, "settings.optimizer",
                  "the executor partitions only AdamW over ranks (ZeRO-" + std::to_string(plan.config.zero_stage) +
                      "); expected adamw, or zero_stage 0 for " + std::string(planner::optimizer_name(s.optimizer)));
  }
  if (plan.config.zero_stage == 0 && plan.config.offload_optimizer != planner::Offload::kNone) {
    return refuse(origin, "config.zero_stage",
                  "optimizer offload on several ranks partitions the optimizer (ZeRO-Offload runs on stage 1, "
                  "2 or 3); expected zero_stage 1, 2 or 3");
  }
  return Status::ok();
}

// The optimizers the executor steps, and the one it offloads.
Status check_optimizer(const planner::Plan& plan, std::string_view origin) {
  const planner::RunSettings& s = plan.settings;
  if (s.optimizer == planner::OptimizerKind::kAdamW4bit || s.optimizer == planner::OptimizerKind::kAdamW8bitTorchao ||
      s.optimizer == planner::OptimizerKind::kSgd) {
    return refuse(origin, "settings.optimizer",
                  std::string(planner::optimizer_name(s.optimizer)) +
                      " is priced but not run by the executor; expected adamw, adamw-8bit, sgd or adafactor");
  }
  if (s.optimizer != planner::OptimizerKind::kAdamW && plan.config.offload_optimizer != planner::Offload::kNone) {
    return refuse(origin, "config.offload_optimizer",
                  "the executor offloads only AdamW to the CPU (ZeRO-Offload's CPU Adam), not " +
                      std::string(planner::optimizer_name(s.optimizer)) +
                      "; expected none, or optimizer adamw");
  }
  return Status::ok();
}

// Optimizer offload runs as ZeRO-Offload, to the CPU only.
Status check_optimizer_offload(const planner::Plan& plan, std::string_view origin) {
  if (plan.config.offload_optimizer == planner::Offload::kCpu &&
      plan.settings.cpu_offload != planner::CpuOffloadImpl::kZeroOffload) {
    return refuse(origin, "settings.cpu_offload",
                  "torchao's CPUOffloadOptimizer is priced but not run by the executor (its CPU offload keeps "
                  "ZeRO-Offload's layout); expected zero-offload");
  }
  if (plan.config.offload_optimizer == planner::Offload::kNvme) {
    return refuse(origin, "config.offload_optimizer",
                  "NVMe optimizer offload is not implemented in the executor; expected none or cpu");
  }
  return Status::ok();
}

// What the stack decides about dtypes around adapters and 4-bit linears.
Status check_stack_dtypes(const planner::Plan& plan, const ExecutableModel& model, const planner::StackSpec& stack,
                          std::string_view origin) {
  const planner::RunSettings& s = plan.settings;
  if (s.mode != planner::TrainMode::kFull && s.precision == planner::Precision::kBf16Pure &&
      stack.adapter_dtype == planner::AdapterDtype::kFp32 && !stack.autocast) {
    // The planner prices fp32 adapters over bf16 weights as the Trainer runs
    // them, under autocast (planner/mechanisms/autocast.h); without it no stack does.
    return refuse(origin, "settings.adapter_dtype",
                  "fp32 adapters on a bf16 model are priced, and run, under autocast as transformers' Trainer runs "
                  "them; expected autocast on (--autocast on, or --stack hf-trainer) or adapter_dtype model "
                  "(--adapter-dtype model)");
  }
  const bool layer_norm_family = model.family == ModelFamily::kFlux || model.family == ModelFamily::kVit ||
                                 model.family == ModelFamily::kBert || model.family == ModelFamily::kClip;
  if (s.mode == planner::TrainMode::kQlora && planner::autocast_matters(s) && stack.autocast && layer_norm_family) {
    // A 4-bit linear fed a LayerNorm's fp32 output returns fp32 (bitsandbytes'
    // Linear4bit), and CUDA's autocast casts those q, k, v to 16 bits for SDPA;
    // the executor's attention does not, so it would run fp32 attention.
    return refuse(origin, "settings.autocast",
                  "QLoRA under autocast over a bf16 model with LayerNorm is priced but not run by the executor (its "
                  "attention takes the 4-bit linears' fp32 outputs as they are); expected autocast off "
                  "(--autocast off), or mode lora");
  }
  if (planner::kbit_prep_matters(s) && stack.kbit_prep != planner::KbitPrep::kNone) {
    // The executor builds the unquantized weights in the plan's 16-bit dtype and
    // has no fp32 residual stream around its NF4 linears (planner/mechanisms/kbit_prep.h).
    return refuse(origin, "settings.kbit_prep",
                  std::string(planner::kbit_prep_name(stack.kbit_prep)) +
                      " (the script's upcast of the unquantized weights to fp32" +
                      (s.kbit_prep ? "" : ", the top of the band when the stack leaves it open") +
                      ") is priced but not run by the executor, which trains them as loaded; expected kbit_prep "
                      "none (--kbit-prep none)");
  }
  return Status::ok();
}

// How activations are kept: whole-block recompute only, nothing offloaded but whole blocks.
Status check_activations(const planner::Plan& plan, const planner::StackSpec& stack, std::string_view origin) {
  const bool checkpoints = std::find(plan.blocks.begin(), plan.blocks.end(), planner::BlockChoice::kCheckpoint) !=
                           plan.blocks.end();
  if (checkpoints && stack.recompute == planner::Recompute::kSelectiveOp) {
    return refuse(origin, "settings.recompute",
                  "selective-op checkpointing (torchtitan's op policy) is not implemented in the executor, which "
                  "recomputes whole blocks; expected block");
  }
  if (checkpoints && stack.recompute == planner::Recompute::kBlockReentrant) {
    return refuse(origin, "settings.recompute",
                  "block-reentrant checkpointing (torch.utils.checkpoint with use_reentrant=True) is not how the "
                  "executor recomputes, which always trains what the plan trains; expected block");
  }
  if (plan.settings.offload_checkpoint_inputs) {
    return refuse(origin, "settings.offload_checkpoint_inputs",
                  "offloading checkpointed blocks' inputs (torchtune's activation offloading) is not implemented in the "
                  "executor; expected false (offloaded blocks are)");
  }
  return Status::ok();
}

// Kernels and precisions the planner prices that the executor does not run:
// its optimizer is torch's, its attention SDPA, its linears 16-bit or NF4, eager.
Status check_kernels(const planner::RunSettings& s, std::string_view origin) {
  if (s.paged_optimizer) {
    return refuse(origin, "settings.paged_optimizer",
                  "bitsandbytes' paged optimizers are priced but not run by the executor (it steps torch AdamW); "
                  "expected false");
  }
  if (planner::is_autocast(s.precision)) {
    return refuse(origin, "settings.precision",
                  std::string(planner::precision_name(s.precision)) +
                      " (torch.autocast over fp32 weights) is priced but not run by the executor; expected fp32, "
                      "bf16-mixed, fp16-mixed or bf16");
  }
  // The executor runs SDPA or eager attention; any other kernel of the choice table is priced only.
  if (s.attention != models::AttentionImpl::kSdpa && s.attention != models::AttentionImpl::kEager) {
    return refuse(origin, "settings.attention",
                  "attention " + std::string(planner::attention_name(s.attention)) +
                      " is priced but not run by the executor (its attention is SDPA or eager); expected sdpa");
  }
  if (s.compile) {
    return refuse(origin, "settings.compile", "the executor runs eager LibTorch; expected false");
  }
  if (s.float8 != planner::Float8Recipe::kNone) {
    return refuse(origin, "settings.float8",
                  "torchao's Float8Linear is priced but not run by the executor (its linears are 16-bit); "
                  "expected none");
  }
  if (s.quant != planner::QuantFormat::kNf4) {
    return refuse(origin, "settings.quant",
                  "a GPTQ base is priced but not run by the executor (its QLoRA linears are NF4); expected nf4");
  }
  return Status::ok();
}

// What the step trains for: the model's own loss only.
Status check_recipe(const planner::StackSpec& stack, std::string_view origin) {
  if (stack.recipe != planner::Recipe::kSupervised) {
    const char* what =
        stack.recipe == planner::Recipe::kDpo    ? "TRL's DPOTrainer: chosen and rejected rows, a reference model's log-probs"
        : stack.recipe == planner::Recipe::kGrpo ? "TRL's GRPOTrainer: generation, then the policy over the completions"
                                                 : "TRL's RewardTrainer: chosen and rejected rows through a one-value score head";
    return refuse(origin, "settings.recipe",
                  std::string(planner::recipe_name(stack.recipe)) + " (" + what +
                      ") is priced but not trained by the executor, which trains the model's own loss; expected "
                      "supervised");
  }
  return Status::ok();
}

// The executor's MoE block (models/torch/moe_module.h) is transformers 5.x's fused
// experts; a plan priced for a 4.x release has one nn.Linear per expert (NF4 under
// QLoRA, plain LoRA on its Linears: models/moe_loop.h), which it does not train.
Status check_experts_layout(const planner::Plan& plan, const ExecutableModel& model, std::string_view origin) {
  if (model.family != ModelFamily::kLlama || model.llama.moe.experts == 0) return Status::ok();
  if (!planner::experts_as_modules(plan.settings)) return Status::ok();
  return refuse(origin, "settings.versions",
                "transformers before 5.0 runs each expert as its own nn.Linear modules in a Python loop, as this plan "
                "is priced; the executor trains transformers 5.x's fused experts (grouped GEMMs), a different "
                "layout; expected transformers=5.0 or later, or no transformers release");
}

// Adapters of one rank, and transformers' full-vocabulary loss.
Status check_adapters_and_loss(const planner::RunSettings& s, const planner::StackSpec& stack,
                               std::string_view origin) {
  if (!s.scoped_lora.empty()) {
    return refuse(origin, "settings.scoped_lora",
                  "adapters of a second rank in one part of the model are priced but not built by the executor "
                  "(its LoRA has one rank); expected none");
  }
  if (s.lora.dora) {
    return refuse(origin, "settings.lora.dora",
                  "DoRA's magnitude vectors and weight norms are priced but not built by the executor (its adapters "
                  "are plain LoRA); expected false");
  }
  if (stack.grads_through_forward) {
    return refuse(origin, "settings.grads_through_forward",
                  "the executor frees the gradients after each optimizer step, so none live through the next "
                  "forward; expected off");
  }
  if (stack.loss.impl != planner::LossImpl::kFull && stack.loss.impl != planner::LossImpl::kFullKeepLogits) {
    return refuse(origin, "settings.loss",
                  planner::loss_name(stack.loss) +
                      " is not how the executor computes the loss (transformers' full-vocabulary cross-entropy); "
                      "expected full or full-keep-logits");
  }
  return Status::ok();
}

// The plan's shape: one decision a block, a sequence, a batch and accumulation.
Status check_shape(const planner::Plan& plan, const ExecutableModel& model, std::string_view origin) {
  if (plan.blocks.size() != plan.block_names.size()) {
    return invalid(origin, "blocks", "one decision per entry of block_names");
  }
  if (plan.seq_len <= 0) return invalid(origin, "seq_len", "a positive sequence length");
  if (model_family(model.family).min_two_tokens && plan.seq_len < 2) {
    // The loss is over next-token predictions: one token has none to make, and
    // its mean over nothing is NaN.
    return refuse(origin, "seq_len",
                  "a causal language model needs at least 2 tokens per sequence (each token predicts the next), "
                  "got " + std::to_string(plan.seq_len));
  }
  if (plan.config.micro_batch < 1) return invalid(origin, "config.micro_batch", "at least 1");
  if (plan.config.grad_accum < 1) return invalid(origin, "config.grad_accum", "at least 1");
  return Status::ok();
}

}  // namespace

planner::Plan as_executor_runs(planner::Plan plan) {
  planner::RunSettings& s = plan.settings;
  if (!s.repeat_kv && s.attention != models::AttentionImpl::kEager) s.repeat_kv = false;
  // The trainer frees the gradients right after the optimizer step (trainer.cc).
  if (!s.grads_through_forward) s.grads_through_forward = false;
  // Its 4-bit linear keeps no input for backward, as bitsandbytes from 0.43.2: an
  // open release is run as the current one (the band's bottom).
  planner::pin_bnb_bottom(s, s);
  const planner::ResolvedStack stack = planner::resolve_stack(s);
  if (!s.loss && stack.top.loss.impl == planner::LossImpl::kUpcastShift) s.loss = stack.bottom.loss;
  return plan;
}

Status check_executable(const planner::Plan& given, std::string_view origin) {
  const planner::Plan plan = as_executor_runs(given);
  Result<ExecutableModel> model = executable_model(plan.settings.model, origin);
  if (!model.is_ok()) return model.status();
  const planner::RunSettings& s = plan.settings;
  if (Status ranks = check_ranks(plan, origin); !ranks.is_ok()) return ranks;
  if (Status optimizer = check_optimizer(plan, origin); !optimizer.is_ok()) return optimizer;
  if (Status zero3 = check_zero3(plan, model.value(), origin); !zero3.is_ok()) return zero3;
  if (Status offload = check_optimizer_offload(plan, origin); !offload.is_ok()) return offload;
  const planner::StackSpec stack = planner::resolve_stack(s).top;
  // In this order: the first refusal is the one reported.
  for (const Status& status : {check_recipe(stack, origin), check_stack_dtypes(plan, model.value(), stack, origin),
                               check_activations(plan, stack, origin), check_kernels(s, origin),
                               check_adapters_and_loss(s, stack, origin), check_shape(plan, model.value(), origin),
                               check_experts_layout(plan, model.value(), origin)}) {
    if (!status.is_ok()) return status;
  }
  return Status::ok();
}

Status validate_run_options(const RunOptions& o, std::string_view origin) {
  if (o.steps < 1) return invalid(origin, "--steps", "at least 1");
  if (o.token_bytes != 2 && o.token_bytes != 4)
    return invalid(origin, "--token-bytes", "2 (uint16) or 4 (uint32)");
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate))
    return invalid(origin, "--lr", "a positive number");
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) {
    return invalid(origin, "--weight-decay", "a number >= 0");
  }
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda") {
    return invalid(origin, "--device", "auto, cpu or cuda, got \"" + o.device + "\"");
  }
  if (o.cpu_threads < 0) return invalid(origin, "--cpu-threads", "0 (all cores) or more");
  if (o.checkpoint_every < 0)
    return invalid(origin, "--checkpoint-every", "0 (only at the end) or more steps");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty() && o.resume_dir.empty()) {
    return invalid(origin, "--checkpoint-every", "a --checkpoint-dir to write to");
  }
  if (o.checkpoints_kept < 1) return invalid(origin, "--keep", "at least 1 checkpoint");
  return Status::ok();
}

#ifndef HEADROOM_HAVE_EXECUTOR
bool executor_available() { return false; }
bool cuda_available() { return false; }

Result<RunResult> train_plan(const planner::Plan&, const RunOptions&, RunObserver&) {
  return Status::unsupported(
      "this headroom was built without LibTorch, so it cannot train: run scripts/setup_torch.sh, "
      "then "
      "scripts/build.sh (docs/executor.md)");
}
#endif

}  // namespace headroom::executor
