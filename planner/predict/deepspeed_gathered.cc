#include "planner/predict/deepspeed_gathered.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/op_traits.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/stack.h"

namespace headroom::planner {

namespace {

// One parameter as ZeRO-3's trace sees it: the blocks whose forward uses it, and
// the lowest block whose backward does (its module's backward hook fires).
struct TracedParam {
  int64_t elements = 0;
  int64_t bytes = 0;
  int first_forward = -1;
  int last_forward = -1;
  int first_backward = -1;  // -1: no module using it runs backward
};
using TracedMap = std::unordered_map<std::string_view, TracedParam>;

// A module's backward hook fires when its output requires grad: a trainable
// parameter, an input that requires grad, or a hook that makes the output require
// it (transformers' enable_input_require_grads on the embedding). A frozen weight
// whose module has none (the first layer's q/k/v under LoRA, the embedding) is
// not used again after its forward.
bool output_forced(const ModelContext& context, size_t node) {
  if (node >= context.analysis.node_outputs.size()) return false;
  for (int tensor : context.analysis.node_outputs[node]) {
    if (context.graph.tensors[static_cast<size_t>(tensor)].requires_grad) return true;
  }
  return false;
}

// Keyed by views of the graph's names (the graph outlives the map): called for every
// plan a ZeRO-3 search prices, over tens of thousands of parameters in a MoE model.
TracedMap traced_params(const ModelContext& context, Precision precision) {
  const graph::LayerGraph& graph = context.graph;
  std::unordered_map<std::string_view, const graph::Param*> owners;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.tied_to.empty() && !param.buffer) owners.emplace(param.name, &param);
    }
  }
  TracedMap traced;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const graph::Node& node = graph.nodes[i];
    if (node.op == graph::op::kUnused) continue;
    const bool input_grad = (i < context.analysis.needs_input_grad.size() && context.analysis.needs_input_grad[i]) ||
                            output_forced(context, i);
    for (const graph::Param& param : node.params) {
      const auto owner = owners.find(param.tied_to.empty() ? param.name : param.tied_to);
      if (param.buffer || owner == owners.end()) continue;
      TracedParam& t = traced[owner->first];
      t.elements = owner->second->elements();
      t.bytes = param_storage_bytes(*owner->second, precision);
      t.first_forward = t.first_forward < 0 ? node.block : std::min(t.first_forward, node.block);
      t.last_forward = std::max(t.last_forward, node.block);
      if (owner->second->trainable || input_grad) {
        t.first_backward = t.first_backward < 0 ? node.block : std::min(t.first_backward, node.block);
      }
    }
  }
  return traced;
}

// What the coordinator holds: every parameter a later module of the trace uses, up
// to stage3_max_live_parameters elements plus the one parameter the prefetcher
// admits while under that limit (partitioned_param_coordinator.py
// _fetch_sub_module_impl: `numel_prefetching < max_params_to_prefetch`, then the
// whole parameter), and never less than the block's own.
int64_t held_bytes(int64_t elements, int64_t bytes, int64_t own_bytes, int64_t cap_elements) {
  if (elements <= cap_elements || elements == 0) return std::max(bytes, own_bytes);
  const double share = static_cast<double>(cap_elements) / static_cast<double>(elements);
  return std::max(static_cast<int64_t>(static_cast<double>(bytes) * share), own_bytes);
}

// Each forward starts from an empty queue (reset_step: n_available 0) and each
// module's fetch prefetches one round: stage3_prefetch_bucket_size elements, the
// parameter that crosses it whole. While the first block runs, its own weights and
// about one round of the next block's are gathered; later blocks see the window full.
int64_t first_block_forward(const TracedMap& traced, int64_t prefetch_elements,
                            int64_t cap) {
  int64_t own = 0, own_elements = 0, ahead_elements = 0, ahead_bytes = 0, next_largest = 0;
  for (const auto& [name, t] : traced) {
    if (t.first_forward == 0) {
      own += t.bytes;
      own_elements += t.elements;
      continue;
    }
    ahead_elements += t.elements;
    ahead_bytes += t.bytes;
    if (t.first_forward == 1) next_largest = std::max(next_largest, t.elements);
  }
  const int64_t round = std::min(ahead_elements, prefetch_elements + next_largest);
  const int64_t round_bytes = held_bytes(ahead_elements, ahead_bytes, 0, round);
  return held_bytes(own_elements + round, own + round_bytes, own, cap);
}

}  // namespace

