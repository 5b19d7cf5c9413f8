#include "planner/predict/step_model.h"

#include <algorithm>
#include <cassert>
#include <string_view>
#include <utility>

#include "planner/predict/offload_stash.h"
#include "planner/predict/unsloth_checkpointer.h"

namespace headroom::planner {

int64_t stored_bytes(const BlockProfile& block, BlockChoice choice) {
  switch (choice) {
    case BlockChoice::kKeep:
      return block.keep;
    case BlockChoice::kCheckpoint:
      return block.checkpoint;
    case BlockChoice::kOffload:
      return 0;
  }
  return 0;
}

bool choice_allowed(const StepModel& model, int block, BlockChoice choice) {
  if (choice == BlockChoice::kKeep) return true;
  const BlockProfile& profile = model.blocks[block];
  if (!profile.checkpointable) return false;
  if (choice == BlockChoice::kOffload) return model.allow_offload && profile.on_autograd;
  return true;
}

// FSDP's units in flight beside block k. Where the unit's pre-backward hook fires
// at the block's first node with parameters, not as its backward starts (accelerate's
// kept tail: the loss runs backward first), the nodes before it see fewer
// (StepModel::gathered_bwd_before): the block's backward is the larger of the two stages.
static void add_gathered(const StepModel& model, int k, BlockChoice choice, int64_t neighbour_copy, LocalPeak& out) {
  const size_t at = static_cast<size_t>(k);
  if (at >= model.gathered_fwd.size()) return;
  out.forward_gathered = model.gathered_fwd[at];
  out.backward_gathered = model.gathered_bwd[at];
  out.forward += out.forward_gathered;
  const BlockProfile& block = model.blocks[at];
  const int64_t hook_before = at < model.gathered_bwd_before.size() ? model.gathered_bwd_before[at] : out.backward_gathered;
  if (hook_before >= out.backward_gathered || choice == BlockChoice::kCheckpoint || !block.on_autograd ||
      block.bwd_peak_before_params < 0) {
    out.backward += out.backward_gathered;
    return;
  }
  // Before the first node with parameters no parameter gradient of this block exists.
  const bool grad_split = block.bwd_peak_before_param_grads >= 0 && at < model.grads_bwd_before.size();
  const int64_t grads_before = grad_split ? model.grads_bwd_before[at] : out.backward_grads;
  const int64_t before = grads_before + block.bwd_peak_before_params + neighbour_copy + hook_before;
  const int64_t from_split = out.backward_grads + block.bwd_peak_from_params + neighbour_copy;
  const bool split_lower = from_split < out.backward;
  const int64_t from = std::min(out.backward, from_split) + out.backward_gathered;
  out.backward = std::max(before, from);
  if (before > from) {
    out.backward_gathered = hook_before;
    out.backward_saved = block.bwd_saved_before_params;
  } else if (split_lower) {
    out.backward_saved = block.bwd_saved_from_params;
  }
}

// Block k's first-forward tensors on ctx that its recompute makes again (StepModel::
// ctx_recomputed): both copies live while the recompute and the block's backward run.
static int64_t ctx_recomputed(const StepModel& model, int k) {
  return static_cast<size_t>(k) < model.ctx_recomputed.size() ? model.ctx_recomputed[static_cast<size_t>(k)] : 0;
}

// The block's recompute peak as the run's checkpoint recomputes it: a reentrant
// one holds autocast's cached input casts (BlockProfile::reentrant_recompute_peak); a
// non-reentrant one runs beside the first forward's ctx tensors it makes again
// (bitsandbytes 0.43.1 MatMul4Bit's ctx.tensors: the oracle's Mixtral-2L QLoRA holds
// layer 0's 4-bit linears' inputs twice while the layer is recomputed).
static int64_t recompute_peak(const StepModel& model, int k) {
  const BlockProfile& block = model.blocks[static_cast<size_t>(k)];
  return model.reentrant_recompute ? block.reentrant_recompute_peak : block.recompute_peak + ctx_recomputed(model, k);
}

// What a checkpoint holds beside a checkpointed block's backward that its saved bytes
// leave out: the inputs no node of the block saves (BlockProfile::checkpoint_unsaved),
// under a reentrant checkpoint the recompute's outputs (BlockProfile::outputs), under a
// non-reentrant one the first forward's ctx tensors the recompute made again.
static int64_t held_beside_backward(const StepModel& model, int k, BlockChoice choice) {
  const BlockProfile& block = model.blocks[static_cast<size_t>(k)];
  if (choice != BlockChoice::kCheckpoint || !block.on_autograd) return 0;
  return block.checkpoint_unsaved + (model.reentrant_recompute ? block.outputs : ctx_recomputed(model, k));
}

// Saved at a non-reentrant recompute's peak: the checkpoint's saved bytes and the
// recompute's own copies of the ctx tensors, which no saved-tensor hook sees either.
static int64_t recompute_saved(const StepModel& model, int k) {
  return model.blocks[static_cast<size_t>(k)].checkpoint + ctx_recomputed(model, k);
}

// The backward fields block k runs its backward with: a non-reentrant checkpoint's
// recompute frees each node's saved tensors as it unpacks them (BlockProfile::unpacked_backward);
// a reentrant one holds autocast's cached cast once and its out_grad throughout
// (BlockProfile::reentrant_backward).
static const BlockProfile& backward_of(const StepModel& model, const BlockProfile& block, BlockChoice choice) {
  if (choice != BlockChoice::kCheckpoint) return block;
  if (model.reentrant_recompute) return block.reentrant_backward ? *block.reentrant_backward : block;
  return block.unpacked_backward ? *block.unpacked_backward : block;
}

// A reentrant checkpoint's saved tensors beside what its recompute still saves
// (`recompute_saved`): CheckpointFunction.forward saves every tensor input with
// ctx.save_for_backward under the outer saved-tensor hooks, and its backward reads
// them back and runs the recompute and the inner backward before it returns, so
// autograd frees them only after (torch 2.11 torch/utils/checkpoint.py,
// CheckpointFunction; engine.cpp release_variables after call_function). The inputs no
// recomputed node saves (BlockProfile::checkpoint_unsaved) are saved activations
// there too: BERT's fp32 layer input, which its layer only casts and adds.
static int64_t reentrant_saved(const BlockProfile& block, int64_t recompute_saved) {
  return std::max(block.checkpoint, recompute_saved + block.checkpoint_unsaved);
}

// A checkpointed block's saved tensors at its peaks (LocalPeak::forward_saved).
static void checkpoint_saved(const StepModel& model, const BlockProfile& block, LocalPeak& out) {
  if (!block.on_autograd) return;
  out.forward_saved = block.checkpoint;
  out.backward_saved = block.checkpoint;
  if (!model.reentrant_recompute) return;
  const BlockProfile& bwd = backward_of(model, block, BlockChoice::kCheckpoint);
  const bool recompute_wins = block.reentrant_recompute_peak + block.out_grad > bwd.bwd_peak;
  out.backward_saved =
      reentrant_saved(block, recompute_wins ? block.reentrant_recompute_peak_saved : bwd.bwd_peak_saved);
}

// A block's backward split where its gradients appear: at its first node with a
// parameter gradient, or, where hooks make them (StepModel::grads_made_by_hooks),
// after it. `before` is -1 where the block has no such split.
struct GradSplit {
  int64_t before = -1;
  int64_t after = -1;
  int64_t saved_before = 0;
  int64_t saved_after = 0;
};

static GradSplit grad_split(const StepModel& model, const BlockProfile& block) {
  if (model.grads_made_by_hooks && block.bwd_peak_after_first_param_grads >= 0) {
    return {block.bwd_peak_through_first_param_grads, block.bwd_peak_after_first_param_grads,
            block.bwd_saved_through_first_param_grads, block.bwd_saved_after_first_param_grads};
  }
  return {block.bwd_peak_before_param_grads, block.bwd_peak_from_param_grads, block.bwd_saved_before_param_grads,
          block.bwd_saved_from_param_grads};
}

// Block k's backward node by node: at each node the gradients held `before` the block's
// own, and of the own `made` by its end those made before it and by its backward. A
// checkpointed block recomputes first, before any. False where the block has no own
// gradients to place.
static bool walk_nodes(const StepModel& model, int k, BlockChoice choice, int64_t neighbour_copy, int64_t before,
                       int64_t made, LocalPeak& out) {
  const BlockProfile& block = model.blocks[k];
  const BlockProfile& bwd = backward_of(model, block, choice);
  if (!block.on_autograd || bwd.bwd_points.empty() || block.own_grads <= 0) return false;
  const double per_own = static_cast<double>(made) / static_cast<double>(block.own_grads);
  const auto share = [&](int64_t own) {
    return made == block.own_grads ? own : static_cast<int64_t>(per_own * static_cast<double>(own));
  };
  const int64_t held = held_beside_backward(model, k, choice);
  const bool checkpointed = choice == BlockChoice::kCheckpoint;
  int64_t peak = checkpointed ? recompute_peak(model, k) + block.out_grad : -1;
  int64_t grads = 0;
  int64_t saved = checkpointed && !model.reentrant_recompute ? recompute_saved(model, k) : out.backward_saved;
  for (const BackwardPoint& point : bwd.bwd_points) {
    const int64_t at = share(point.made_through) + point.bytes + held;
    if (at <= peak) continue;
    peak = at;
    grads = share(point.made_through);
    if (!checkpointed) saved = point.saved;
    else if (model.reentrant_recompute) saved = reentrant_saved(block, point.saved);
    else saved = block.checkpoint;
  }
  out.backward = before + peak + neighbour_copy;
  out.backward_grads = before + grads;
  out.backward_before_grads = grads == 0;
  out.backward_saved = saved;
  return true;
}

// StepModel::grads_by_node: the own gradients AccumulateGrad takes as `.grad` without a
// copy as each node makes them (the oracle labels the storage a gradient).
static bool backward_by_node(const StepModel& model, int k, BlockChoice choice, int64_t neighbour_copy,
                             LocalPeak& out) {
  if (!model.grads_by_node || static_cast<size_t>(k) >= model.grads_bwd_before.size()) return false;
  const int64_t before = model.grads_bwd_before[k];
  return walk_nodes(model, k, choice, neighbour_copy, before, out.backward_grads - before, out);
}

// A unit's post-backward set (StepModel::post_backward_bwd) is made once the block's
// last node has run backward: the nodes run without it, and the hook holds it with the
// gradients and the block's input gradient (what block k-1 receives), the block's own
// saved tensors and transients freed. The backward is the larger of the two moments.
// The unit's unsharded gradient (StepModel::unit_grads_bwd) is its parameters' own
// gradients, made node by node as the block's backward runs (walk_nodes); FSDP2's
// hook may add nothing beyond them (post 0) and its nodes still make them one by one.
static void split_post_backward(const StepModel& model, int k, BlockChoice choice, int64_t neighbour_copy,
                                LocalPeak& out) {
  const size_t at = static_cast<size_t>(k);
  const int64_t post = at < model.post_backward_bwd.size() ? std::min(model.post_backward_bwd[at], out.backward_grads) : 0;
  const int64_t unit_bytes = at < model.unit_grads_bwd.size() ? model.unit_grads_bwd[at] : 0;
  if ((post <= 0 && unit_bytes <= 0) || out.backward_before_grads || !model.blocks[at].on_autograd) return;
  const int64_t hook_grads = out.backward_grads;
  const int64_t hook = hook_grads + (k > 0 ? model.blocks[at - 1].out_grad : 0) + neighbour_copy;
  const int64_t unit = std::min(unit_bytes, hook_grads - post);
  LocalPeak nodes = out;
  nodes.backward -= post;
  nodes.backward_grads -= post;
  if (unit > 0) walk_nodes(model, k, choice, neighbour_copy, hook_grads - post - unit, unit, nodes);
  if (nodes.backward >= hook) {
    out = nodes;
    const int64_t made = std::max<int64_t>(0, nodes.backward_grads - (hook_grads - post - unit));
    out.backward_unit_grads = model.unit_grads_in_flight ? made : 0;
  } else {
    out.backward = hook;
    out.backward_saved = 0;
  }
}

// A checkpointed block's backward above its gradients: the recompute runs the forward
// again with autograd while the output gradient waits, then the block's backward; and
// what is saved at the larger (checkpoint_saved, recompute_saved).
static int64_t checkpointed_backward(const StepModel& model, int k, LocalPeak& out) {
  const BlockProfile& block = model.blocks[static_cast<size_t>(k)];
  if (!block.on_autograd) return 0;
  const int64_t recompute = recompute_peak(model, k) + block.out_grad;
  const int64_t backward = backward_of(model, block, BlockChoice::kCheckpoint).bwd_peak +
                           held_beside_backward(model, k, BlockChoice::kCheckpoint);
  checkpoint_saved(model, block, out);
  if (!model.reentrant_recompute && recompute >= backward) out.backward_saved = recompute_saved(model, k);
  return std::max(recompute, backward);
}

LocalPeak local_parts(const StepModel& model, int k, BlockChoice previous, BlockChoice choice) {
  const BlockProfile& block = model.blocks[k];
  // The neighbour's saved tensors in flight over the host link: going out while
  // block k runs forward, coming back while block k runs backward.
  const int64_t neighbour_copy =
      (k > 0 && previous == BlockChoice::kOffload) ? model.blocks[k - 1].keep : 0;
  LocalPeak out;
  out.forward_grads = model.grads_fwd;
  out.backward_grads = model.grads_bwd.empty() ? 0 : model.grads_bwd[k];
  int64_t forward = 0;
  int64_t backward = 0;
  switch (choice) {
    case BlockChoice::kKeep:
    case BlockChoice::kOffload:
      forward = block.fwd_peak;
      backward = block.bwd_peak;
      out.forward_saved = block.fwd_peak_saved;
      out.backward_saved = block.bwd_peak_saved;
      break;
    case BlockChoice::kCheckpoint:
      forward = block.fwd_peak_nograd;
      backward = checkpointed_backward(model, k, out);
      break;
  }
  out.forward = out.forward_grads + forward + neighbour_copy;
  out.backward = out.backward_grads + backward + neighbour_copy;
  // The nodes that run backward before the block's first parameter gradient (the
  // loss in a head block) peak without the block's own gradients; node by node, each
  // with those made by then.
  const GradSplit split_at = grad_split(model, backward_of(model, block, choice));
  const bool by_node = backward_by_node(model, k, choice, neighbour_copy, out);
  if (!by_node && block.on_autograd && split_at.before >= 0 && k < static_cast<int>(model.grads_bwd_before.size())) {
    const int64_t before_grads = model.grads_bwd_before[k];
    const int64_t held = held_beside_backward(model, k, choice);
    int64_t before = split_at.before + held;
    if (choice == BlockChoice::kCheckpoint) before = std::max(before, recompute_peak(model, k) + block.out_grad);
    const int64_t after = split_at.after + held;
    const int64_t split = std::max(before_grads + before, out.backward_grads + after);
    if (split < out.backward - neighbour_copy) {
      const bool before_wins = before_grads + before >= out.backward_grads + after;
      out.backward = split + neighbour_copy;
      if (before_wins) out.backward_grads = before_grads;
      out.backward_before_grads = before_wins;
      const int64_t saved = before_wins ? split_at.saved_before : split_at.saved_after;
      if (choice != BlockChoice::kCheckpoint) out.backward_saved = saved;
      else if (model.reentrant_recompute) out.backward_saved = reentrant_saved(block, saved);
    }
  }
  split_post_backward(model, k, choice, neighbour_copy, out);
  add_gathered(model, k, choice, neighbour_copy, out);
  return out;
}

int64_t local_peak(const StepModel& model, int k, BlockChoice previous, BlockChoice choice) {
  const LocalPeak parts = local_parts(model, k, previous, choice);
  return std::max(parts.forward, parts.backward);
}

// Two asynchronous copies and an event wait per offloaded block: about 10 us of
// launch and synchronisation each (CUDA launch latency; docs/memory-model.md).
// It also makes a free offload lose a tie against simply keeping the block.
constexpr double kOffloadOverheadMs = 0.02;

double block_ms(const StepModel& model, int k, BlockChoice choice) {
  const BlockProfile& block = model.blocks[k];
  // DPO's reference forward runs the block once more, without autograd.
  double ms = block.fwd_ms * (model.reference_forward ? 2 : 1) + block.bwd_ms;
  if (choice == BlockChoice::kCheckpoint && block.on_autograd) ms += block.recompute_ms;
  if (choice == BlockChoice::kOffload) {
    // The copy out overlaps the next block's forward, the copy back the next
    // block's backward (side stream); only what sticks out is exposed.
    const size_t next = static_cast<size_t>(k) + 1;
    const double fwd_window = next < model.blocks.size() ? model.blocks[next].fwd_ms : 0;
    const double bwd_window = next < model.blocks.size() ? model.blocks[next].bwd_ms : 0;
    ms += std::max(0.0, model.copy_ms[k] - fwd_window) + std::max(0.0, model.copy_ms[k] - bwd_window) +
          kOffloadOverheadMs;
  }
  return ms;
}

// With checkpoint inputs offloaded, P(k-1) holds only the latest of them in forward
// (offload_stash.h: two packs a block; the stash counts block k's own input, packed
// as block k starts), none in backward (the stash is dropped when backward starts) but
// the one coming back for block k-1 while block k runs backward.
// Unsloth's checkpointer: the inputs unsloth_sends_input_to_host names go to pinned host
// memory as their block runs (none stays in a stash); in backward each input comes back
// into one of the GPU buffers (GPU_BUFFERS, GPU_BUFFERS_B), which are resized to the
// largest input and kept from step to step.
static void unsloth_offload_inputs(const StepModel& model, const std::vector<BlockChoice>& choices,
                                   std::vector<int64_t>& forward_stored, std::vector<int64_t>& backward_stored,
                                   int64_t& host_activations) {
  const int n = static_cast<int>(model.blocks.size());
  const auto checkpointed = [&](int k) { return choices[k] == BlockChoice::kCheckpoint && model.blocks[k].on_autograd; };
  int last = -1;
  for (int k = 0; k < n; ++k) {
    if (checkpointed(k)) last = k;
  }
  std::vector<int64_t> kept(n + 1, 0);
  int64_t largest = 0;
  for (int k = 0; k < n; ++k) {
    const bool offloaded = unsloth_sends_input_to_host(checkpointed(k), k == last, model.blocks[k].checkpoint);
    kept[k + 1] = kept[k] + (offloaded ? 0 : stored_bytes(model.blocks[k], choices[k]));
    if (!offloaded) continue;
    host_activations += model.blocks[k].checkpoint;
    largest = std::max(largest, model.blocks[k].checkpoint);
  }
  const int64_t buffers = largest * model.checkpoint_offload_buffers;
  for (int k = 0; k <= n; ++k) forward_stored[k] = backward_stored[k] = kept[k] + buffers;
}

// The input torchtune's OffloadActivations brought back for block k + 1's recompute, still
// live through block k's backward when block k recomputes nothing: a tensor brought back
// from the host stays in bwd_tensor_stash until the hook of the next backward node that
// unpacks one runs, after that node, or the end-of-backward callback
// (wait_and_del_remaining_references; torchtune 0.6.1 training/_activation_offloading.py
// unpack_tensor_with_streams). Under full fine-tuning the embedding's backward runs with
// layer 0's input beside it (the oracle: the `empty_like` [2, 2048, 4096] bf16 live there).
// Nothing saves it: transient.
static int64_t last_brought_back(const StepModel& model, const std::vector<BlockChoice>& choices, int k) {
  if (model.checkpoint_stash < 0 || model.checkpoint_offload_buffers > 0) return 0;
  const size_t next = static_cast<size_t>(k) + 1;
  auto recomputed = [&](size_t j) { return choices[j] == BlockChoice::kCheckpoint && model.blocks[j].on_autograd; };
  if (next >= model.blocks.size() || recomputed(static_cast<size_t>(k)) || !recomputed(next)) return 0;
  return model.blocks[next].checkpoint;
}

static void offload_checkpoint_inputs(const StepModel& model, const std::vector<BlockChoice>& choices,
                                      std::vector<int64_t>& forward_stored, std::vector<int64_t>& backward_stored,
                                      int64_t& host_activations) {
  const int n = static_cast<int>(model.blocks.size());
  if (model.checkpoint_offload_buffers > 0) {
    unsloth_offload_inputs(model, choices, forward_stored, backward_stored, host_activations);
    return;
  }
  if (model.checkpoint_stash < 0) return;
  std::vector<int64_t> kept(n + 1, 0);  // stored by blocks before k, checkpoints excluded
  for (int k = 0; k < n; ++k) {
    const bool input_offloaded = choices[k] == BlockChoice::kCheckpoint && model.blocks[k].on_autograd;
    kept[k + 1] = kept[k] + (input_offloaded ? 0 : stored_bytes(model.blocks[k], choices[k]));
    if (input_offloaded) host_activations += model.blocks[k].checkpoint;
  }
  for (int k = 0; k <= n; ++k) {
    int64_t stash = 0;
    int in_stash = 0;
    const int previous_in_stash = stashed_checkpoint_blocks(model.checkpoint_stash) - 1;
    for (int j = k - 1; j >= 0 && in_stash < previous_in_stash; --j) {
      if (choices[j] != BlockChoice::kCheckpoint || !model.blocks[j].on_autograd) continue;
      stash += model.blocks[j].checkpoint;
      ++in_stash;
    }
    forward_stored[k] = kept[k] + stash;
    const bool neighbour_back = k > 0 && choices[k - 1] == BlockChoice::kCheckpoint && model.blocks[k - 1].on_autograd;
    backward_stored[k] = kept[k] + (neighbour_back ? model.blocks[k - 1].checkpoint : 0);
  }
}

// Each block at its no-grad peak beside what the model's forward frame holds into it
// (BlockProfile::forward_frame: LlamaModel.forward's inputs_embeds through every layer
// of the reference's forward as of the policy's).
int64_t reference_forward_local(const StepModel& model) {
  if (!model.reference_forward) return 0;
  int64_t largest = 0;
  int64_t frame = 0;
  for (const BlockProfile& block : model.blocks) {
    largest = std::max(largest, frame + block.fwd_peak_nograd);
    frame += block.forward_frame;
  }
  return model.grads_fwd + largest;
}

// FSDP2's reduce-scatter input among block k's backward gradients: foreach_reduce
// copies the unsharded `.grad`s into it, a buffer that is no parameter's `.grad`
// (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce,
// foreach_reduce_scatter_copy_in, torch 2.11): at the peak a ZeRO buffer.
static int64_t reduce_input_at(const StepModel& model, int k, int64_t grads) {
  if (static_cast<size_t>(k) >= model.reduce_input_bwd.size()) return 0;
  return std::min(model.reduce_input_bwd[k], grads);
}

static int64_t at_block(const std::vector<int64_t>& bytes, int k) {
  return static_cast<size_t>(k) < bytes.size() ? bytes[k] : 0;
}

// What no parameter's `.grad` holds among a backward peak's gradients
// (StepModel::not_grads): {ZeRO buffers, gradients in flight}, within `grads`.
// FSDP2's reduce-scatter input is among the ZeRO buffers.
static std::pair<int64_t, int64_t> not_grads_bwd(const StepModel& model, int k, const LocalPeak& parts) {
  const NotGradients& n = model.not_grads;
  const bool before = parts.backward_before_grads;
  const int64_t grads = parts.backward_grads;
  const int64_t input = reduce_input_at(model, k, grads);
  const int64_t zero =
      input + std::min(grads - input, at_block(before ? n.zero_buffers_bwd_before : n.zero_buffers_bwd, k));
  const int64_t held = at_block(before ? n.in_flight_bwd_before : n.in_flight_bwd, k) + parts.backward_unit_grads;
  const int64_t in_flight = std::min(grads - zero, held);
  return {zero, in_flight};
}

// Autocast's cache holds the weight casts of checkpointed blocks until the forward's
// end (BlockProfile::cast_cache), and the model's forward frame what it holds
// (BlockProfile::forward_frame): forward only, transient. Added to `forward_stored`;
// returned as held before each block.
static std::vector<int64_t> forward_only_holds(const StepModel& model, const std::vector<BlockChoice>& choices,
                                               std::vector<int64_t>& forward_stored) {
  const size_t n = model.blocks.size();
  std::vector<int64_t> cached(n + 1, 0);
  for (size_t k = 0; k < n; ++k) {
    forward_stored[k] += cached[k];
    cached[k + 1] = cached[k] + model.blocks[k].forward_frame +
                    (choices[k] == BlockChoice::kCheckpoint ? model.blocks[k].cast_cache : 0);
  }
  return cached;
}

// What a later block's autograd Functions keep on ctx (StepModel::ctx_held) is still
// live while an earlier block runs backward: autograd frees a node's saved variables
// once it has run (torch 2.11 torch/csrc/autograd/python_function.cpp,
// PyNode::release_variables clears saved_variables only), while an attribute set on
// ctx (bitsandbytes 0.43.1 bitsandbytes/autograd/_functions.py, MatMul4Bit.forward:
// ctx.tensors = (A, B)) lives as long as the node, which the graph holds until the
// backward is done (the oracle: Mixtral-2L's layer 1 4-bit linears' inputs live
// through layer 0's backward).
static void hold_ctx_tensors(const StepModel& model, std::vector<int64_t>& backward_stored) {
  int64_t later = 0;
  for (size_t k = std::min(model.ctx_held.size(), model.blocks.size()); k-- > 0;) {
    backward_stored[k] += later;
    later += model.ctx_held[k];
  }
}

// GRPO's phases before the micro-step's forward (StepModel::generation, logprob_pass),
// through walk_step's `consider`.
template <typename Consider>
static void consider_grpo_phases(const StepModel& model, int64_t fixed, Consider& consider) {
  if (model.generation > 0) {
    consider(fixed + model.grads_generation + model.generation, "generation", -1, 0,
             model.grads_generation + model.generation, model.grads_generation, 0, 0, 0, 0);
  }
  if (model.logprob_pass > 0) {
    consider(fixed + model.grads_generation + model.logprob_pass, "log-prob pass", -1, 0,
             model.grads_generation + model.logprob_pass, model.grads_generation, 0, 0, 0, 0);
  }
}

StepPeak walk_step(const StepModel& model, const std::vector<BlockChoice>& choices,
                   int64_t persistent) {
  assert(choices.size() == model.blocks.size());
  const int n = static_cast<int>(model.blocks.size());
  StepPeak peak;
  // `local`: the bytes above base, gathered and stored; its gradients, gathered
  // units and the block's own saved tensors are taken out of the transient.
  // `cached`: among `stored`, what nothing saves (autocast's cached casts, an input
  // brought back from the host): transient.
  // `dead`: the made persistent tensors among `base` not live there (made_persistent.h).
  auto consider = [&](int64_t bytes, const char* phase, int block, int64_t stored, int64_t local,
                      int64_t grads, int64_t gathered, int64_t saved, int64_t cached, int64_t dead) {
    bytes -= dead;
    if (bytes > peak.bytes) {
      // vLLM's share in sleep mode is the generation phase's, not a transient of the trainer's.
      const int64_t woken = std::string_view(phase) == "generation" ? model.vllm_generation : 0;
      peak.bytes = bytes;
      peak.phase = phase;
      peak.block = block;
      peak.activations = stored - cached + persistent - dead + saved;
      peak.transient = local - grads - gathered - saved + cached - woken;
      peak.gradients = grads;
      peak.gathered = gathered;
      peak.vllm = model.vllm_resident + woken;
    }
  };
  std::vector<int64_t> prefix(n + 1, 0);  // prefix[k] = P(k-1): stored by blocks before k
  for (int k = 0; k < n; ++k) {
    prefix[k + 1] = prefix[k] + stored_bytes(model.blocks[k], choices[k]);
    if (choices[k] == BlockChoice::kOffload) peak.host_activations += model.blocks[k].keep;
  }
  std::vector<int64_t> forward_stored = prefix;
  std::vector<int64_t> backward_stored = prefix;
  offload_checkpoint_inputs(model, choices, forward_stored, backward_stored, peak.host_activations);
  hold_ctx_tensors(model, backward_stored);
  const std::vector<int64_t> cached = forward_only_holds(model, choices, forward_stored);
  const int64_t fixed = model.base + model.gathered;
  for (int k = 0; k < n; ++k) {
    const BlockChoice previous = k > 0 ? choices[k - 1] : BlockChoice::kKeep;
    const LocalPeak parts = local_parts(model, k, previous, choices[k]);
    const int64_t zero_fwd = std::min(parts.forward_grads, model.not_grads.zero_buffers_fwd);
    consider(fixed + forward_stored[k] + parts.forward, "forward", k, forward_stored[k], parts.forward,
             parts.forward_grads - zero_fwd, parts.forward_gathered + zero_fwd, parts.forward_saved, cached[k],
             made_persistent_dead_forward(model.made_persistent, k));
    const auto [zero, in_flight] = not_grads_bwd(model, k, parts);
    const int64_t back = last_brought_back(model, choices, k);
    consider(fixed + backward_stored[k] + back + parts.backward, "backward", k, backward_stored[k] + back,
             parts.backward, parts.backward_grads - zero - in_flight, parts.backward_gathered + zero,
             parts.backward_saved, back, made_persistent_dead_backward(model.made_persistent, k));
  }
  if (model.reference_forward) {
    const int64_t local = reference_forward_local(model);
    consider(fixed + forward_stored[n] + local, "reference forward", -1, forward_stored[n], local, model.grads_fwd, 0,
             0, 0, 0);
  }
  consider_grpo_phases(model, fixed, consider);
  const int64_t zero_step = std::min(model.grads_optimizer, model.not_grads.zero_buffers_optimizer);
  consider(model.base + model.grads_optimizer + model.optimizer_transient, "optimizer step", -1, 0,
           model.grads_optimizer + model.optimizer_transient, model.grads_optimizer - zero_step, zero_step, 0, 0,
           made_persistent_dead_backward(model.made_persistent, -1));
  return peak;
}

}  // namespace headroom::planner
