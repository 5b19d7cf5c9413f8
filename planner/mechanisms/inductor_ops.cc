#include "planner/mechanisms/inductor_ops.h"

#include <set>

#include "graph/op_traits.h"

namespace headroom::planner {

OpClass classify_op(const std::string& op) {
  // Our norm nodes are x.float(), pow, mean, rsqrt, mul (and sub for layer_norm):
  // all on the allowlist, as are the copy ops that are clones, selects, casts and
  // scalar arithmetic. rotate_half (slice, neg, cat) and concat use cat, which is
  // not on the list; neither is softmax (eager attention), kept as saved.
  static const std::set<std::string> recomputable = {
      "norm",        "low_precision_norm", "add",        "mul",           "split",     "transpose_contiguous",
      "select_token", "mul_scalar", "axpy",          "add_scalar", "sinusoidal",
      "rope_table",  "cast",       "to_f32"};
  if (op.starts_with("activation:") || recomputable.count(op)) return OpClass::kRecomputable;
  if (op == graph::op::kDropout) return OpClass::kRandom;
  return OpClass::kBanned;
}

}  // namespace headroom::planner
