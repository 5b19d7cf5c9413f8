// The memory walk of one training step on one rank: forward through the block
// chain, backward in reverse, then the optimizer step. It is the definition of
// "peak" that every answer uses; the block solver optimizes over exactly the
// same terms (block_solver.h), and tests check the two agree.
//
// At forward of block k:  base + gathered + grads_fwd + P(k-1) + fwd_local(k)
// At backward of block k: base + gathered + grads_bwd[k] + P(k-1) + bwd_local(k)
// where P(k-1) is what blocks before k keep on the GPU (saved tensors, checkpoint
// inputs, nothing for offloaded blocks) and the local terms include the copy of an
// offloaded neighbour in flight (block k-1 going out in forward, coming back in backward).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/time/block_profile.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// torchtune OffloadActivations(max_fwd_stash_size=5): a packed tensor's GPU copy
// is kept until five later ones have been packed (training/_activation_offloading.py).
inline constexpr int kCheckpointOffloadStash = 5;

struct NotGradients {
  int64_t zero_buffers_fwd = 0;          // among grads_fwd
  std::vector<int64_t> zero_buffers_bwd;         // among grads_bwd
  std::vector<int64_t> zero_buffers_bwd_before;  // among grads_bwd_before
  std::vector<int64_t> in_flight_bwd;            // among grads_bwd
  std::vector<int64_t> in_flight_bwd_before;     // among grads_bwd_before
  int64_t zero_buffers_optimizer = 0;    // among grads_optimizer
};

struct StepModel {
  int64_t base = 0;          // resident all step on the allocator: params, states, buckets, workspaces, persistent tensors, pool slack
  int64_t gathered = 0;      // ZeRO-3 parameters gathered while blocks compute
  // torch's FSDPs: per block, the layer units' unsharded parameters live while it
  // runs forward and backward (ModelStates::gathered_fwd_block; fsdp_in_flight).
  std::vector<int64_t> gathered_fwd;
  std::vector<int64_t> gathered_bwd;
  std::vector<int64_t> gathered_bwd_before;  // before the unit's pre-backward hook fires
  int64_t grads_fwd = 0;     // gradients already allocated during forward
  std::vector<int64_t> grads_bwd;  // per block: gradients allocated during its backward
  // per block: the same before its own parameters' gradients are made (empty: grads_bwd)
  std::vector<int64_t> grads_bwd_before;
  // per block: the reduce-scatter input among grads_bwd, labelled a ZeRO buffer at the
  // peak (ModelStates::reduce_scatter_input_block; empty: none)
  std::vector<int64_t> reduce_input_bwd;
  // per block: the bytes among grads_bwd a unit's post-backward hook makes once the
  // block's last node has run backward (FSDP1: its reduce buffers beyond the unsharded
  // gradient and its new sharded gradient; ModelStates::fsdp1_post_backward_block). The
  // block's nodes run without them; the hook holds them with the block's input gradient
  // (empty: none).
  std::vector<int64_t> post_backward_bwd;
  // per block, where post_backward_bwd is set: the unit's unsharded gradient among
  // grads_bwd, its parameters' gradients as autograd makes them node by node before the
  // hook joins them (FSDP1: the split of the FlatParameter's views waits for all of them)
  std::vector<int64_t> unit_grads_bwd;
  // Whether no `.grad` holds unit_grads_bwd before the hook (FSDP1: autograd keeps them
  // for the split's join; at the peak in flight, transient). FSDP2's are the unsharded
  // parameters' `.grad`, gradients (ModelStates::reduce_scatter_block).
  bool unit_grads_in_flight = true;
  // Bytes among the walk's gradients that no parameter's `.grad` holds at the peak
  // (docs/memory-model.md, "Categories at the peak"): DeepSpeed's own buffers, labelled
  // ZeRO buffers, and gradients autograd still holds in flight, labelled transient.
  // Per block, as grads_bwd and grads_bwd_before (empty: none); capped by them.
  NotGradients not_grads;
  // Every gradient the walk holds is made by a hook once AccumulateGrad has run
  // (DeepSpeed ZeRO-1/2: setup_buckets at the first hook, copies into them): a block's
  // first node with a parameter gradient runs backward with grads_bwd_before
  // (BlockProfile::bwd_peak_through_first_param_grads).
  bool grads_made_by_hooks = false;
  // A block's own parameter gradients appear node by node as its backward walks it in
  // reverse (BlockProfile::bwd_points: autograd's AccumulateGrad runs as soon as a
  // node's backward has made its weight's gradient), not at its first node with one:
  // grads_bwd[k] - grads_bwd_before[k] are block k's own, shared out in proportion to
  // BlockProfile::own_grads. Set where autograd alone makes them (the first
  // micro-step of a progressive run without hooks, sharding or optimizer in backward).
  bool grads_by_node = false;
  int64_t grads_optimizer = 0;     // gradients at the optimizer step
  int64_t optimizer_transient = 0;
  std::vector<BlockProfile> blocks;
  std::vector<double> copy_ms;     // per block: one-way copy time of its saved tensors
  // Per block: bytes its autograd Functions keep on ctx outside save_for_backward
  // (ModelContext::ctx_held), live from its forward to the end of the whole backward
  // (empty: none).
  std::vector<int64_t> ctx_held;
  // Per block: of ctx_held, the tensors the block itself makes (not a leaf), which a
  // non-reentrant checkpoint's recompute makes again as new storages, its Functions
  // keeping them on ctx as the first forward's did; the first forward's stay with their
  // nodes beside the recompute and the block's backward (empty: none).
  std::vector<int64_t> ctx_recomputed;
  bool allow_offload = true;       // activation offload to host permitted
  // Checkpointed blocks' inputs kept in pinned host memory (torchtune activation
  // offloading): -1 off; otherwise how many of the latest stay on the GPU during
  // forward (its forward stash). The block solver prices them as stored (an upper
  // bound); walk_step, which every prediction uses, prices them as offloaded.
  int checkpoint_stash = -1;
  // Unsloth's offloading checkpointer instead (unsloth_zoo gradient_checkpointing.py
  // UnslothCheckpointFunction): no stash; the last checkpointed block keeps its input on
  // the GPU; GPU buffers of the largest checkpoint input each, held through the step,
  // receive the inputs coming back (2: double buffering, the top; 0: off).
  int checkpoint_offload_buffers = 0;
  // DPO's reference forward (StackSpec::reference copy or adapter-disabled): after the
  // policy's forward, under no_grad, every block runs again while all the policy
  // saved is held; each block at its no-grad peak (BlockProfile::fwd_peak_nograd).
  // A frozen copy's weights are in `base`.
  bool reference_forward = false;
  // GRPO (predict/grpo_phases.h): before the micro-step's forward, what the generation
  // and the no-grad log-prob pass hold above base (0: no such phase), and the
  // gradients held then (none when the generation starts the accumulation).
  int64_t generation = 0;
  int64_t logprob_pass = 0;
  int64_t grads_generation = 0;
  // GRPO with colocated vLLM (mechanisms/vllm_engine.h): its share held all step (in
  // `base`), or in sleep mode while it generates (`generation`); 0 otherwise.
  int64_t vllm_resident = 0;
  int64_t vllm_generation = 0;
  // Reentrant checkpointing recomputes a block under autograd's ordinary saved-tensor
  // hooks (torch/utils/checkpoint.py CheckpointFunction.backward): what the recompute
  // saves is saved activations. Non-reentrant recomputation keeps it in the
  // checkpoint's own frame (_recomputation_hook). Beside the labels, the recompute is
  // BlockProfile::reentrant_recompute_peak (autocast's cached casts of its inputs).
  bool reentrant_recompute = false;
  // Persistent tensors the model makes (StepProfile::made_persistent): in `base`, and
  // taken out where the walk finds them dead (planner/time/made_persistent.h).
  std::vector<MadePersistent> made_persistent;
};

