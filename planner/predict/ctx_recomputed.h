// The ctx tensors a non-reentrant checkpoint's recompute makes a second time.
// An autograd Function that keeps a tensor on ctx outside save_for_backward
// (ModelContext::ctx_held; bitsandbytes up to 0.43.1: MatMul4Bit's ctx.tensors,
// autograd/_functions.py) keeps it with its node, which no saved-tensor hook sees. A
// non-reentrant checkpoint's recompute runs the block's nodes again: the tensors the
// block itself made are new storages, kept on the new nodes' ctx beside the first
// forward's, both live while the recompute and the block's backward run. Its inputs
// (made by earlier blocks) and the leaves a graph holds are the same tensors.
// The step walk (StepModel::ctx_recomputed) and the simulator take them from here.
#pragma once

#include <cstddef>
#include <vector>

#include "planner/predict/model_context.h"

namespace headroom::planner {

// Of ModelContext::ctx_held[block], the tensors block `block`'s own nodes make (no leaf,
// no parameter): what its non-reentrant recompute holds a second copy of.
std::vector<int> ctx_recomputed_tensors(const ModelContext& context, size_t block);

}  // namespace headroom::planner
