#include "planner/time/backward_gradients.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "graph/op_traits.h"
#include "models/resnet.h"
#include "planner/mechanisms/liger_kernels.h"
#include "planner/mechanisms/peft_param_wrapper.h"
#include "planner/mechanisms/trl_fused_head.h"
#include "planner/time/python_norm_backward.h"

namespace headroom::planner {

void BackwardStage::consider(int64_t at_node, int64_t released_there) {
  if (at_node <= bytes) return;
  bytes = at_node;
  released = released_there;
}

BackwardStage BackwardStages::largest() const {
  const BackwardStage& most = before_param_grads.bytes >= from_param_grads.bytes ? before_param_grads : from_param_grads;
  return most.empty() ? BackwardStage{0, 0} : most;
}

std::vector<bool> read_by_later_block(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis) {
  std::vector<bool> later(graph.tensors.size(), false);
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    if (analysis.producer[t] < 0) continue;
    const int block = graph.nodes[analysis.producer[t]].block;
    for (int consumer : analysis.consumers[t]) {
      if (graph.nodes[consumer].block > block) later[t] = true;
    }
  }
  return later;
}

BackwardGradients::BackwardGradients(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                     const std::vector<int64_t>& tensor_bytes, const std::vector<bool>& arriving,
                                     graph::DType compute, int64_t batch, int64_t seq, Accounting accounting,
                                     int64_t grad_width)
    : graph_(graph), analysis_(analysis), tensor_bytes_(tensor_bytes), arriving_(arriving), compute_(compute),
      batch_(batch),
      seq_(seq), accounting_(accounting),
      grad_width_(grad_width > 0 ? grad_width : graph::dtype_bytes(compute, 1)),
      position_(graph.nodes.size(), 0) {
  for (size_t i = 0; i < analysis.order.size(); ++i) position_[analysis.order[i]] = static_cast<int>(i);
  owner_trainable_.reserve(graph.nodes.size());
  use_positions_.reserve(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (const graph::Param& param : graph.nodes[n].params) {
      const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
      if (param.tied_to.empty()) owner_trainable_[owner] = param.trainable;
      use_positions_[owner].push_back(position_[n]);
    }
  }
  for (auto& [owner, positions] : use_positions_) std::sort(positions.rbegin(), positions.rend());
}

// Shared weights: every use but the first in backward materialises its partial
// gradient, in the gradient's dtype (fp32 for fp32 weights under autocast: the cast
// back is part of the use's backward), before autograd adds it into the input
// buffer (torch/csrc/autograd/input_buffer.cpp accumulate), in place when
// can_accumulate_inplace holds for the buffer. The buffer first holds the first
// use's gradient: a linear's weight gradient in the weight's own dtype is a
// transposed view (TBackward0 of mm), which it refuses, so the second use holds
// its partial and the new sum beside it; behind autocast's cast (fp32 weights) the
// buffer holds the cast's fresh tensor and every addition goes in place. Later
// additions go in place, one partial each. (Profiled on the CPU: aten::add, then
// add_, without autocast; add_ only under it. docs/stacks.md, "Shared weights' gradients".)
// TRL's fused LM head hands on a fresh weight gradient too (grad_weight.to(dtype),
// trl/kernels/chunked_logprob.py), and so does Liger's fused linear cross-entropy (the
// grad_weight it made in forward and saved, released with the node's saved variables
// before autograd adds the embedding's partial): the tied embedding's partial adds in place.
int64_t BackwardGradients::partial_gradients(int n) const {
  int64_t bytes = 0;
  const graph::Node& node = graph_.nodes[n];
  for (const graph::Param& param : node.params) {
    const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
    const std::vector<int>& positions = use_positions_.at(owner);
    const auto trainable = owner_trainable_.find(owner);
    if (trainable == owner_trainable_.end() || !trainable->second) continue;
    const int64_t partial = account(param.elements() * grad_width_, accounting_);
    const bool first = positions.front() == position_[n];
    if (node.weight_uses > 1) {
      bytes += own_partials(first) * partial;
      continue;
    }
    if (positions.size() < 2 || first) continue;
    const graph::Node& first_use = graph_.nodes[analysis_.order[positions.front()]];
    // A first use whose own partials were summed already leaves a fresh tensor in the buffer.
    const bool first_sum_out_of_place = grad_width_ == graph::dtype_bytes(compute_, 1) &&
                                        first_use.op != kTrlFusedLogprobOp && first_use.op != graph::op::kFusedLinearCe &&
                                        first_use.weight_uses < 2;
    const int64_t copies = positions[1] == position_[n] && first_sum_out_of_place ? 2 : 1;
    bytes += copies * partial;
  }
  return bytes;
}

