// What a block's backward holds of its inputs and of its out_grad:
// - a checkpointed block's inputs that none of its nodes saves are held by the checkpoint
//   through its backward whether or not they require grad (BlockProfile::checkpoint_unsaved;
//   torch 2.11 torch/utils/checkpoint.py: CheckpointFunction's ctx.save_for_backward,
//   _NoopSaveInputs for the non-reentrant one): ViT's layer input under autocast, of which
//   layernorm_before keeps only its fp32 cast;
// - a post-norm block's out_grad goes once its last node, the LayerNorm, has run backward:
//   autograd moves the node's input buffer into call_function and LayerNorm backward returns
//   a fresh gradient (torch 2.11 torch/csrc/autograd/engine.cpp, evaluate_function), so
//   the nodes before it run without it (BackwardGradients::of_block, BERT's layer).
#include <doctest/doctest.h>

#include <string>

#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

TEST_CASE("a checkpointed ViT layer holds its bf16 input, which no node of it saves under autocast") {
  const ModelContext context = prepared_context(hf_vit_b16(TrainMode::kFull));
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32,
                                           context.seq_len, Accounting::kAllocated, context.gpu);
  const BlockProfile& layer = profile.blocks[static_cast<size_t>(block_ending(context.graph, ".layer.11"))];
  CHECK(layer.checkpoint_unsaved == int64_t{32} * 197 * 768 * 2);
}

TEST_CASE("a post-norm BERT layer's nodes before its LayerNorm run backward without the out_grad") {
  const ModelContext context = prepared_context(hf_bert_base(TrainMode::kFull));
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32, 512,
                                           Accounting::kAllocated, context.gpu);
  const BlockProfile& layer = profile.blocks[static_cast<size_t>(block_ending(context.graph, ".layer.11"))];
  const int64_t fp32_hidden = int64_t{32} * 512 * 768 * 4;  // the fp32 LayerNorm output's gradient
  CHECK(layer.out_grad == fp32_hidden);
  // The layer peaks in the LayerNorm's backward: the out_grad beside the LayerNorm's
  // fresh fp32 input gradient and less than a quarter of that besides (113 MB above the
  // saved tensors). Were the out_grad held through the block, a node before the
  // LayerNorm would peak with it, 163 MB above them.
  CHECK(layer.bwd_peak - layer.keep - layer.out_grad < fp32_hidden * 5 / 4);
}

}  // namespace
}  // namespace headroom::planner
