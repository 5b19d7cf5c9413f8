#include "planner/time/block_profile.h"
#include "planner/time/backward_gradients.h"
#include "planner/mechanisms/autocast.h"

#include <algorithm>
#include <map>
#include <string>

#include "graph/op_traits.h"
#include "planner/time/crossing_gradients.h"
#include "planner/mechanisms/reentrant_checkpoint.h"

namespace headroom::planner {
namespace {

using graph::DType;
using graph::GraphAnalysis;
using graph::LayerGraph;
using graph::Node;

bool contains(const std::vector<int>& list, int value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

struct TensorFacts {
  std::vector<int64_t> bytes;             // accounted bytes per tensor
  std::vector<bool> read_by_later_block;  // some consumer lies in a later block
};

TensorFacts tensor_facts(const LayerGraph& graph, const GraphAnalysis& analysis, DType compute,
                         int64_t batch, int64_t seq, Accounting accounting) {
  TensorFacts facts;
  const size_t count = graph.tensors.size();
  facts.bytes.resize(count);
  for (size_t t = 0; t < count; ++t) {
    facts.bytes[t] = account(graph::tensor_bytes(graph.tensors[t], compute, batch, seq), accounting);
  }
  facts.read_by_later_block = read_by_later_block(graph, analysis);
  return facts;
}

// Peak bytes live while the block runs forward. With autograd the block's saved
// tensors stay; without it (checkpointed forward) only pending inputs stay, and
// what selective AC holds (`held`).
// `saved`: the block's saved tensors among the peak's bytes (with autograd only).
struct ForwardPeak {
  int64_t bytes = 0;
  int64_t saved = 0;
};

// The tensors live during a forward walk with their running totals: a count per
// tensor (entry_live may name one twice; an erase drops every copy, as std::erase
// on the list did), so each step costs its own inputs and outputs, not the live set.
class LiveTensors {
 public:
  LiveTensors(const TensorFacts& facts, const std::vector<char>& saved) : facts_(facts), saved_(saved) {
    copies_.assign(facts.bytes.size(), 0);
  }
  void add(int t) {
    ++copies_[t];
    bytes_ += facts_.bytes[t];
    if (saved_[t]) saved_bytes_ += facts_.bytes[t];
  }
  bool has(int t) const { return copies_[t] > 0; }
  void erase(int t) {
    const int64_t freed = facts_.bytes[t] * copies_[t];
    bytes_ -= freed;
    if (saved_[t]) saved_bytes_ -= freed;
    copies_[t] = 0;
  }
  int64_t bytes() const { return bytes_; }
  int64_t saved_bytes() const { return saved_bytes_; }

 private:
  const TensorFacts& facts_;
  const std::vector<char>& saved_;
  std::vector<int> copies_;
  int64_t bytes_ = 0;
  int64_t saved_bytes_ = 0;
};

std::vector<char> membership(size_t count, const std::vector<int>& members) {
  std::vector<char> in(count, 0);
  for (int t : members) in[static_cast<size_t>(t)] = 1;
  return in;
}

// A model_output node stands for the moment the model's forward has returned
// (graph::op::kModelOutput): Accelerate's convert_outputs_to_fp32 copies the returned
// tensors there (accelerate 1.15.0 utils/operations.py; mechanisms/output_fp32_copies.h),
// after the forward's frame let go of its locals (T5ForConditionalGeneration.forward's
// decoder output, read by lm_head alone). Live then: what the returned object holds (the
// node's holds), what autograd saved (`saved`) or a checkpoint holds (`is_held`), and what
// later blocks read.
void release_returned_frame(const LayerGraph& graph, const GraphAnalysis& analysis, int n, int block_index,
                            const std::vector<char>& saved, const std::vector<char>& is_held, LiveTensors& live) {
  const std::vector<int>& returned = analysis.node_holds[n];
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    const int id = static_cast<int>(t);
    if (!live.has(id) || saved[t] || is_held[t] || std::find(returned.begin(), returned.end(), id) != returned.end()) {
      continue;
    }
    const bool read_later = std::any_of(analysis.consumers[t].begin(), analysis.consumers[t].end(),
                                        [&](int c) { return graph.nodes[static_cast<size_t>(c)].block > block_index; });
    if (!read_later) live.erase(id);
  }
}

// Which forward of a block a walk prices. Under autograd alone, an entry input that no
// later block reads and nothing saves dies with its last reader in the block (the head's
// final norm reads the last layer's output, saves its fp32 copy, and the Python name is
// rebound to the norm's output: transformers 5.23.0 Qwen2Model.forward). A checkpoint
// holds its entry inputs through its first pass and its recompute (torch 2.11
// utils/checkpoint.py: _NoopSaveInputs, CheckpointFunction's ctx.save_for_backward).
// kRecompute runs the whole block again (CheckpointFunction.backward); kRecomputeEarlyStop
// as a non-reentrant checkpoint does (recompute_nodes_run below).
enum class ForwardPass { kAutograd, kCheckpointed, kRecompute, kRecomputeEarlyStop };

// Where a non-reentrant checkpoint's recompute stops: torch 2.11 utils/checkpoint.py
// (_checkpoint_hook's pack hook in _recomputation_hook) raises _StopRecomputationError
// once the recompute has packed as many tensors as the first forward saved, early_stop
// being torch's default (set_checkpoint_early_stop). So the block runs up to its last
// node that saves a tensor and no further. An autograd kernel packs its inputs before it
// runs (VariableType's SavedVariable(self) ahead of the redispatch) and its outputs
// after: a last node that saves only inputs never makes its outputs. Returns how many
// of the block's nodes, in order, the recompute runs to their end.
size_t recompute_nodes_run(const GraphAnalysis& analysis, const graph::BlockStructure& block) {
  for (size_t i = block.nodes.size(); i-- > 0;) {
    const int n = block.nodes[i];
    const std::vector<int>& saves = analysis.node_saves[n];
    if (saves.empty()) continue;
    const std::vector<int>& outputs = analysis.node_outputs[n];
    const bool saves_output = std::any_of(saves.begin(), saves.end(), [&](int t) { return contains(outputs, t); });
    return saves_output ? i + 1 : i;
  }
  return 0;
}

// `frame_held`: what a forward frame holds into the block for one of its nodes
// (BlockEntry::frame_held), gone once that node has run; empty for a recompute.
ForwardPeak forward_peak(const LayerGraph& graph, const GraphAnalysis& analysis, int block_index,
                         const TensorFacts& facts, const std::vector<int>& entry_live,
                         const std::vector<int>& frame_held, ForwardPass pass, const std::vector<int>& held,
                         DType compute, int64_t batch, int64_t seq, Accounting accounting) {
  const graph::BlockStructure& block = analysis.blocks[block_index];
  const size_t count = graph.tensors.size();
  const bool with_saves = pass != ForwardPass::kCheckpointed;
  const size_t nodes_run =
      pass == ForwardPass::kRecomputeEarlyStop ? recompute_nodes_run(analysis, block) : block.nodes.size();
  const std::vector<char> saved = with_saves ? membership(count, block.saved_tensors) : std::vector<char>(count, 0);
  const std::vector<char> is_held = membership(count, held);
  std::vector<int> remaining(count, 0);
  for (int n : block.nodes) {
    for (int t : analysis.node_inputs[n]) ++remaining[t];
    for (int t : analysis.node_holds[n]) ++remaining[t];
  }
  const std::vector<char> entry = membership(count, entry_live);
  auto read_after_block = [&](int t) {
    return std::any_of(analysis.consumers[t].begin(), analysis.consumers[t].end(),
                       [&](int c) { return graph.nodes[static_cast<size_t>(c)].block > block_index; });
  };
  const std::vector<char> from_frame = membership(count, frame_held);
  auto read_later = [&](int t) {
    if (from_frame[t]) return false;
    return (entry[t] && pass == ForwardPass::kAutograd) ? read_after_block(t)
                                                          : facts.read_by_later_block[t];
  };
  auto kept = [&](int t) { return read_later(t) || saved[t] || is_held[t]; };
  LiveTensors live(facts, saved);
  for (int t : entry_live) live.add(t);
  for (int t : frame_held) live.add(t);
  ForwardPeak peak{live.bytes(), live.saved_bytes()};
  auto drop_if_done = [&](int t) {
    if (remaining[t] == 0 && !kept(t)) live.erase(t);
  };
  for (size_t i = 0; i < nodes_run; ++i) {
    const int n = block.nodes[i];
    const Node& node = graph.nodes[n];
    if (node.op == graph::op::kModelOutput) release_returned_frame(graph, analysis, n, block_index, saved, is_held, live);
    for (int t : analysis.node_outputs[n]) {
      if (!analysis.persistent[t] && !live.has(t)) live.add(t);
    }
    const int64_t workspace = account(
        graph::dtype_bytes(compute, node.workspace_elements.at(batch, seq)), accounting);
    if (live.bytes() + workspace > peak.bytes) peak = {live.bytes() + workspace, live.saved_bytes()};
    for (int t : analysis.node_inputs[n]) {
      --remaining[t];
      drop_if_done(t);
    }
    for (int t : analysis.node_holds[n]) {
      --remaining[t];
      drop_if_done(t);
    }
    for (int t : analysis.node_outputs[n]) drop_if_done(t);
  }
  return peak;
}

// The recompute as CheckpointFunction.backward runs it (BlockProfile::reentrant_recompute_peak):
// autocast's cached casts of the block's inputs held to its end, the repeated casts
// of one input the cached tensor again. `plain`: the recompute's peak without them.
ForwardPeak reentrant_recompute_peak(const LayerGraph& graph, const GraphAnalysis& analysis, int block_index,
                                     const TensorFacts& facts, const std::vector<int>& entry_live,
                                     const std::vector<int>& held, DType compute, int64_t batch, int64_t seq,
                                     Accounting accounting, const ForwardPeak& plain) {
  const RecomputeCastCache cache = reentrant_cast_cache(graph, analysis, block_index);
  if (cache.held.empty()) return plain;
  TensorFacts cached = facts;
  for (int t : cache.shared) cached.bytes[static_cast<size_t>(t)] = 0;
  std::vector<int> kept = held;
  kept.insert(kept.end(), cache.held.begin(), cache.held.end());
  return forward_peak(graph, analysis, block_index, cached, entry_live, {}, ForwardPass::kRecompute, kept,
                      compute, batch, seq, accounting);
}

}  // namespace

namespace {

// The block's forward, backward and recompute time and FLOPs, node by node.
void add_block_times(const LayerGraph& graph, const GraphAnalysis& analysis, const graph::BlockStructure& block,
                     const std::vector<int>& held, DType compute, int64_t batch, int64_t seq, const GpuSpec& gpu,
                     const TimeModelOptions& time_options, BlockProfile& profile) {
  const std::vector<char> is_held = membership(graph.tensors.size(), held);
  for (int n : block.nodes) {
    const NodeTimes times = node_times(graph, analysis, n, compute, batch, seq, gpu, time_options);
    profile.fwd_ms += times.fwd_ms;
    // A selectively saved op is not run again: its output comes from the cache.
    const bool cached = std::any_of(analysis.node_outputs[n].begin(), analysis.node_outputs[n].end(),
                                    [&](int t) { return is_held[t] != 0; });
    if (!cached) profile.recompute_ms += times.fwd_ms;
    profile.bwd_ms += times.bwd_ms;
    profile.model_flops += times.fwd_flops + times.bwd_flops;
  }
}

// The block's backward peaks from its stages: its saved bytes, the gradient of its
// outputs, and each stage's gradients in flight less what it released by then.
void add_backward_peaks(const BackwardStages& stages, BlockProfile& profile) {
  const int64_t base = profile.keep + profile.out_grad;
  const BackwardStage largest = stages.largest();
  profile.bwd_peak = base + largest.bytes;
  profile.bwd_peak_saved = profile.keep - largest.released;
  if (!stages.before_param_grads.empty() && !stages.from_param_grads.empty()) {
    profile.bwd_peak_before_param_grads = base + stages.before_param_grads.bytes;
    profile.bwd_peak_from_param_grads = base + stages.from_param_grads.bytes;
    profile.bwd_saved_before_param_grads = profile.keep - stages.before_param_grads.released;
    profile.bwd_saved_from_param_grads = profile.keep - stages.from_param_grads.released;
  }
  if (!stages.through_first_param_grads.empty() && !stages.after_first_param_grads.empty()) {
    profile.bwd_peak_through_first_param_grads = base + stages.through_first_param_grads.bytes;
    profile.bwd_peak_after_first_param_grads = base + stages.after_first_param_grads.bytes;
    profile.bwd_saved_through_first_param_grads = profile.keep - stages.through_first_param_grads.released;
    profile.bwd_saved_after_first_param_grads = profile.keep - stages.after_first_param_grads.released;
  }
  for (const GradPoint& point : stages.grad_points) {
    profile.bwd_points.push_back(
        {base + point.bytes, profile.keep - point.released, point.made_before, point.made_through});
  }
  profile.own_grads = stages.own_grads;
  if (!stages.before_params.empty() && !stages.from_params.empty()) {
    profile.bwd_peak_before_params = base + stages.before_params.bytes;
    profile.bwd_peak_from_params = base + stages.from_params.bytes;
    profile.bwd_saved_before_params = profile.keep - stages.before_params.released;
    profile.bwd_saved_from_params = profile.keep - stages.from_params.released;
  }
}

// What a checkpointed block keeps (BlockProfile::checkpoint): its entry inputs and what
// selective AC holds; among them, the inputs none of its nodes saves
// (BlockProfile::checkpoint_unsaved).
void add_checkpoint_bytes(const TensorFacts& facts, const std::vector<int>& entry_live,
                          const std::vector<int>& held, const std::vector<char>& saved, BlockProfile& profile) {
  for (int t : entry_live) {
    profile.checkpoint += facts.bytes[t];
    const bool unsaved = !saved[static_cast<size_t>(t)];
    profile.checkpoint_unsaved += unsaved ? facts.bytes[t] : 0;
  }
  for (int t : held) profile.checkpoint += facts.bytes[t];
}

// Whether a backward variant's fields are the block's own.
bool same_backward(const BlockProfile& variant, const BlockProfile& profile) {
  const bool same_points = std::equal(
      variant.bwd_points.begin(), variant.bwd_points.end(), profile.bwd_points.begin(), profile.bwd_points.end(),
      [](const BackwardPoint& a, const BackwardPoint& b) { return a.bytes == b.bytes && a.saved == b.saved; });
  return variant.bwd_peak == profile.bwd_peak && variant.bwd_peak_saved == profile.bwd_peak_saved && same_points &&
         variant.bwd_peak_before_param_grads == profile.bwd_peak_before_param_grads &&
         variant.bwd_peak_from_param_grads == profile.bwd_peak_from_param_grads &&
         variant.bwd_peak_through_first_param_grads == profile.bwd_peak_through_first_param_grads &&
         variant.bwd_peak_after_first_param_grads == profile.bwd_peak_after_first_param_grads;
}

// BlockProfile::unpacked_backward from the block's stages as a non-reentrant recompute
// runs them, kept only where they differ from the ordinary backward's.
void add_unpacked_backward(const BackwardStages& stages, BlockProfile& profile) {
  BlockProfile unpacked;
  unpacked.keep = profile.keep;
  unpacked.out_grad = profile.out_grad;
  add_backward_peaks(stages, unpacked);
  if (!same_backward(unpacked, profile)) profile.unpacked_backward = std::make_shared<const BlockProfile>(std::move(unpacked));
}

// BlockProfile::reentrant_backward: the block's backward as CheckpointFunction.backward
// runs it (BackwardGradients::of_reentrant_block), its saved bytes without the recompute's
// repeated casts of one input (reentrant_cast_cache: the cached tensor again), kept only
// where it differs from the ordinary backward.
void add_reentrant_backward(const LayerGraph& graph, const GraphAnalysis& analysis, const BackwardGradients& gradients,
                            int b, const TensorFacts& facts, BlockProfile& profile) {
  const graph::BlockStructure& block = analysis.blocks[static_cast<size_t>(b)];
  const std::vector<int> shared = reentrant_cast_cache(graph, analysis, b).shared;
  BlockProfile reentrant;
  reentrant.keep = profile.keep;
  for (int t : shared) reentrant.keep -= contains(block.saved_tensors, t) ? facts.bytes[static_cast<size_t>(t)] : 0;
  reentrant.out_grad = profile.out_grad;
  add_backward_peaks(gradients.of_reentrant_block(block, shared), reentrant);
  if (reentrant.keep != profile.keep || !same_backward(reentrant, profile)) {
    profile.reentrant_backward = std::make_shared<const BlockProfile>(std::move(reentrant));
  }
}

// What is live as block b starts: `live`, its inputs; `frame_held`, what a forward
// frame holds for a node of b though no node of b reads it (held_in_forward_until), live
// in b's first forward until that node has run, gone by its recompute.
struct BlockEntry {
  std::vector<int> live;
  std::vector<int> frame_held;
};

// The block's forward peaks: with grad, without (a checkpointed block's first pass),
// and its recomputation in backward, plain and reentrant.
void add_forward_peaks(const LayerGraph& graph, const GraphAnalysis& analysis, int b, const TensorFacts& facts,
                       const BlockEntry& entry, const std::vector<int>& held, DType compute,
                       int64_t batch, int64_t seq, Accounting accounting, BlockProfile& profile) {
  static const std::vector<int> kNothing;
  const std::vector<int>& entry_live = entry.live;
  const ForwardPeak forward = forward_peak(graph, analysis, b, facts, entry_live, entry.frame_held,
                                           ForwardPass::kAutograd, kNothing, compute, batch, seq, accounting);
  profile.fwd_peak = forward.bytes;
  profile.fwd_peak_saved = forward.saved;
  profile.fwd_peak_nograd = forward_peak(graph, analysis, b, facts, entry_live, entry.frame_held,
                                         ForwardPass::kCheckpointed, held, compute, batch, seq, accounting)
                                .bytes;
  const ForwardPeak recompute = forward_peak(graph, analysis, b, facts, entry_live, kNothing,
                                             ForwardPass::kRecomputeEarlyStop, held, compute, batch, seq, accounting);
  profile.recompute_peak = recompute.bytes;
  profile.recompute_peak_saved = recompute.saved;
  const ForwardPeak whole = forward_peak(graph, analysis, b, facts, entry_live, kNothing, ForwardPass::kRecompute,
                                         held, compute, batch, seq, accounting);
  const ForwardPeak reentrant = reentrant_recompute_peak(graph, analysis, b, facts, entry_live, held, compute, batch,
                                                         seq, accounting, whole);
  profile.reentrant_recompute_peak = reentrant.bytes;
  profile.reentrant_recompute_peak_saved = reentrant.saved;
}

// The last block that reads tensor t (`producer_block` when no later one does): a
// tensor a forward frame holds is that block's input until then, and the frame's
// from the block after it (BlockProfile::forward_frame).
size_t last_reading_block(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t producer_block) {
  size_t last = producer_block;
  for (int consumer : analysis.consumers[t]) last = std::max(last, static_cast<size_t>(graph.nodes[consumer].block));
  return last;
}

// The last block that reads or holds tensor t.
size_t last_use_block(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t producer_block) {
  size_t last = last_reading_block(graph, analysis, t, producer_block);
  for (int holder : analysis.holders[t]) last = std::max(last, static_cast<size_t>(graph.nodes[holder].block));
  return last;
}

// The block whose node last holds t, a held_in_forward tensor, where no later block
// reads it (-1 otherwise): the frame holding it (LlamaModel.forward's inputs_embeds,
// held to its return after the final norm, transformers 5.23.0 modeling_llama.py) lets
// go of it in that block, once that node has run, not at the forward's end.
int held_in_forward_until(const LayerGraph& graph, const GraphAnalysis& analysis, int t) {
  if (!analysis.held_in_forward[t] || analysis.producer[t] < 0 || analysis.holders[t].empty()) return -1;
  const size_t producer_block = static_cast<size_t>(graph.nodes[analysis.producer[t]].block);
  const size_t last_reader = last_reading_block(graph, analysis, t, producer_block);
  const size_t last_use = last_use_block(graph, analysis, t, producer_block);
  return last_use > last_reader && last_use > producer_block + 1 ? static_cast<int>(last_use) : -1;
}

// A held_in_forward tensor some block beyond the next one reads (graph_analysis.cc,
// mark_lifetimes): live over a span of the forward, from the block after its own to its
// last reader or holder, as BlockProfile::forward_frame from here less the same from there.
// One a later block only holds: from the block after its last reader to the block before
// the holder's, which has it as an entry (BlockEntry::frame_held).
// Otherwise a frame holds it from the block after its last reader to the forward's end.
void add_forward_frame(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t b, int64_t bytes,
                       StepProfile& out) {
  const size_t last = last_reading_block(graph, analysis, t, b);
  const int holder = held_in_forward_until(graph, analysis, t);
  if (holder >= 0) {
    const size_t from = last <= b + 1 ? last : b;  // a far reader counts it by the span
    out.blocks[from].forward_frame += bytes;
    out.blocks[static_cast<size_t>(holder) - 1].forward_frame -= bytes;
    return;
  }
  if (last <= b + 1) {
    out.blocks[last].forward_frame += bytes;
    return;
  }
  out.blocks[b].forward_frame += bytes;
  out.blocks[last_use_block(graph, analysis, t, b)].forward_frame -= bytes;
}

// Whether t, an input of block b, is a far-read tensor whose span (add_forward_frame)
// already counts it.
bool counted_by_span(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t b) {
  if (!analysis.held_in_forward[t] || analysis.producer[t] < 0) return false;
  return static_cast<size_t>(graph.nodes[analysis.producer[t]].block) + 1 < b;
}

// BlockEntry::frame_held of block b.
std::vector<int> frame_held_into(const LayerGraph& graph, const GraphAnalysis& analysis, size_t b) {
  std::vector<int> held;
  for (int n : analysis.blocks[b].nodes) {
    for (int t : analysis.node_holds[n]) {
      if (held_in_forward_until(graph, analysis, t) == static_cast<int>(b) && !contains(held, t)) held.push_back(t);
    }
  }
  return held;
}

// What is live as block b starts. Boundary inputs the previous block already keeps
// are counted there, and far-read ones by their span.
BlockEntry block_entry(const LayerGraph& graph, const GraphAnalysis& analysis, size_t b) {
  BlockEntry entry;
  for (int t : analysis.blocks[b].boundary_inputs) {
    if (b > 0 && contains(analysis.blocks[b - 1].saved_tensors, t)) continue;
    if (counted_by_span(graph, analysis, t, b)) continue;
    entry.live.push_back(t);
  }
  entry.frame_held = frame_held_into(graph, analysis, b);
  return entry;
}

}  // namespace

StepProfile profile_step(const LayerGraph& graph, const GraphAnalysis& analysis, DType compute,
                         int64_t batch, int64_t seq, Accounting accounting, const GpuSpec& gpu,
                         const TimeModelOptions& time_options,
                         const std::vector<std::vector<int>>& checkpoint_saves, int64_t grad_width) {
  const TensorFacts facts = tensor_facts(graph, analysis, compute, batch, seq, accounting);
  const BackwardGradients gradients(graph, analysis, facts.bytes, facts.read_by_later_block, compute, batch, seq,
                                    accounting, grad_width);
  const std::vector<bool> cached_casts = autocast_cached_casts(graph);
  const std::vector<int64_t> crossing = crossing_gradients(graph, analysis, facts.bytes);
  StepProfile out;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    if (analysis.persistent[t]) out.persistent += facts.bytes[t];
  }
  out.made_persistent = made_persistent(graph, analysis, facts.bytes);
  out.blocks.resize(analysis.blocks.size());
  for (size_t b = 0; b < analysis.blocks.size(); ++b) {
    const graph::BlockStructure& block = analysis.blocks[b];
    BlockProfile& profile = out.blocks[b];
    profile.on_autograd = block.on_autograd;
    profile.checkpointable = graph.blocks[b].checkpointable;
    for (int t : block.saved_tensors) profile.keep += facts.bytes[t];

    const BlockEntry entry = block_entry(graph, analysis, b);
    const std::vector<int>& entry_live = entry.live;
    static const std::vector<int> kNothing;
    const std::vector<int>& held = b < checkpoint_saves.size() ? checkpoint_saves[b] : kNothing;
    const std::vector<char> saved = membership(graph.tensors.size(), block.saved_tensors);
    if (block.on_autograd) add_checkpoint_bytes(facts, entry_live, held, saved, profile);
    add_forward_peaks(graph, analysis, static_cast<int>(b), facts, entry, held, compute, batch, seq, accounting,
                      profile);

    add_block_times(graph, analysis, block, held, compute, batch, seq, gpu, time_options, profile);
    for (int n : block.nodes) {
      // Autocast's cached casts of trainable biases, held to the forward's end.
      const int64_t bias_elements = autocast_cached_bias_elements(graph.nodes[static_cast<size_t>(n)]);
      if (bias_elements > 0) profile.forward_frame += account(graph::dtype_bytes(compute, bias_elements), accounting);
      for (int t : analysis.node_outputs[n]) {
        if (cached_casts[t] && block.on_autograd) profile.cast_cache += facts.bytes[t];
        if (analysis.held_in_forward[t] && !saved[t]) add_forward_frame(graph, analysis, t, b, facts.bytes[t], out);
        if (facts.read_by_later_block[t] && analysis.requires_grad[t] && !analysis.persistent[t]) {
          profile.out_grad += facts.bytes[t];
        }
        if (facts.read_by_later_block[t] && !analysis.persistent[t] && !saved[t]) {
          profile.outputs += facts.bytes[t];
        }
      }
    }
    // A gradient waiting across the block (crossing_gradients) is live through its
    // backward as its out_grad is.
    profile.out_grad += crossing[b];
    if (block.on_autograd) {
      add_backward_peaks(gradients.of_block(block), profile);
      add_unpacked_backward(gradients.of_block(block, true), profile);
      add_reentrant_backward(graph, analysis, gradients, static_cast<int>(b), facts, profile);
    }
  }
  return out;
}

}  // namespace headroom::planner
