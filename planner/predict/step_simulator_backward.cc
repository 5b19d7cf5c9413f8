// The step's backward, node by node: input and parameter gradients, workspaces, saved
// tensors released, and what a block's backward holds to its end (step_simulator.h).
#include <algorithm>

#include "planner/predict/step_simulator.h"
#include "planner/time/python_norm_backward.h"

namespace headroom::planner {

using graph::Node;
// The gradients a node's backward makes for its parameters: each trainable
// parameter's own (the first backward of a progressive run), a shared weight's
// sum from its first use backward reaches, and the partials in flight beside it
// (later uses of a shared weight, a weight applied per chunk), as the step walk
// prices them (BackwardGradients::partial_gradients: one mechanism, one place).
StepSimulator::ParamGradWork StepSimulator::start_param_grads(int n) {
  ParamGradWork work;
  for (const graph::Param& param : graph_.nodes[n].params) {
    const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
    const auto shared = shared_uses_.find(owner);
    if (shared == shared_uses_.end()) {
      if (states_.grads_progressive && micro_ == 0 && param.trainable && param.tied_to.empty()) {
        param_grads_.push_back(alloc(grad_bytes(param, settings_.precision), "gradients"));
      }
      continue;
    }
    const graph::Param& original = *owners_.at(owner);
    if (!original.trainable) continue;
    // Summed in autograd's input buffer from the first use backward reaches to the last.
    const int seen = ++seen_uses_[owner];
    if (seen == 1 && states_.grads_progressive && micro_ == 0) {
      shared_grads_[owner] = alloc(grad_bytes(original, settings_.precision), "gradients");
    } else if (seen == 1 && holds_partial_beside_grad()) {
      // Accumulating: the first partial beside the .grad an earlier micro-step made
      // (planner/predict/shared_grads_accumulating.h), freed when AccumulateGrad adds the sum.
      tied_partials_[owner] = alloc(grad_bytes(original, settings_.precision), "transient");
    } else if (seen == 1) {
      hold_tied_partial(owner, original);
    }
    if (seen == shared->second) work.finished.push_back(owner);
  }
  const int64_t partials = backward_grads_->partial_gradients(n);
  if (partials > 0) work.partials.push_back(alloc(partials, "transient"));
  return work;
}

// A later micro-step of plain autograd (no ZeRO, FSDP, optimizer in backward): every
// `.grad` exists, so a shared weight's input buffer is a tensor of its own.
bool StepSimulator::holds_partial_beside_grad() const {
  return micro_ > 0 && states_.grads_progressive && !states_.grads_in_backward && config_.zero_stage == 0 &&
         states_.sharded_block_grads.empty() && states_.reduce_scatter_block.empty() && states_.unsynced_grads == 0;
}

// After the node's kernel: partials freed, finished shared gradients joined to
// the others, and, with the optimizer in backward, this node's gradients stepped and freed.
void StepSimulator::finish_param_grads(const ParamGradWork& work, size_t grads_before) {
  for (int64_t partial : work.partials) release(partial);
  for (const std::string& owner : work.finished) {
    release_tied_partial(owner);
    // AccumulateGrad runs once all uses are in: the gradient joins the others.
    const auto it = shared_grads_.find(owner);
    if (it != shared_grads_.end()) {
      param_grads_.push_back(it->second);
      shared_grads_.erase(it);
    }
    seen_uses_.erase(owner);
  }
  if (states_.grads_in_backward) {
    // Optimizer in backward: each gradient is stepped and freed as it is produced.
    for (size_t g = grads_before; g < param_grads_.size(); ++g) release(param_grads_[g]);
    param_grads_.resize(grads_before);
  }
}

// A node's backward scratch beside its input and output gradients: its workspace, or
// what a Python RMSNorm's chain holds beyond those gradients
// (planner/time/python_norm_backward.h). -1 when there is none.
int64_t StepSimulator::alloc_backward_workspace(int n) {
  const Node& node = graph_.nodes[n];
  int64_t bytes = graph::dtype_bytes(ctx_.compute_dtype, node.backward_workspace().at(batch_, seq_));
  const int64_t chain = python_norm_backward_bytes(graph_, an_, n, batch_, seq_, Accounting::kAllocated);
  if (chain > 0) {
    int64_t gradients = 0;
    for (int t : an_.node_inputs[n]) gradients += grad_handle_[t] >= 0 ? tensor_bytes_[t] : 0;
    for (int t : an_.node_outputs[n]) gradients += grad_handle_[t] >= 0 ? tensor_bytes_[t] : 0;
    bytes = std::max(bytes, chain - gradients);
  }
  return bytes > 0 ? alloc(bytes, "transient") : -1;
}

// One node's backward: its input gradients, parameter gradients, workspace and
// kernel, then what it no longer needs.
void StepSimulator::backward_node(int n, int block) {
  const Node& node = graph_.nodes[n];
  label_ = "backward " + node.name;
  const bool holding_args = checkpointed(block) && reentrant_recompute_;
  PromotedGradients promoted;
  for (int t : an_.node_inputs[n]) {
    // A persistent tensor a node made (T5's encoder output) gets its gradient from its
    // readers too, which waits for its producer's backward (crossing_gradients.h).
    if (!an_.requires_grad[t] || (an_.persistent[t] && an_.producer[t] < 0)) continue;
    const int64_t wide = backward_grads_->promoted_gradient(n, t);
    if (holding_args && grad_handle_[t] < 0 && backward_grads_->gradient_is_out_grad(t)) {
      continue;  // the held out_grad itself: a later reader's gradient is a sum of its own
    }
    if (wide > 0) {
      promoted.wide.push_back(alloc(wide, "activation gradients"));
      promoted.inputs.push_back(t);
    } else if (grad_handle_[t] < 0) {
      grad_handle_[t] = alloc(tensor_bytes_[t], "activation gradients");
    }
  }
  const size_t grads_before = param_grads_.size();
  // ZeRO-1/2 make their reduce buckets at the first gradient hook (deepspeed_buckets.h);
  // where the hooks make the gradients, after the node's backward (deepspeed_hooks_after).
  if (!zero2_hooks_) make_backward_buckets(n);
  deepspeed_hooks_before(n);
  const ParamGradWork work = start_param_grads(n);
  const int64_t ws = alloc_backward_workspace(n);
  compute(Phase::kBackward, times_[n].bwd_ms, block, label_, times_[n].bwd_flops);
  release(ws);
  // A non-reentrant recompute's unpack hook handed the node its saved tensors once: they
  // die as its backward returns, before the engine casts a promoted gradient.
  const bool unpacked = checkpointed(block) && !reentrant_recompute_;
  if (unpacked && !promoted.inputs.empty()) release_saves(n);
  cast_promoted_gradients(promoted);
  finish_param_grads(work, grads_before);
  for (int t : an_.node_outputs[n]) {
    // CheckpointFunction.backward holds the gradients it was handed (`args`) while
    // torch.autograd.backward runs over the block (torch 2.11 torch/utils/checkpoint.py),
    // as the walk prices them (BackwardGradients::of_reentrant_block).
    if (holding_args && grad_handle_[t] >= 0 && read_by_later_block_[t]) {
      held_args_.push_back(grad_handle_[t]);
    } else {
      release(grad_handle_[t]);
    }
    grad_handle_[t] = -1;
  }
  if (!unpacked || promoted.inputs.empty()) release_saves(n);
  // Hooks run from AccumulateGrad, once the node's backward has returned and its
  // input gradients and saved tensors are gone.
  deepspeed_hooks_after(n);
}

// Autograd releases node n's saved variables once its backward has run (engine.cpp
// evaluate_function: fn.release_variables() after call_function, torch 2.11).
void StepSimulator::release_saves(int n) {
  for (int t : an_.node_saves[n]) {
    if (saved_[t] > 0) {
      --saved_[t];
      maybe_free(t);
    }
  }
}

// The engine casts each promoted input's gradient to the input's dtype in
// validate_outputs (torch 2.11 torch/csrc/autograd/engine.cpp, inside call_function, the
// node's incoming gradient still bound), and the wide one goes: the walk prices both
// (BackwardGradients::promoted_gradient). A cast into a gradient that already exists is
// added into autograd's input buffer and goes too.
void StepSimulator::cast_promoted_gradients(const PromotedGradients& promoted) {
  std::vector<int64_t> added;
  for (int t : promoted.inputs) {
    if (grad_handle_[t] < 0) {
      grad_handle_[t] = alloc(tensor_bytes_[t], "activation gradients");
    } else {
      added.push_back(alloc(tensor_bytes_[t], "transient"));
    }
  }
  for (int64_t handle : promoted.wide) release(handle);
  for (int64_t handle : added) release(handle);
}

// A non-reentrant recompute makes node n's ctx tensors again while the first forward's
// are still held (ctx_recomputed_tensors): a second storage each.
void StepSimulator::copy_ctx_tensors(int n, int block) {
  const std::vector<int>& again = ctx_recomputed_[static_cast<size_t>(block)];
  for (int t : an_.node_outputs[n]) {
    if (handle_[t] >= 0 && std::find(again.begin(), again.end(), t) != again.end()) {
      ctx_copies_[static_cast<size_t>(block)].push_back(alloc(tensor_bytes_[t], block_category(block)));
    }
  }
}

// A checkpointed block's backward ends: its inputs (and selective saves) are no longer
// held, nor the recompute's ctx copies.
void StepSimulator::release_checkpoint_holds(int block) {
  for (int64_t copy : ctx_copies_[static_cast<size_t>(block)]) release(copy);
  ctx_copies_[static_cast<size_t>(block)].clear();
  for (int t : an_.blocks[block].boundary_inputs) {
    --held_by_checkpoint_[t];
    maybe_free(t);
  }
  for (int t : selective_saves(block)) {
    --held_by_checkpoint_[t];
    maybe_free(t);
  }
}

// The made persistent tensors whose earliest reader is `block` go once its backward has
// run: their last save is released and the forward's frame that made them returned long
// before (made_persistent.h). Also after a no-grad forward, which saves none of them.
void StepSimulator::release_made_tables(int block) {
  for (size_t t = 0; t < graph_.tensors.size(); ++t) {
    if (handle_[t] < 0 || made_first_reader_[t] < 0) continue;
    if (block >= 0 && made_first_reader_[t] != block) continue;
    release(handle_[t]);
    handle_[t] = -1;
  }
}

void StepSimulator::backward_block(int block) {
  backward_block_nodes(block);
  release_made_tables(block);
}

void StepSimulator::backward_block_nodes(int block) {
  if (!an_.blocks[block].on_autograd) return;
  // Prefetch this block if not yet in flight, and the next one to overlap it.
  prefetch_block(block);
  if (block > 0) prefetch_block(block - 1);
  wait_for_offloaded(block);
  // The kept tail's pre-backward hook fires at lm_head's output gradient, after
  // the loss's backward: its prefetch waits for the first node with parameters.
  // FSDP1 without backward prefetch gathers each unit at its own backward.
  const bool no_prefetch = fsdp1() && !fsdp1_prefetches_backward(settings_);
  const bool hook_later = block == kept_tail_;
  const int64_t gathered = gather(block, hook_later || no_prefetch ? -1 : block - 1);
  if (checkpointed(block)) {
    if (settings_.offload_checkpoint_inputs) fetch_checkpoint_inputs(block);
    if (sends_inputs_to_host(block)) fetch_inputs_into_buffers(block);
    forward_block(block, true);
  }
  const std::vector<int>& nodes = an_.blocks[block].nodes;
  bool hooked = !hook_later;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    if (!an_.needs_input_grad[*it] && !an_.needs_param_grad[*it]) continue;
    if (!hooked && !graph_.nodes[*it].params.empty()) {
      prefetch_gather(block - 1);
      hooked = true;
    }
    backward_node(*it, block);
  }
  if (!hooked) prefetch_gather(block - 1);  // the kept tail with no node with parameters
  for (int64_t handle : held_args_) release(handle);
  held_args_.clear();
  if (checkpointed(block)) release_checkpoint_holds(block);
  deepspeed_block_done();
  const bool syncing = reduce_block_gradients(block);
  if (gathered >= 0) release(gathered);
  gradient_traffic(block, syncing);
}

}  // namespace headroom::planner