// Per block, the parameters' elements and bytes bucketed by one block index each
// (a MoE model has tens of thousands of parameters: one pass, then running sums).
struct Buckets {
  std::vector<int64_t> elements, bytes;
  explicit Buckets(int n) : elements(static_cast<size_t>(n), 0), bytes(static_cast<size_t>(n), 0) {}
  void add(int block, const TracedParam& t) {
    const size_t b = static_cast<size_t>(std::min(block, static_cast<int>(elements.size()) - 1));
    elements[b] += t.elements;
    bytes[b] += t.bytes;
  }
  // Each entry becomes the sum of it and those after it.
  Buckets& sum_from_the_end() {
    for (size_t i = elements.size(); i-- > 1;) elements[i - 1] += elements[i], bytes[i - 1] += bytes[i];
    return *this;
  }
};

Zero3Gathered zero3_gathered_bytes(const ModelContext& context, const RunSettings& settings,
                                   const GlobalConfig& config) {
  Zero3Gathered out;
  // The unspecified stack's ZeRO-3 is headroom's executor's (executor/zero3_parameters.cc:
  // a block's parameters and the next block's prefetch), priced by ModelStates.
  if (config.zero_stage < 3 || shards_with_fsdp(settings) || settings.stack == Stack::kUnspecified) return out;
  const int n = static_cast<int>(context.graph.blocks.size());
  const TracedMap traced = traced_params(context, settings.precision);
  int64_t largest = 0, kept_elements = 0, kept_bytes = 0;
  // By the last block whose forward uses each; those among them backward uses again;
  // by the first block whose backward uses each.
  Buckets last_forward(n), kept_by_last_forward(n), first_backward(n);
  for (const auto& [name, t] : traced) {
    largest = std::max(largest, t.elements);
    if (t.last_forward >= 0) last_forward.add(t.last_forward, t);
    if (t.first_backward < 0) continue;
    kept_elements += t.elements, kept_bytes += t.bytes;
    first_backward.add(t.first_backward, t);
    if (t.last_forward >= 0) kept_by_last_forward.add(t.last_forward, t);
  }
  const int64_t cap = settings.max_live_parameters + largest;
  const std::vector<int64_t> own_fwd = last_forward.bytes, own_bwd = first_backward.bytes;
  last_forward.sum_from_the_end();
  kept_by_last_forward.sum_from_the_end();
  out.forward.assign(n, 0);
  out.backward.assign(n, 0);
  int64_t bwd_elements = 0, bwd_bytes = 0;
  for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
    // Forward of block k: what it and later blocks use, and everything backward will use
    // again (kept from its forward: the coordinator's prefetch has already passed that
    // later use, __params_to_release), each once.
    const int64_t fwd_elements = last_forward.elements[k] + kept_elements - kept_by_last_forward.elements[k];
    const int64_t fwd_bytes = last_forward.bytes[k] + kept_bytes - kept_by_last_forward.bytes[k];
    out.forward[k] = k == 0 ? first_block_forward(traced, settings.prefetch_bucket_elements, cap)
                            : held_bytes(fwd_elements, fwd_bytes, own_fwd[k], cap);
    // Backward of block k: what it and the blocks before it use in backward.
    bwd_elements += first_backward.elements[k];
    bwd_bytes += first_backward.bytes[k];
    out.backward[k] = held_bytes(bwd_elements, bwd_bytes, own_bwd[k], cap);
  }
  return out;
}

void apply_zero3_gathered(const ModelContext& context, const RunSettings& settings,
                          const GlobalConfig& config, Accounting accounting, ModelStates& states,
                          StepModel& model) {
  Zero3Gathered gathered = zero3_gathered_bytes(context, settings, config);
  if (gathered.forward.empty()) return;
  for (int64_t& bytes : gathered.forward) bytes = account(bytes, accounting);
  for (int64_t& bytes : gathered.backward) bytes = account(bytes, accounting);
  states.gathered_params = 0;
  model.gathered = 0;
  model.gathered_fwd = std::move(gathered.forward);
  model.gathered_bwd_before = gathered.backward;
  model.gathered_bwd = std::move(gathered.backward);
}

}  // namespace headroom::planner
