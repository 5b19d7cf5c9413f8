// DeepSpeed ZeRO-1/2's gradients in the step walk as DeepSpeed 0.19.8 makes them
// (docs/stacks.md, "DeepSpeed's ZeRO buffers"): the reduce buckets from the first
// gradient hook to the end of backward, ZeRO-2's gradient partition from the first
// reduction, a tied weight's partial gradient until its last use's backward, and a
// gradient larger than the bucket, reduced on its own (extra_large_param_to_reduce);
// under ZeRO-3, a gradient larger than the bucket, held outside it until the next hook.
#pragma once

#include <map>
#include <string>

#include "graph/layer_graph.h"
#include "planner/memory/model_states.h"
#include "planner/predict/model_context.h"
#include "planner/predict/step_model.h"

namespace headroom::planner {

// The blocks whose nodes use a weight, lowest and highest. Autograd sums a weight's
// gradient at the use backward reaches last, its lowest block; a weight used by more
// than one block (tied embeddings) holds a partial gradient in between.
struct OwnerBlocks {
  int lowest = 0;
  int highest = 0;
};

// Per weight, under its owner's name (a tied weight's is the name it is tied to).
std::map<std::string, OwnerBlocks> blocks_by_owner(const graph::LayerGraph& graph);

// Whether DeepSpeed's ZeRO-3 gradient hooks (stage3.py) decide when the run's gradients
// exist: ZeRO-3 through DeepSpeed's engine, the optimizer not stepped in backward.
bool deepspeed_zero3_hooks(const RunSettings& settings, const GlobalConfig& config, const ModelStates& states);

// Whether DeepSpeed ZeRO-2's hooks make the run's gradients (the walk's delayed partition,
// tied partials and oversized gradients): on the GPU, one micro-step per optimizer step.
bool deepspeed_zero2_hooks(const RunSettings& settings, const GlobalConfig& config, const ModelStates& states);

// The block whose backward makes ZeRO-2's gradient partition (copy_grads_in_partition at the
// first reduction, once the gradients made from the last block down outgrow the bucket),
// -1 where none does and the partition is made at the end of backward.
int deepspeed_partition_block(const RunSettings& settings, const ModelStates& states);

// Adds them to model.grads_bwd / grads_bwd_before / grads_fwd, set by the step builder.
void apply_deepspeed_gradients(const ModelContext& context, const RunSettings& settings,
                               const GlobalConfig& config, const ModelStates& states,
                               Accounting accounting, StepModel& model);

}  // namespace headroom::planner
