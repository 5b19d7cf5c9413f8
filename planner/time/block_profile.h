// Per-block activation memory and compute time at one micro-batch, sequence
// length and compute dtype: the numbers the step walk and the block solver use.
// Memory terms are bytes above what is already stored when the block runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"
#include "planner/mechanisms/fused_kernels.h"
#include "planner/settings/hardware.h"
#include "planner/memory/model_states.h"
#include "planner/time/made_persistent.h"

namespace headroom::planner {

// One node of a block's backward where its own parameters' gradients are counted as
// its nodes make them (BackwardStages::grad_points): bytes above what is stored, as
// bwd_peak counts them but without the block's own gradients; saved as bwd_peak_saved;
// the bytes of own gradients stored before the node and with the node's own made.
struct BackwardPoint {
  int64_t bytes = 0;
  int64_t saved = 0;
  int64_t made_before = 0;
  int64_t made_through = 0;
};

struct BlockProfile {
  int64_t keep = 0;        // saved for backward when the block runs normally
  int64_t checkpoint = 0;  // kept when checkpointed: its boundary inputs (+ selective-op saves)
  // Of `checkpoint`, the boundary inputs that none of the block's own nodes saves (T5's
  // position bias, of which only its contiguous copy is saved; ViT's layer input under
  // autocast): bwd_peak leaves them out, yet the checkpoint holds them through the block's
  // backward (torch 2.11 utils/checkpoint.py: non-reentrant, _NoopSaveInputs saves the
  // inputs and the frame keeps it until the block's last saved tensor is unpacked;
  // reentrant, CheckpointFunction's ctx.save_for_backward). The walk adds them beside a
  // checkpointed block's backward (docs/memory-model.md).
  int64_t checkpoint_unsaved = 0;
  int64_t fwd_peak = 0;    // peak during its forward with autograd (boundary inputs + intermediates + saves)
  int64_t fwd_peak_nograd = 0;  // peak during a checkpointed (no-grad) forward
  int64_t recompute_peak = 0;   // peak during its recompute in backward (fwd_peak, plus what selective AC holds)
  // The same recompute as a reentrant checkpoint runs it, where autocast's cache holds
  // the 16-bit casts of the block's fp32 inputs that require grad (reentrant_cast_cache);
  // StepModel::reentrant_recompute picks it.
  int64_t reentrant_recompute_peak = 0;
  int64_t bwd_peak = 0;    // peak during its backward: saved tensors + gradient transients
  // The peak of its backward before the first of its parameters' gradients exists
  // (the loss's backward in a head block runs before lm_head's weight gradient is
  // made), and from then on; -1 when a node with a parameter gradient is the first
  // to run backward (then bwd_peak is both).
  int64_t bwd_peak_before_param_grads = -1;
  int64_t bwd_peak_from_param_grads = -1;
  // The same split after the first node with a parameter gradient, whose hooks fire
  // once its backward is done (BackwardStages::through_first_param_grads); -1 when
  // that node is the last of the block to run backward.
  int64_t bwd_peak_through_first_param_grads = -1;
  int64_t bwd_peak_after_first_param_grads = -1;
  // The same split at the block's first node with any parameter (BackwardStages::before_params).
  int64_t bwd_peak_before_params = -1;
  int64_t bwd_peak_from_params = -1;
  // Its backward node by node (BackwardPoint), in backward order, and the bytes of
  // all its own parameters' gradients; StepModel::grads_by_node reads them.
  std::vector<BackwardPoint> bwd_points;
  int64_t own_grads = 0;
  int64_t out_grad = 0;    // gradient of its outputs arriving from the next block
  // Its outputs read by later blocks, less those it saves itself: what a reentrant
  // checkpoint's recompute holds through the block's backward (CheckpointFunction.backward
  // keeps `outputs` bound while torch.autograd.backward runs over them; torch 2.11
  // utils/checkpoint.py).
  int64_t outputs = 0;
  // The block's own saved tensors among the bytes of fwd_peak and of each backward
  // peak above (what autograd still holds for its backward there); the rest is in
  // flight. The walk reports them as activations, the rest as transient.
  int64_t fwd_peak_saved = 0;
  int64_t recompute_peak_saved = 0;
  int64_t reentrant_recompute_peak_saved = 0;
  int64_t bwd_peak_saved = 0;
  int64_t bwd_saved_before_param_grads = 0;
  int64_t bwd_saved_from_param_grads = 0;
  int64_t bwd_saved_through_first_param_grads = 0;
  int64_t bwd_saved_after_first_param_grads = 0;
  int64_t bwd_saved_before_params = 0;
  int64_t bwd_saved_from_params = 0;
  // Autocast's cached 16-bit casts of its trainable fp32 weights (autocast_cached_casts):
  // checkpointed, nothing saves them, and the cache holds them to the forward's end.
  int64_t cast_cache = 0;
  // What a forward frame holds to the forward's end that nothing saves
  // (GraphAnalysis::held_in_forward), counted from the block after this one, the last
  // to read it: forward only, whatever the choice. A tensor read far ahead adds its
  // bytes at its own block and takes them off at its last reader's (a span; negative there).
  int64_t forward_frame = 0;
  // The backward fields above (bwd_peak, its splits and bwd_points) as a non-reentrant
  // checkpoint's recompute runs the block, whose nodes free their saved tensors as
  // they unpack them (BackwardGradients::of_block, `unpacked`); null where they are the same.
  std::shared_ptr<const BlockProfile> unpacked_backward;
  // The same fields (and `keep`) as a reentrant checkpoint runs the block's backward
  // (BackwardGradients::of_reentrant_block): autocast's cached cast saved once, a
  // post-norm block's out_grad held throughout; null where they are the same.
  std::shared_ptr<const BlockProfile> reentrant_backward;
  bool on_autograd = false;
  bool checkpointable = true;
  double fwd_ms = 0;
  double bwd_ms = 0;
  double recompute_ms = 0;  // the forward again in backward, less the ops selective AC saved
  double model_flops = 0;  // forward + backward FLOPs (for MFU)
};

struct StepProfile {
  std::vector<BlockProfile> blocks;
  int64_t persistent = 0;  // graph inputs and tensors shared by many blocks
  // Of `persistent`, the tensors the model makes, live only part of the step.
  std::vector<MadePersistent> made_persistent;
};

struct TimeModelOptions {
  // Fraction of peak tensor-core rate reached by large GEMMs and of peak memory
  // bandwidth reached by elementwise kernels: defaults until calibrated by the
  // executor (docs/memory-model.md, "Time model").
  double matmul_efficiency = 0.6;
  double bandwidth_efficiency = 0.7;
  // Fraction of the peak that the fused attention kernel (SDPA's flash backend,
  // FlexAttention's before its own slowdown) reaches, per pass; 0: matmul_efficiency.
  // From the GPU's catalogue entry (GpuSpec::attention_*_efficiency).
  double attention_forward_efficiency = 0;
  double attention_backward_efficiency = 0;
  // The kernels torch.compile generates for the compiled blocks; null in eager
  // mode, where every node is its own kernel.
  std::shared_ptr<const FusedKernels> fused;
};

// Roofline time and FLOPs of one node's forward and backward (backward only for
// the gradient parts the node needs). Launch latency included.
struct NodeTimes {
  double fwd_ms = 0;
  double bwd_ms = 0;
  double fwd_flops = 0;
  double bwd_flops = 0;
};
NodeTimes node_times(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int node,
                     graph::DType compute_dtype, int64_t batch, int64_t seq, const GpuSpec& gpu,
                     const TimeModelOptions& options);

// `checkpoint_saves`: per block, tensors a checkpointed block keeps besides its
// inputs (ModelContext::checkpoint_saves; empty: whole-block recompute).
StepProfile profile_step(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                         graph::DType compute_dtype, int64_t batch, int64_t seq,
                         Accounting accounting, const GpuSpec& gpu,
                         const TimeModelOptions& time_options = {},
                         const std::vector<std::vector<int>>& checkpoint_saves = {},
                         int64_t grad_width = 0);  // bytes of a gradient element; 0: the compute dtype's

}  // namespace headroom::planner