// A node applying its weight `weight_uses` times in one forward (torchtune's eager chunked
// output, TransformerDecoder.chunked_output in torchtune/modules/transformer.py 0.6.1):
// each use's backward hands autograd's input buffer one partial. As the weight's first
// use in backward, its first partial is the gradient (priced as such) and a transposed
// view the second sums out of place: that partial and the sum beside it, two transients
// (the oracle: two `mm` and an `add` of the weight's size live); later partials add in
// place, one at a time. As a later use, every partial adds in place: one.
int64_t BackwardGradients::own_partials(bool first_use) const {
  const bool out_of_place = grad_width_ == graph::dtype_bytes(compute_, 1);
  return first_use && out_of_place ? 2 : 1;
}

// A weight applied once per chunk (torchtune's eager chunked output: one autograd mm
// per chunk of the hidden states, TransformerDecoder.chunked_output in
// torchtune/modules/transformer.py 0.6.1) runs its backward chunk by chunk, and the
// engine frees each chunk's logits gradient as that mm's backward returns (torch 2.11
// torch/csrc/autograd/engine.cpp evaluate_function moves the input buffer into
// call_function), before adding its weight partial into the buffer. The head's peak
// is at the partials own_partials counts: by then that many of the `chunks` logits
// gradients are gone, and of the hidden states' gradient two chunks' pieces are made
// (h.chunk's backward cats them once all have come). The bytes of `out_grads` (the
// logits' gradient) and `in_grads` (the hidden states') not alive there.
int64_t BackwardGradients::chunk_gradients_gone(int n, int64_t out_grads, int64_t in_grads) const {
  const graph::Node& node = graph_.nodes[n];
  const int chunks = node.weight_uses;
  if (chunks < 2) return 0;
  for (const graph::Param& param : node.params) {
    const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
    const auto trainable = owner_trainable_.find(owner);
    if (trainable == owner_trainable_.end() || !trainable->second) continue;
    const int64_t done = own_partials(use_positions_.at(owner).front() == position_[n]);
    return out_grads * done / chunks + in_grads * (chunks - 2) / chunks;
  }
  return 0;
}

// A mul that promoted a narrower input (a 16-bit tensor times an fp32 one: T5's
// gelu_new products under autocast, pow being on its fp32 list) computes that
// input's gradient in the promoted dtype (tools/autograd/derivatives.yaml, mul.Tensor:
// mul_tensor_backward, grad * other), and the engine casts it to the input's dtype
// in validate_outputs (torch/csrc/autograd/engine.cpp, torch 2.11), inside
// call_function, while the node's incoming gradient, its other gradient and its saved
// tensors (released after call_function) are alive. Besides the cast (the input's
// gradient, priced), the promoted gradient: its bytes here.
int64_t BackwardGradients::promoted_gradient(int n, int t) const {
  const graph::Node& node = graph_.nodes[n];
  if (node.op != graph::op::kMul || analysis_.node_outputs[n].empty()) return 0;
  const graph::Tensor& out = graph_.tensors[analysis_.node_outputs[n].front()];
  const graph::Tensor& in = graph_.tensors[t];
  const int64_t out_width = graph::dtype_bytes(out.dtype.value_or(compute_), 1);
  if (out_width <= graph::dtype_bytes(in.dtype.value_or(compute_), 1)) return 0;
  return account(graph::dtype_bytes(out.dtype.value_or(compute_), in.elements.at(batch_, seq_)), accounting_);
}

