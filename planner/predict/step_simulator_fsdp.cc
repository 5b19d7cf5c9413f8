// ZeRO-3 and FSDP: gathers, stream copies, the root group, gradient reduction.
#include "planner/predict/step_simulator.h"

#include <algorithm>

#include "planner/time/fsdp2_stream_copies.h"

namespace headroom::planner {

using graph::Node;

int64_t StepSimulator::gather(int block, int ahead) {
  if (!fsdp() && config_.zero_stage < 3) return -1;
  if (!fsdp()) return deepspeed_gathered_.forward.empty() ? alloc(block_param_bytes_[block], "ZeRO buffers")
                                                          : deepspeed_gather(block);
  int64_t unsharded = -1;  // the root group is gathered for the whole micro-step (gather_root)
  if (const auto kept = kept_unsharded_.find(block); kept != kept_unsharded_.end()) {
    unsharded = kept->second;  // not resharded after its forward
    kept_unsharded_.erase(kept);
  } else if (!in_root_group(block)) {
    const auto prefetched = all_gather_buffers_.find(block);
    int64_t copy_in = -1;
    if (prefetched != all_gather_buffers_.end()) {
      copy_in = prefetched->second;
      all_gather_buffers_.erase(prefetched);
    } else {
      copy_in = all_gather_buffer(block);
    }
    if (fsdp1()) {
      unsharded = copy_in;
    } else {
      unsharded = alloc(block_param_bytes_[block], "ZeRO buffers");
      copy_out_gathered(block, block_param_bytes_[block], "all-gather copy-out " + block_name(block));
      // The last all-gather's output lives until the root's post-forward (the kept
      // tail's, _fsdp_state.py _root_post_forward); the others' until the next copy-in,
      // which the prefetch of the next block already holds.
      if (block == kept_tail_) tail_copy_in_ = copy_in; else release(copy_in);
    }
  }
  prefetch_gather(ahead);
  return unsharded;
}

void StepSimulator::prefetch_gather(int ahead) {
  const bool in_range =
      ahead >= 0 && static_cast<size_t>(ahead) < block_param_bytes_.size() && !in_root_group(ahead) &&
      !kept_unsharded_.count(ahead);
  if (in_range && !all_gather_buffers_.count(ahead)) all_gather_buffers_[ahead] = all_gather_buffer(ahead);
}

int64_t StepSimulator::all_gather_buffer(int block) {
  const int64_t copies = offload_staging_bytes(block_shard_bytes_[block], block_param_bytes_[block]);
  const int64_t staged = copies > 0 ? alloc(copies, "ZeRO buffers", kAllGatherStream) : -1;
  const int64_t buffer = alloc(block_param_bytes_[block], "ZeRO buffers", kAllGatherStream);
  if (staged >= 0) release(staged);
  return buffer;
}

int64_t StepSimulator::offload_staging_bytes(int64_t shard_bytes, int64_t gathered_bytes) const {
  if (!fsdp_cpu_offload(settings_, config_)) return 0;
  const int64_t group = settings_.shard_group_size();
  const auto per_rank = [&](int64_t bytes) { return (bytes + group - 1) / group; };
  const int64_t stored = per_rank(shard_bytes);
  const int64_t gathered = per_rank(gathered_bytes);
  return stored + (shard_bytes != gathered_bytes ? gathered : 0);
}

std::pair<int64_t, int64_t> StepSimulator::root_group_bytes() const {
  int64_t stored = 0, gathered = 0;
  for (size_t b = 0; b < graph_.blocks.size(); ++b) {
    if (!in_root_group(static_cast<int>(b))) continue;
    stored += block_shard_bytes_[b];
    gathered += block_param_bytes_[b];
  }
  return {stored, gathered};
}

std::vector<int> StepSimulator::root_blocks() const {
  std::vector<int> blocks;
  for (size_t b = 0; b < graph_.blocks.size(); ++b) {
    if (in_root_group(static_cast<int>(b))) blocks.push_back(static_cast<int>(b));
  }
  return blocks;
}

void StepSimulator::restage_root() {
  if (!fsdp() || root_params_ < 0 || !fsdp_restages_root(settings_, config_.zero_stage)) return;
  const auto [stored, gathered] = root_group_bytes();
  const int64_t copies = offload_staging_bytes(stored, gathered);
  if (copies == 0) return;
  label_ = "copy in root shard for backward";
  release(alloc(copies, "ZeRO buffers", kAllGatherStream));
}

bool StepSimulator::keeps_unsharded(int block) const {
  return block == kept_layer_ || block == kept_tail_ || (fsdp_keeps_unsharded(settings_, config_.zero_stage) && !in_root_group(block));
}

void StepSimulator::gather_root() {
  const auto [stored, bytes] = root_group_bytes();
  if (bytes == 0) return;
  label_ = "all-gather root group";
  if (fsdp1()) {
    const int64_t copies = offload_staging_bytes(stored, bytes);
    const int64_t staged = copies > 0 ? alloc(copies, "ZeRO buffers", kAllGatherStream) : -1;
    root_params_ = alloc(bytes, "ZeRO buffers", kAllGatherStream);
    if (staged >= 0) release(staged);
    return;
  }
  const int64_t copy_in = alloc(bytes, "ZeRO buffers", kAllGatherStream);
  root_params_ = alloc(bytes, "ZeRO buffers");
  copy_out_gathered(-1, bytes, "all-gather copy-out root group");
  release(copy_in);
}

void StepSimulator::copy_out_gathered(int block, int64_t bytes, const std::string& label) {
  stream_copy(block, 2 * bytes, label);
}

void StepSimulator::copy_in_gradients(const std::vector<int>& blocks, const std::string& label) {
  int64_t bytes = 0;
  for (int block : blocks) {
    for (int n : an_.blocks[block].nodes) {
      for (const graph::Param& param : graph_.nodes[n].params) {
        if (param.trainable && param.tied_to.empty()) bytes += reduce_copy_in_bytes(param, settings_);
      }
    }
  }
  if (bytes > 0) stream_copy(blocks.size() == 1 ? blocks[0] : -1, bytes, label);
}

void StepSimulator::stream_copy(int block, int64_t bytes, const std::string& label) {
  const double ms = stream_copy_ms(static_cast<double>(bytes), ctx_.gpu, ctx_.time_options);
  clock_ = event(Stream::kCompute, Phase::kComm, clock_, ms, block, label, bytes);
  time_.comm_exposed_ms += ms;
  settle(clock_);
}

void StepSimulator::reshard_root() {
  // The final callback drops the last group's reduce-scatter state; the root's
  // post_backward, first in it, drops it before its own reduce (_fsdp_state.py
  // _root_post_backward_final_callback).
  drop_reduce_input();
  if (root_params_ < 0) return;
  label_ = "reduce-scatter root group";
  if (!root_grads_.empty()) {
    const int64_t buffers = alloc(states_.fsdp2_root_reduce_scatter, "ZeRO buffers");
    if (!fsdp1()) copy_in_gradients(root_blocks(), "reduce-scatter copy-in root group");
    if (states_.root_offload_grad_shard > 0) offload_shards_.push_back(alloc(states_.root_offload_grad_shard, "gradients"));
    release(buffers);
  }
  for (int64_t handle : root_grads_) release(handle);
  if (!root_grads_.empty()) make_sharded_grad(-1);
  root_grads_.clear();
  if (micro_ + 1 == config_.grad_accum) {  // the root's held gradient went into this reduce
    release(root_unsynced_);
    root_unsynced_ = -1;
  }
  release(root_params_);
  root_params_ = -1;
  // FSDP1 offload: _post_backward_final_callback waits for the copies to the
  // host, then _finalize_params drops every _saved_grad_shard.
  label_ = "gradients to host";
  for (int64_t handle : offload_shards_) release(handle);
  offload_shards_.clear();
}

void StepSimulator::make_sharded_grad(int block) {
  if (states_.sharded_block_grads.empty() || !sharded_made_.insert(block).second) return;
  const int64_t bytes = block < 0 ? states_.root_sharded_grads : states_.sharded_block_grads[block];
  if (bytes <= 0) return;
  // Made on the reduce-scatter stream (FSDP2: foreach_reduce allocates reduce_output
  // and casts it under reduce_scatter_stream; FSDP1: _post_backward_hook runs
  // _reduce_grad under _post_backward_stream), so its freed blocks stay cached
  // for that stream, out of reach of the next step's activations.
  const int64_t handle = alloc(bytes, "gradients", kReduceScatterStream);
  // Optimizer in backward: the parameter's hook steps and frees it at once.
  if (states_.grads_in_backward) release(handle); else param_grads_.push_back(handle);
}

int64_t StepSimulator::grad_bytes_of_block(int block) const {
  int64_t bytes = 0;
  for (int n : an_.blocks[block].nodes) {
    for (const graph::Param& param : graph_.nodes[n].params) {
      if (param.trainable && param.tied_to.empty()) bytes += planner::grad_bytes(param, settings_.precision);
    }
  }
  return bytes;
}

// The block's gradients as its backward ends: held unsharded under no_sync, the
// root's kept for the final callback, or FSDP2's reduce-scatter buffers and
// FSDP1 offload's sharded gradient. Returns whether this micro-step reduces.
bool StepSimulator::reduce_block_gradients(int block) {
  // FSDP under no_sync: before the last micro-step each unit keeps its unsharded
  // gradient (allocated by the first backward, added to in place after) and nothing
  // is reduced; the last micro-step reduces as usual and then frees it.
  const bool last_micro = micro_ + 1 == config_.grad_accum;
  const bool unsynced = !states_.unsynced_block_grads.empty();
  if (unsynced && grad_bytes_of_block(block) > 0) {
    int64_t& held = in_root_group(block) ? root_unsynced_ : unsynced_.try_emplace(block, -1).first->second;
    const int64_t bytes =
        in_root_group(block) ? states_.root_unsynced_grads : states_.unsynced_block_grads[block];
    if (held < 0 && bytes > 0) held = alloc(bytes, "gradients");
  }
  const bool syncing = !unsynced || last_micro;
  const int64_t reduce_bytes =
      static_cast<size_t>(block) < states_.reduce_scatter_block.size() ? states_.reduce_scatter_block[block] : 0;
  if (!syncing) {
    // no reduce-scatter: the gradient stays with the unit
  } else if (in_root_group(block) && grad_bytes_of_block(block) > 0) {
    root_grads_.push_back(alloc(grad_bytes_of_block(block), "gradients"));
  } else if (reduce_bytes > 0 && grad_bytes_of_block(block) > 0) {
    reduce_scatter_block(block, reduce_bytes);
  }
  return syncing;
}

// A unit's reduce-scatter as its backward ends: its unsharded gradients (FSDP1: the
// reduce buffers) and FSDP2's reduce-scatter input they are copied into, the block's own
// bytes as the walk prices them (ModelStates::reduce_scatter_block). FSDP2's
// foreach_reduce frees the unsharded gradients before the output that becomes the
// sharded gradient, and post_backward keeps the input as comm_ctx.reduce_scatter_state
// until the next group's post_backward drops it before its own foreach_reduce (torch 2.11
// _fsdp_param_group.py post_backward; _fsdp_collectives.py foreach_reduce), as the walk
// holds it (step_builder.cc fsdp2_reduce_input_held).
void StepSimulator::reduce_scatter_block(int block, int64_t reduce_bytes) {
  label_ = "reduce-scatter " + block_name(block);
  const bool per_block = static_cast<size_t>(block) < states_.reduce_scatter_input_block.size();
  const int64_t input_bytes = !fsdp1() && per_block ? std::min(states_.reduce_scatter_input_block[block], reduce_bytes) : 0;
  drop_reduce_input();
  const int64_t buffers = alloc(reduce_bytes - input_bytes, "ZeRO buffers");
  const int64_t input = input_bytes > 0 ? alloc(input_bytes, "ZeRO buffers") : -1;
  if (!fsdp1()) copy_in_gradients({block}, "reduce-scatter copy-in " + block_name(block));
  if (static_cast<size_t>(block) < states_.offload_grad_shards.size() && states_.offload_grad_shards[block] > 0) {
    offload_shards_.push_back(alloc(states_.offload_grad_shards[block], "gradients"));
  }
  release(buffers);
  make_sharded_grad(block);
  reduce_input_ = input;
  if (const auto held = unsynced_.find(block); held != unsynced_.end()) {
    release(held->second);
    unsynced_.erase(held);
  }
}

void StepSimulator::drop_reduce_input() {
  if (reduce_input_ >= 0) release(reduce_input_);
  reduce_input_ = -1;
}

// Gradient traffic of this block: reduce-scatter (ZeRO-2/3) or copies to a CPU optimizer.
void StepSimulator::gradient_traffic(int block, bool syncing) {
  const bool last_micro = micro_ + 1 == config_.grad_accum;
  const int64_t grad_bytes = grad_bytes_of_block(block);
  const int world = settings_.world_size();
  if (grad_bytes > 0 && world > 1 && syncing && (config_.zero_stage >= 2 || last_micro)) {
    // torch's FSDPs reduce in their reduce dtype, as step_time prices it: fp32
    // doubles a 16-bit gradient's bytes.
    const double reduced = static_cast<double>(grad_bytes) *
                           (fsdp() ? static_cast<double>(fsdp_reduce_bytes_per_element(settings_)) /
                                         static_cast<double>(grad_bytes_per_element(settings_.precision))
                                   : 1.0);
    const double ring = static_cast<double>(world - 1) / world * (config_.zero_stage >= 2 ? 1 : 2);
    const double bytes = ring * reduced;
    const double start = std::max(clock_, comm_free_);
    comm_free_ = event(Stream::kComm, Phase::kComm, start,
                       gradient_collective_ms(settings_, ctx_.gpu, config_.zero_stage, reduced),
                       block, "reduce gradients " + block_name(block), static_cast<int64_t>(bytes));
  }
  if (grad_bytes > 0 && config_.offload_optimizer != Offload::kNone && last_micro) {
    const double start = std::max(clock_, copy_out_free_);
    const int shard = config_.zero_stage >= 1 ? settings_.shard_group_size() : 1;
    copy_out_free_ = event(Stream::kCopyOut, Phase::kOptimizer, start, transfer_ms(static_cast<double>(grad_bytes) / shard),
                           block, "gradients to host " + block_name(block), grad_bytes);
  }
}

}  // namespace headroom::planner