// The peak above base + gathered + what the forward stored while the reference
// forward runs (0 without one): the gradients held through forward and the
// largest block's no-grad forward.
int64_t reference_forward_local(const StepModel& model);

int64_t stored_bytes(const BlockProfile& block, BlockChoice choice);
bool choice_allowed(const StepModel& model, int block, BlockChoice choice);
struct LocalPeak {
  int64_t forward = 0;   // incl. forward_grads
  int64_t backward = 0;  // incl. backward_grads
  int64_t forward_grads = 0;
  int64_t backward_grads = 0;
  int64_t forward_gathered = 0;   // StepModel::gathered_fwd, included in forward
  int64_t backward_gathered = 0;  // StepModel::gathered_bwd, included in backward
  // The block's own saved tensors, included in forward and backward (BlockProfile::
  // fwd_peak_saved, bwd_peak_saved). A checkpointed block's are its inputs, which
  // torch's checkpoint saves for backward as it starts (both variants), and under
  // StepModel::reentrant_recompute what the recompute saves.
  int64_t forward_saved = 0;
  int64_t backward_saved = 0;
  // The backward peak falls before the block's own parameter gradients exist
  // (backward_grads is StepModel::grads_bwd_before).
  bool backward_before_grads = false;
  // Of backward_grads, the unit's unsharded gradients autograd has made by a peak before
  // its post-backward hook (StepModel::unit_grads_bwd): in flight, no `.grad` yet.
  int64_t backward_unit_grads = 0;
};
LocalPeak local_parts(const StepModel& model, int block, BlockChoice previous, BlockChoice choice);
// Peak above base + gathered + P(k-1) while block k runs forward and backward, given
// the choice for block k and for block k-1 (kKeep when k == 0).
int64_t local_peak(const StepModel& model, int block, BlockChoice previous, BlockChoice choice);
// Time of block k for one micro-step: forward, backward, recompute, exposed copies.
double block_ms(const StepModel& model, int block, BlockChoice choice);

struct StepPeak {
  int64_t bytes = 0;       // allocator bytes at the peak (without the CUDA context)
  std::string phase;       // "forward", "backward", "optimizer step"
  int block = -1;
  int64_t activations = 0; // stored by earlier blocks + persistent, at the peak
  int64_t transient = 0;   // the block in flight
  int64_t gradients = 0;
  int64_t gathered = 0;    // FSDP's layer units in flight and the ZeRO buffers among the gradients at the peak
  int64_t host_activations = 0;  // pinned host bytes holding offloaded activations
  int64_t vllm = 0;        // colocated vLLM's share at the peak (StepModel::vllm_resident, vllm_generation)
};

StepPeak walk_step(const StepModel& model, const std::vector<BlockChoice>& choices,
                   int64_t persistent);

}  // namespace headroom::planner