// The casts among at_node(n)'s bytes: each promoted input's gradient in its own dtype
// (promoted_gradient), which the engine makes after the node's backward has returned.
int64_t BackwardGradients::promoted_casts(int n) const {
  int64_t bytes = 0;
  for (int t : analysis_.node_inputs[n]) {
    if (!analysis_.requires_grad[t] || analysis_.persistent[t]) continue;
    if (promoted_gradient(n, t) > 0) bytes += tensor_bytes_[t];
  }
  return bytes;
}

// torchvision's Bottleneck ends `out += identity; out = self.relu(out)` (torchvision
// models/resnet.py, relu in place), one node with its last batch norm here
// (models::kBatchNormAddReluOp). Its backward is three autograd nodes: ReluBackward
// takes the block's out_grad and returns a fresh gradient (threshold_backward), the
// add hands that one on to the identity and to the batch norm, and the out_grad goes
// when ReluBackward returns (torch 2.11 torch/csrc/autograd/engine.cpp
// evaluate_function: the input buffer is moved into call_function). The batch norm's
// input gradient is made beside the identity's, not beside the out_grad too: the
// bytes of the out_grad (priced in the block's base) this node frees before its peak.
int64_t BackwardGradients::out_grad_freed_inside(int n) const {
  if (graph_.nodes[static_cast<size_t>(n)].op != models::kBatchNormAddReluOp) return 0;
  int64_t bytes = 0;
  for (int t : analysis_.node_outputs[static_cast<size_t>(n)]) {
    if (arriving_[t] && analysis_.requires_grad[t] && !analysis_.persistent[t]) bytes += tensor_bytes_[t];
  }
  return bytes;
}

// The gradients of node n's outputs that its backward receives and no later block
// prices (at_node's out_grads).
int64_t BackwardGradients::incoming_gradients(int n) const {
  if (graph_.nodes[static_cast<size_t>(n)].op == kTrlFusedLogprobOp) return 0;
  int64_t bytes = 0;
  for (int t : analysis_.node_outputs[static_cast<size_t>(n)]) {
    const bool priced_as_out_grad = (arriving_[t] && !analysis_.persistent[t]) || gradient_is_out_grad(t);
    if (analysis_.requires_grad[t] && !analysis_.consumers[t].empty() && !priced_as_out_grad) {
      bytes += tensor_bytes_[t];
    }
  }
  return bytes;
}

int64_t BackwardGradients::at_node(int n) const {
  const graph::Node& node = graph_.nodes[n];
  int64_t grads = account(graph::dtype_bytes(compute_, node.backward_workspace().at(batch_, seq_)), accounting_);
  // An output nobody reads (the loss) gets only the scalar seed gradient. An output a
  // later block reads has one gradient, the input buffer autograd sums its consumers'
  // into (torch/csrc/autograd/input_buffer.cpp): the block's out_grad, already priced.
  // TRL's fused head: its output here is what it saves (the compact hidden copy and two
  // fp32 a token); the gradient its backward receives is grad_logprobs and grad_entropy,
  // one fp32 a token each (trl/kernels/chunked_logprob.py ChunkedLogProbFunction.backward,
  // TRL 1.16.0): not the copy's bytes, and under 0.1% of them, left out.
  const int64_t out_grads = incoming_gradients(n);
  int64_t in_grads = 0;
  // Liger's gated product writes its input gradients into the tensors it kept (liger_kernels.h).
  const bool grads_in_saved = node.op == kLigerGatedMulOp;
  for (int t : analysis_.node_inputs[n]) {
    if (analysis_.requires_grad[t] && !analysis_.persistent[t] && !grads_in_saved) {
      in_grads += tensor_bytes_[t] + promoted_gradient(n, t);
    }
  }
  grads += out_grads + in_grads - chunk_gradients_gone(n, out_grads, in_grads);
  grads -= out_grad_freed_inside(n);
  // A Python RMSNorm's chain peaks with neither its output's gradient nor its input's alive.
  grads = std::max(grads, python_norm_backward_bytes(graph_, analysis_, n, batch_, seq_, accounting_));
  return grads + partial_gradients(n);
}

