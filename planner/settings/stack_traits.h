// Facts about a run that follow from its stack and settings alone (who shards,
// whether the DeepSpeed engine or transformers' models run, whether a mechanism
// can change this run's bytes): what the mechanism rows and the memory model ask.
#pragma once

#include "planner/settings/run_settings.h"
#include "planner/settings/stack_choices.h"

namespace headroom::planner {

// Whether the stack runs transformers' modeling code on a Hugging Face config (the
// Trainer, DeepSpeed, a plain loop over AutoModel; unspecified priced as one):
// transformers' releases then change the attention's bytes.
bool runs_transformers_models(Stack value);

// Whether the QLoRA preparation (StackSpec::kbit_prep) can change this run's
// bytes: bitsandbytes NF4 under pure bf16 with the Trainer's autocast (stack
// hf-trainer, or unspecified priced as it), without ZeRO.
bool kbit_prep_matters(const RunSettings& settings);

// Whether the step runs through DeepSpeed's engine (the deepspeed stack, or ZeRO
// by DeepSpeed): it casts the module to its 16-bit dtype, PEFT's fp32 adapters
// included, and runs no autocast.
bool through_deepspeed_engine(const RunSettings& settings);

// Whether the forward's autocast over the 16-bit weights (StackSpec::autocast)
// can change this run's bytes: precision bf16, or bf16/fp16-mixed sharded by
// FSDP at ZeRO-3 (its mixed precision computes on 16-bit unsharded parameters).
// The amp precisions are autocast over fp32 weights by definition, and
// DeepSpeed-style mixed precision runs the engine's 16-bit module.
bool autocast_matters(const RunSettings& settings);

// Whether the caching allocator runs with expandable segments: as the settings
// say, else as the stack's launcher sets PYTORCH_CUDA_ALLOC_CONF (torchtitan's
// run_llama_train.sh / run_train.sh export expandable_segments:True; the others
// leave the default).
bool uses_expandable_segments(const RunSettings& settings);

// Whether Unsloth's checkpointer copies each checkpointed layer's input to pinned host
// memory: use_gradient_checkpointing="unsloth" (get_peft_model's default, and
// LLaMA-Factory's), which apply_unsloth_gradient_checkpointing downgrades to plain
// reentrant checkpointing below a max_seq_length of 512 (unsloth/models/_utils.py).
// headroom takes the run's sequence length for max_seq_length (0: the model's, >= 512).
bool unsloth_offloads_checkpoint_inputs(const RunSettings& settings);

// Who shards at ZeRO-3: settings.sharding, else the stack's (torchtitan,
// torchtune, litgpt's LoRA: FSDP2; composer, litgpt's full fine-tune: FSDP1; the
// others: DeepSpeed).
Sharding sharding_of(const RunSettings& settings);
// Whether ZeRO-3 is one of torch's FSDPs (FSDP1 or FSDP2) rather than DeepSpeed's stage 3.
bool shards_with_fsdp(const RunSettings& settings);
// Whether ZeRO-3 is FSDP2's fully_shard (its CPUOffloadPolicy, its float8 all-gather).
bool shards_with_fsdp2(const RunSettings& settings);
// Whether torch's FSDPs shard the parameters at this ZeRO stage: stage 3 (resharded
// after forward), and stage 2 under FSDP, which keeps the parameters sharded too and
// differs only in when it reshards them (fsdp_keeps_unsharded).
bool fsdp_shards_params(const RunSettings& settings, int zero_stage);
// Whether FSDP keeps each unit's unsharded parameters from its forward to its own
// backward: FSDP2's reshard_after_forward=False (_fsdp_param_group.py post_forward:
// no reshard unless _reshard_after_forward; post_backward reshards), FSDP1's
// SHARD_GRAD_OP (_runtime_utils.py _should_free_in_backward). headroom's `--zero 2`
// under `--sharding fsdp1|fsdp2` (docs/memory-model.md, "FSDP without resharding").
bool fsdp_keeps_unsharded(const RunSettings& settings, int zero_stage);
// FSDP's reduce dtype: settings.reduce_dtype, else fp32 under mixed precision
// (fp32 sharded parameters) and the parameters' dtype otherwise.
ReduceDtype reduce_dtype_of(const RunSettings& settings);

// Whether the stack's fully_shard leaves the last layer unsharded after forward,
// since backward needs it at once (torchtitan's apply_fsdp at 9dec370:
// reshard_after_forward = int(layer_id) < len(model.layers) - 1).
bool fsdp2_keeps_last_layer(Stack value);

// Whether accelerate's FSDP2 preparation makes the input embeddings and the tail
// (final norm and output embeddings) units of their own, the tail not resharded after
// forward, so the root group holds nothing else: the Trainer under FSDP2 with
// accelerate >= 1.14 given (utils/fsdp_utils.py fsdp2_prepare_model, #4015), for a
// model whose output embeddings are not tied to the input's (tied, accelerate puts
// both in the tail, which then lives as the root group did). Before 1.14, or with no
// release given, the root group holds both: the dearer layout.
bool accelerate_carves_fsdp2_ends(const RunSettings& settings);

// Whether FSDP1 prefetches the next unit in backward: not under the Trainer, whose
// accelerate plugin defaults backward_prefetch to NO_PREFETCH (utils/dataclasses.py
// FullyShardedDataParallelPlugin) and passes an fsdp_config's only when one is given.
bool fsdp1_prefetches_backward(const RunSettings& settings);

}  // namespace headroom::planner
