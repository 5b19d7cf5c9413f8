// The gradients in flight while a block's nodes run backward, in reverse order:
// of each node's outputs and inputs, its backward scratch, and the partial
// gradients of shared weights (tied embeddings, a chunked head). Bytes as the
// block profile accounts them (docs/memory-model.md, "Per-block terms").
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"
#include "planner/memory/state_bytes.h"

namespace headroom::planner {

// A stage without nodes.
constexpr int64_t kEmptyStage = std::numeric_limits<int64_t>::min();

// The largest, over a stage's nodes, of the gradients in flight less the block's
// saved bytes already released (BackwardGradients::released_before): negative where
// more was released than is in flight; `released` is that node's released bytes,
// so the block's saved tensors still held there are its saved bytes less it.
struct BackwardStage {
  int64_t bytes = kEmptyStage;  // kEmptyStage when the stage has no nodes
  int64_t released = 0;
  bool empty() const { return bytes == kEmptyStage; }
  void consider(int64_t at_node, int64_t released_there);
};

// One node's backward in a block that makes its own parameters' gradients node by
// node: the gradients in flight there and the block's saved bytes released by then
// (as BackwardStage), and the bytes of the block's own parameter gradients stored
// before it runs (made_before) and once its own backward has made its weights' too
// (made_through). autograd runs a parameter's AccumulateGrad as soon as its input is
// ready, before any other node (torch 2.11 torch/csrc/autograd/function.h, NOTE
// [ Sequence Number]: AccumulateGrad's sequence_nr is UINT64_MAX; engine.h
// CompareNodeTaskTime), and it steals the fresh gradient as `.grad`
// (functions/accumulate_grad.h): a Linear's weight gradient exists from that Linear's
// backward on, its storage the `.grad` to be.
struct GradPoint {
  int64_t bytes = 0;
  int64_t released = 0;
  int64_t made_before = 0;
  int64_t made_through = 0;
};

// A block's backward in two stages: the nodes that run before its first node with
// a parameter gradient (a head's loss before lm_head) and that node with the rest.
struct BackwardStages {
  BackwardStage before_param_grads;
  BackwardStage from_param_grads;
  // The same split where the first parameter's AccumulateGrad (and its hooks) has run:
  // through the first node with a parameter gradient, whose backward makes it, or
  // through the block's last ParamWrapper GEMM (factors_viewed_early), and after it.
  BackwardStage through_first_param_grads;
  BackwardStage after_first_param_grads;
  // The same split at the first node with any parameter, trained or frozen: where an
  // FSDP unit's pre-backward hook fires (a frozen lm_head after the loss).
  BackwardStage before_params;
  BackwardStage from_params;
  BackwardStage largest() const;  // over both, {0, 0} when the block runs no backward
  // Node by node in backward order, only those no later node outgrows (a later one
  // holds as many own gradients or more); own_grads: every own gradient's bytes.
  std::vector<GradPoint> grad_points;
  int64_t own_grads = 0;
};

// Per tensor, whether some consumer lies in a later block than its producer: the
// gradients BackwardGradients takes as `arriving` (the block profile's out_grad).
std::vector<bool> read_by_later_block(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis);

class BackwardGradients {
 public:
  // `tensor_bytes`: accounted bytes per graph tensor; `grad_width`: bytes of a
  // gradient element (fp32 for fp32 weights under autocast), 0 for the compute dtype's;
  // `arriving`: per tensor, whether its gradient arrives from a later block (the block
  // profile's out_grad, priced there through the whole backward of the block).
  BackwardGradients(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                    const std::vector<int64_t>& tensor_bytes, const std::vector<bool>& arriving,
                    graph::DType compute, int64_t batch, int64_t seq, Accounting accounting, int64_t grad_width);

  // Gradients in flight at node n's backward.
  int64_t at_node(int n) const;
  // `unpacked`: the block's backward in a non-reentrant checkpoint's recompute, whose
  // unpack hook hands each saved tensor over once (torch 2.11 utils/checkpoint.py,
  // _checkpoint_hook.unpack_hook: holder.handles[gid] = None drops the frame's
  // reference), so a node's saved tensors no other node keeps die as its backward
  // returns, before the engine casts a promoted gradient (validate_outputs): the cast
  // then has those bytes back (promoted_casts).
  BackwardStages of_block(const graph::BlockStructure& block, bool unpacked = false) const;
  // The block's backward inside a reentrant checkpoint (CheckpointFunction.backward, torch
  // 2.11 torch/utils/checkpoint.py): `shared` are the later casts of one input, which
  // autocast's cache makes one tensor in its recompute (reentrant_cast_cache), saved once
  // and released with it; and the gradients the Function was handed (`args`) stay bound
  // while torch.autograd.backward runs over the block, so no LayerNorm uses up a
  // post-norm block's out_grad (out_grad_used_up).
  BackwardStages of_reentrant_block(const graph::BlockStructure& block, const std::vector<int>& shared) const;
  // The partial gradients of shared or repeatedly applied weights in flight at node n's
  // backward (among at_node's bytes): the step simulator allocates the same.
  int64_t partial_gradients(int n) const;
  // The gradient of node n's input t in the wider dtype a mul promoted it to (T5's gated
  // product, fp32 times bf16), beside the cast to t's own dtype the engine makes of it
  // after the node's backward has returned; 0 where t was not promoted. The step
  // simulator allocates the same.
  int64_t promoted_gradient(int n, int t) const;
  // Whether tensor t's gradient is its block's out_grad itself, handed on as is by the add
  // that reads it (a pre-norm block's residual); the step simulator makes none for it there.
  bool gradient_is_out_grad(int t) const;

 private:
  int64_t own_partials(bool first_use) const;
  int64_t chunk_gradients_gone(int n, int64_t out_grads, int64_t in_grads) const;
  int64_t own_gradients(int n) const;
  std::vector<const graph::Param*> own_gradient_params(int n) const;
  int64_t cast_own_gradients(int n) const;
  int64_t incoming_gradients(int n) const;
  void add_grad_points(std::vector<GradPoint>& points, int n, int64_t grads, int64_t released, int64_t freed,
                       int64_t made, int64_t own) const;
  int64_t promoted_casts(int n) const;
  BackwardStages stages_of(const graph::BlockStructure& block, bool unpacked, const std::vector<int>* shared) const;
  std::vector<int64_t> released_by(const graph::BlockStructure& block, const std::vector<int>* shared = nullptr) const;
  std::vector<int64_t> released_before(const graph::BlockStructure& block,
                                       const std::vector<int>* shared = nullptr) const;
  std::vector<int64_t> waiting_gradients(const graph::BlockStructure& block) const;
  bool passes_out_grad(int n) const;
  int64_t out_grad_used_up(int n) const;
  int64_t out_grad_freed_inside(int n) const;

  const graph::LayerGraph& graph_;
  const graph::GraphAnalysis& analysis_;
  const std::vector<int64_t>& tensor_bytes_;
  const std::vector<bool>& arriving_;
  graph::DType compute_;
  int64_t batch_;
  int64_t seq_;
  Accounting accounting_;
  int64_t grad_width_;
  std::vector<int> position_;                             // node -> execution position
  // Keyed by views of graph_'s names: built for every plan the search prices.
  std::unordered_map<std::string_view, bool> owner_trainable_;
  std::unordered_map<std::string_view, std::vector<int>> use_positions_;  // owner -> its uses' positions, latest first
};

}  // namespace headroom::planner