// Whether tensor t's gradient is the block's out_grad itself: its only reader is an
// add whose output's gradient arrives from a later block (passes_out_grad), which
// AddBackward0 hands on as is (torch 2.11 tools/autograd/derivatives.yaml, add.Tensor).
// A pre-norm block's last linear (ViTOutput.dense, then `+ input_tensor`, transformers
// 5.23.0 modeling_vit.py) runs backward on that gradient, priced in the block's base.
bool BackwardGradients::gradient_is_out_grad(int t) const {
  const std::vector<int>& consumers = analysis_.consumers[static_cast<size_t>(t)];
  if (consumers.size() != 1 || !passes_out_grad(consumers.front())) return false;
  // A 16-bit input of an add promoted to fp32 (AMP's fp32 residual stream) gets a cast
  // of it, a tensor of its own (promoted_gradient).
  const std::vector<int>& outputs = analysis_.node_outputs[static_cast<size_t>(consumers.front())];
  const auto dtype = [&](int x) { return graph_.tensors[static_cast<size_t>(x)].dtype.value_or(compute_); };
  return std::all_of(outputs.begin(), outputs.end(), [&](int out) { return dtype(out) == dtype(t); });
}

// The out_grad bytes gone once node n, a block's last, has run backward: a post-norm
// block's LayerNorm takes the block's out_grad and returns a fresh gradient, and the
// engine moves the input buffer into call_function (torch 2.11
// torch/csrc/autograd/engine.cpp, evaluate_function), so the nodes before it run without
// it (BERT's layer: BertOutput.LayerNorm(hidden_states + input_tensor), transformers 5.23.0).
// A block ending in dropout does the same: native_dropout's backward is
// native_dropout_backward(grad, mask, scale), a fresh tensor (torch 2.11
// tools/autograd/derivatives.yaml, native_dropout), so the out_grad goes as it returns
// (BertEmbeddings.forward ends `self.dropout(embeddings)`, modeling_bert.py 5.23.0: the
// oracle frees layer 0's fp32 [B, S, H] gradient there, before the embeddings' LayerNorm
// backward, and holds only the bf16 [B, S, H] one at the word embedding's backward).
int64_t BackwardGradients::out_grad_used_up(int n) const {
  const std::string_view op = graph_.nodes[static_cast<size_t>(n)].op;
  if (op != graph::op::kNorm && op != graph::op::kDropout) return 0;
  int64_t bytes = 0;
  for (int t : analysis_.node_outputs[static_cast<size_t>(n)]) {
    if (arriving_[t] && analysis_.requires_grad[t] && !analysis_.persistent[t]) bytes += tensor_bytes_[t];
  }
  return bytes;
}

// The block's saved bytes released before the backward of each of its nodes (by
// index in block.nodes): autograd releases a node's saved variables once the node
// has run (torch/csrc/autograd/engine.cpp, call_function: fn.release_variables()
// when the graph is not retained), so a saved tensor goes once the backward of the
// earliest node of the block saving it has run. Backward runs the nodes in reverse.
std::vector<int64_t> BackwardGradients::released_before(const graph::BlockStructure& block,
                                                        const std::vector<int>* shared) const {
  const std::vector<int64_t> released_after = released_by(block, shared);
  std::vector<int64_t> released(block.nodes.size(), 0);
  int64_t sum = 0;
  for (size_t i = block.nodes.size(); i-- > 0;) {
    sum += i + 1 < released_after.size() ? released_after[i + 1] : 0;
    released[i] = sum;
  }
  return released;
}

