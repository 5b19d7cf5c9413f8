// DeepSpeed's gathers and gradient hooks in the replay, from the functions the step walk
// prices them with (planner/predict/deepspeed_gathered.cc, deepspeed_walk.cc; DeepSpeed
// 0.19.8, docs/stacks.md "DeepSpeed's ZeRO buffers"), so that `simulate` replays the run
// `fit` answered for.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "planner/mechanisms/peft_param_wrapper.h"
#include "planner/memory/deepspeed_buckets.h"
#include "planner/predict/deepspeed_walk.h"
#include "planner/predict/step_simulator.h"

namespace headroom::planner {

namespace {

// Whether node n's parameters wait for their AccumulateGrad past its backward: a
// ParamWrapper GEMM whose block still has another to run backward (they run in the
// block's node order reversed), the factors of all of them reached after the last.
// The walk's BackwardStages::through_first_param_grads splits at the same node.
bool factors_awaited(const graph::LayerGraph& graph, const graph::GraphAnalysis& an, int n) {
  if (!lora_factors_viewed_early(graph.nodes[n])) return false;
  for (int other : an.blocks[graph.nodes[n].block].nodes) {
    if (other == n) return false;
    if (an.needs_param_grad[other] && lora_factors_viewed_early(graph.nodes[other])) return true;
  }
  return false;
}

}  // namespace

int64_t StepSimulator::deepspeed_gather(int block) {
  const std::vector<int64_t>& held = in_backward_ ? deepspeed_gathered_.backward : deepspeed_gathered_.forward;
  const int64_t bytes = static_cast<size_t>(block) < held.size() ? held[static_cast<size_t>(block)] : 0;
  return bytes > 0 ? alloc(bytes, "ZeRO buffers") : -1;
}

void StepSimulator::plan_deepspeed_hooks() {
  zero2_hooks_ = deepspeed_zero2_hooks(settings_, config_, states_);
  partition_block_ = zero2_hooks_ ? deepspeed_partition_block(settings_, states_) : -1;
  oversized_grads_.assign(graph_.nodes.size(), 0);
  if (!zero2_hooks_ && !deepspeed_zero3_hooks(settings_, config_, states_)) return;
  std::vector<size_t> position(graph_.nodes.size(), 0);
  for (size_t i = 0; i < an_.order.size(); ++i) position[static_cast<size_t>(an_.order[i])] = i;
  // A tied weight's gradient is complete at its first use in forward, the last in backward.
  std::map<std::string, size_t> completed_at;
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    for (const graph::Param& param : graph_.nodes[n].params) {
      const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
      const auto [it, fresh] = completed_at.try_emplace(owner, n);
      if (position[n] < position[it->second]) it->second = n;
    }
  }
  for (const auto& [owner, span] : blocks_by_owner(graph_)) {  // a weight several blocks use is tied across them
    if (span.lowest != span.highest) tied_across_blocks_.insert(owner);
  }
  for (const auto& [owner, n] : completed_at) {
    const auto original = owners_.find(owner);
    if (original == owners_.end() || original->second->buffer || !original->second->trainable) continue;
    if (original->second->elements() <= settings_.reduce_bucket_elements) continue;
    oversized_grads_[n] += grad_bytes(*original->second, settings_.precision);
  }
}

void StepSimulator::make_backward_buckets(int n) {
  if (backward_buckets_ >= 0 || !an_.needs_param_grad[n]) return;
  const int64_t buckets = deepspeed_backward_bucket_bytes(settings_, config_, Accounting::kAllocated);
  if (buckets > 0) backward_buckets_ = alloc(buckets, "gradients");
}

// What the hooks hold beyond node `n` goes: ZeRO-3 reduce-scatters a held gradient at
// the next parameter's hook, which the walk places before that node's stage
// (grads_bwd_before); ZeRO-2's hooks run after the node's backward (deepspeed_hooks_after).
void StepSimulator::release_held_oversized(int n) {
  std::vector<std::pair<int, int64_t>> kept;
  for (const auto& [made_at, handle] : held_oversized_) {
    if (made_at == n) kept.emplace_back(made_at, handle); else release(handle);
  }
  held_oversized_ = std::move(kept);
}

void StepSimulator::deepspeed_hooks_before(int n) {
  if (an_.needs_param_grad[n] && !zero2_hooks_) release_held_oversized(n);
  if (oversized_grads_.size() > static_cast<size_t>(n) && oversized_grads_[n] > 0) {
    held_oversized_.emplace_back(n, alloc(oversized_grads_[n], "gradients"));
    oversized_uncopied_ += oversized_grads_[n];
  }
}

// ZeRO-2's hooks after a node's backward (the walk's through/after split,
// StepModel::grads_made_by_hooks): the first makes the buckets (setup_buckets), a later
// one reduces the gradient held over the bucket, and the first of the partition's block
// makes the partition (copy_grads_in_partition). None runs after a ParamWrapper GEMM
// whose factors autograd reaches later (factors_awaited).
void StepSimulator::deepspeed_hooks_after(int n) {
  if (!zero2_hooks_ || !an_.needs_param_grad[n] || factors_awaited(graph_, an_, n)) return;
  make_backward_buckets(n);
  release_held_oversized(n);
  if (partition_ < 0 && graph_.nodes[n].block == partition_block_) make_partition();
}

void StepSimulator::deepspeed_block_done() {
  // ZeRO-2 reduces an oversized gradient alone (extra_large_param_to_reduce): average_tensor
  // flattens its rank slices into one copy beside it (allreduce_bucket: self.flatten).
  if (!zero2_hooks_ || oversized_uncopied_ == 0) return;
  held_oversized_.emplace_back(-1, alloc(oversized_uncopied_, "ZeRO buffers"));
  oversized_uncopied_ = 0;
}

void StepSimulator::deepspeed_backward_done() {
  for (const auto& [made_at, handle] : held_oversized_) release(handle);  // reduced at the end of backward
  held_oversized_.clear();
  oversized_uncopied_ = 0;
  if (zero2_hooks_ && partition_ < 0) make_partition();
}

void StepSimulator::make_partition() {
  if (states_.grads_full > 0) partition_ = alloc(states_.grads_full, "ZeRO buffers");
}

void StepSimulator::drop_partition() {
  release(partition_);  // step(): averaged_gradients[i] = None
  partition_ = -1;
}

void StepSimulator::hold_tied_partial(const std::string& owner, const graph::Param& original) {
  if (!zero2_hooks_ || !tied_across_blocks_.count(owner)) return;
  tied_partials_[owner] = alloc(grad_bytes(original, settings_.precision), "transient");
}

void StepSimulator::release_tied_partial(const std::string& owner) {
  const auto it = tied_partials_.find(owner);
  if (it == tied_partials_.end()) return;
  release(it->second);  // the hook copies the summed gradient into the bucket
  tied_partials_.erase(it);
}

}  // namespace headroom::planner
