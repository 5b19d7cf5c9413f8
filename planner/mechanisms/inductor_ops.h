// How torch.compile's two graph passes see one of headroom's ops: the min-cut
// partitioner (what it may recompute) and Inductor's scheduler (what it may fuse
// into one kernel). Both use the same line: pointwise ops, casts, views and the
// reductions sum/mean/var_mean are fusible and recomputable; native_dropout is
// fusible but random, so never recomputed; mm, addmm, SDPA, convolution,
// embedding and cat are neither (torch/_functorch/partitioners.py
// get_default_op_list with ban_recompute_not_in_allowlist, torch 2.11; Inductor
// lowers the same set to extern kernels or fallbacks). docs/stacks.md,
// "torch.compile".
#pragma once

#include <string>

namespace headroom::planner {

enum class OpClass {
  kRecomputable,  // pointwise ops, casts, views and the reductions sum/mean/var_mean
  kRandom,        // native_dropout: fusible, never recomputed
  kBanned,        // mm, addmm, SDPA, convolution, embedding, cat: outside the allowlist
};

OpClass classify_op(const std::string& op);

inline bool fusible(OpClass c) { return c != OpClass::kBanned; }

}  // namespace headroom::planner