// The block's saved bytes each of its nodes (by index in block.nodes) releases as its
// backward has run: those it is the earliest node to save. `shared`: tensors that
// are another's bytes again (a reentrant recompute's cached casts), none of their own.
std::vector<int64_t> BackwardGradients::released_by(const graph::BlockStructure& block,
                                                    const std::vector<int>* shared) const {
  // One pass over the block's nodes in order, each saved tensor placed at its earliest
  // saver: a 4.x MoE block has thousands of nodes and saved tensors (issue 38).
  std::unordered_set<int> unplaced(block.saved_tensors.begin(), block.saved_tensors.end());
  if (shared != nullptr) {
    for (int t : *shared) unplaced.erase(t);
  }
  std::vector<int64_t> released_after(block.nodes.size(), 0);
  for (size_t i = 0; i < block.nodes.size() && !unplaced.empty(); ++i) {
    for (int t : analysis_.node_saves[static_cast<size_t>(block.nodes[i])]) {
      if (unplaced.erase(t) > 0) released_after[i] += tensor_bytes_[static_cast<size_t>(t)];
    }
  }
  return released_after;
}

// Whether node n is an add whose output's gradient arrives from a later block (the
// block profile's out_grad, priced through the block's whole backward): the gradient
// the add passes on is that one (AddBackward0 hands `grad` on as is: torch 2.11
// tools/autograd/derivatives.yaml, add.Tensor's self and other at alpha 1), already counted.
// A post-norm block's add (BERT: dense, dropout, add, LayerNorm) passes on the
// LayerNorm backward's fresh output instead: it waits as the residual's gradient
// until the branch's backward reaches the residual's producer.
bool BackwardGradients::passes_out_grad(int n) const {
  if (graph_.nodes[static_cast<size_t>(n)].op != graph::op::kAdd) return false;
  const std::vector<int>& outputs = analysis_.node_outputs[static_cast<size_t>(n)];
  return std::any_of(outputs.begin(), outputs.end(), [&](int t) { return arriving_[t] || analysis_.persistent[t]; });
}

// Gradients waiting inside the block at each of its nodes' backward (by index in
// block.nodes): a tensor of the block whose consumers there have all run backward
// and whose producer has not holds its gradient meanwhile, beside the node in flight
// (a chunked head: every chunk's loss runs backward before the first chunk's linear,
// in autograd's sequence-number order). A gradient an add passes on is the add's own
// output gradient (AddBackward returns it as is): where that is the block's out_grad
// (passes_out_grad), counted there.
std::vector<int64_t> BackwardGradients::waiting_gradients(const graph::BlockStructure& block) const {
  std::vector<int> index(graph_.nodes.size(), -1);
  for (size_t i = 0; i < block.nodes.size(); ++i) index[static_cast<size_t>(block.nodes[i])] = static_cast<int>(i);
  std::vector<int64_t> waiting(block.nodes.size(), 0);
  for (size_t i = 0; i < block.nodes.size(); ++i) {
    for (int t : analysis_.node_outputs[static_cast<size_t>(block.nodes[i])]) {
      const std::vector<int>& consumers = analysis_.consumers[static_cast<size_t>(t)];
      if (!analysis_.requires_grad[t] || analysis_.persistent[t] || consumers.empty()) continue;
      int last = -1;
      bool inside = true;
      for (int c : consumers) {
        inside = inside && index[static_cast<size_t>(c)] >= 0;
        last = std::max(last, index[static_cast<size_t>(c)]);
      }
      if (!inside || passes_out_grad(block.nodes[static_cast<size_t>(last)])) continue;
      for (int j = static_cast<int>(i) + 1; j < last; ++j) {
        const std::vector<int>& reads = analysis_.node_inputs[static_cast<size_t>(block.nodes[static_cast<size_t>(j)])];
        if (std::find(reads.begin(), reads.end(), t) == reads.end()) waiting[static_cast<size_t>(j)] += tensor_bytes_[t];
      }
    }
  }
  return waiting;
}

// The gradient bytes of node n's own parameters, made by its backward: a trainable
// weight used once, and a shared one at its first use in backward, where its sum
// starts (ModelStates::block_grads counts it in that block).
int64_t BackwardGradients::own_gradients(int n) const {
  int64_t bytes = 0;
  for (const graph::Param* param : own_gradient_params(n)) bytes += account(param->elements() * grad_width_, accounting_);
  return bytes;
}

std::vector<const graph::Param*> BackwardGradients::own_gradient_params(int n) const {
  const graph::Node& node = graph_.nodes[n];
  std::vector<const graph::Param*> params;
  if (node.op == graph::op::kUnused || !analysis_.needs_param_grad[n]) return params;
  for (const graph::Param& param : node.params) {
    const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
    const auto trainable = owner_trainable_.find(owner);
    if (trainable == owner_trainable_.end() || !trainable->second) continue;
    if (use_positions_.at(owner).front() != position_[n]) continue;
    params.push_back(&param);
  }
  return params;
}

// Under autocast over fp32 weights, an op on its lower-precision list (a linear) runs on
// its weight's 16-bit cast (autocast_mode.cpp cached_cast), so its backward makes the
// 16-bit gradient of that cast, and the cast's own node, ToCopyBackward, makes the fp32
// gradient from it (torch 2.11 tools/autograd/derivatives.yaml, _to_copy: grad.to(the
// input's options)), which AccumulateGrad takes as `.grad`. The bytes of node n's own
// gradients made so, in the 16-bit dtype; 0 where the gradient is made in its own dtype.
int64_t BackwardGradients::cast_own_gradients(int n) const {
  const int64_t compute_width = graph::dtype_bytes(compute_, 1);
  if (grad_width_ <= compute_width || !graph::op_traits(graph_.nodes[n].op).autocast_to_16_bit) return 0;
  int64_t bytes = 0;
  for (const graph::Param* param : own_gradient_params(n)) {
    if (!graph::is_quantized_storage(param->dtype)) bytes += account(param->elements() * compute_width, accounting_);
  }
  return bytes;
}

// Node n's backward points (GradPoint) at `grads` in flight, `released` saved bytes
// released before it, `freed` those it releases itself, `made` own gradients stored
// before it and `own` made by it. Where its own are made through autocast's casts
// (cast_own_gradients) there are two moments: its backward, with the 16-bit weight
// gradients in flight and no `.grad` of its own yet; and the casts' ToCopyBackward,
// after the engine has released the node's saved tensors and dropped the gradient it
// received as its call_function returned (torch 2.11 torch/csrc/autograd/engine.cpp,
// evaluate_function: fn.release_variables()), each 16-bit gradient beside its fp32 copy.
// The cast ran after the producer of the op's input in forward, so its node, of the
// higher sequence number, runs before that producer's backward (engine.h
// CompareNodeTaskTime). The oracle's ViT-B/16 full bf16-amp peak: the output dense's
// bf16 weight gradient in flight, no fp32 `.grad` of it (docs/memory-model.md).
void BackwardGradients::add_grad_points(std::vector<GradPoint>& points, int n, int64_t grads, int64_t released,
                                        int64_t freed, int64_t made, int64_t own) const {
  const int64_t cast = own > 0 ? cast_own_gradients(n) : 0;
  if (cast == 0) {
    points.push_back({grads, released, made, made + own});
    return;
  }
  points.push_back({grads + cast, released, made, made});
  points.push_back({grads + cast - freed - incoming_gradients(n), released + freed, made, made + own});
}

// Drops the points a later one outgrows: it holds at least the same own gradients, so
// more bytes in flight make it the larger whatever those gradients weigh. A later point
// with as many bytes does not drop an earlier one: the peak is the first moment the
// most is live, which a later tie does not move (the oracle takes a peak only where live
// bytes exceed it, bench/oracle/meta_recorder.py note_peak), and the walk keeps the first
// of equal points. ViT's layer 0 under a reentrant checkpoint peaks so at its output
// dense's backward, before GELU's backward has released the saved GELU output.
static void keep_outgrowing(std::vector<GradPoint>& points) {
  std::vector<GradPoint> kept;
  int64_t later = kEmptyStage;
  for (size_t i = points.size(); i-- > 0;) {
    if (points[i].bytes < later) continue;
    later = points[i].bytes;
    kept.push_back(points[i]);
  }
  points.assign(kept.rbegin(), kept.rend());
}

BackwardStages BackwardGradients::of_block(const graph::BlockStructure& block, bool unpacked) const {
  return stages_of(block, unpacked, nullptr);
}

BackwardStages BackwardGradients::of_reentrant_block(const graph::BlockStructure& block,
                                                     const std::vector<int>& shared) const {
  return stages_of(block, false, &shared);
}

// of_block, and with `shared` of_reentrant_block.
BackwardStages BackwardGradients::stages_of(const graph::BlockStructure& block, bool unpacked,
                                            const std::vector<int>* shared) const {
  BackwardStages stages;
  const std::vector<int64_t> released = released_before(block, shared);
  const std::vector<int64_t> freed_by = released_by(block, shared);
  const std::vector<int64_t> freed = unpacked ? freed_by : std::vector<int64_t>(block.nodes.size(), 0);
  const std::vector<int64_t> waiting = waiting_gradients(block);
  int wrapped = 0;  // wrapped GEMMs whose backward has not run yet
  for (int n : block.nodes) wrapped += analysis_.needs_param_grad[n] && lora_factors_viewed_early(graph_.nodes[n]);
  bool hooked = false;  // a parameter's AccumulateGrad (and its hooks) has run
  int64_t made = 0;     // own gradients stored (GradPoint::made_before)
  int64_t viewed = 0;   // own gradients of wrapped GEMMs, stored once the last has run
  int64_t out_grad_gone = 0;  // the out_grad a post-norm block's LayerNorm has used up
  for (size_t i = block.nodes.size(); i-- > 0;) {
    const int n = block.nodes[i];
    if (!analysis_.needs_input_grad[n] && !analysis_.needs_param_grad[n]) continue;
    // Unpacked, the larger of the node's backward (no cast yet) and its cast (without the
    // saved tensors it freed): at_node less the smaller of the two.
    const int64_t grads = at_node(n) - released[i] + waiting[i] -
                          (unpacked ? std::min(promoted_casts(n), freed[i]) : 0) - out_grad_gone;
    const int64_t own = own_gradients(n);
    const bool early = lora_factors_viewed_early(graph_.nodes[n]);
    add_grad_points(stages.grad_points, n, grads, released[i], freed_by[i], made, early ? 0 : own);
    stages.own_grads += own;
    (early ? viewed : made) += own;
    const bool after_first = !stages.from_param_grads.empty();
    const bool from = after_first || analysis_.needs_param_grad[n];
    (from ? stages.from_param_grads : stages.before_param_grads).consider(grads, released[i]);
    (hooked ? stages.after_first_param_grads : stages.through_first_param_grads).consider(grads, released[i]);
    if (analysis_.needs_param_grad[n]) {
      wrapped -= early;
      hooked = hooked || !early || wrapped == 0;
      if (wrapped == 0) made += std::exchange(viewed, 0);
    }
    const bool from_params = !stages.from_params.empty() || !graph_.nodes[n].params.empty();
    (from_params ? stages.from_params : stages.before_params).consider(grads, released[i]);
    if (i + 1 == block.nodes.size() && shared == nullptr) out_grad_gone = out_grad_used_up(n);
  }
  keep_outgrowing(stages.grad_points);
  return stages;
}

}  // namespace headroom::planner
