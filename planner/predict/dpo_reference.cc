#include "planner/predict/dpo_reference.h"

#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

bool has_reference(const StackSpec& spec) {
  const bool uses_one = spec.recipe == Recipe::kDpo || spec.recipe == Recipe::kGrpo;
  return uses_one && spec.reference != Reference::kPrecomputed && spec.reference != Reference::kNone;
}

}  // namespace

int64_t reference_weight_bytes(const ModelContext& context, const RunSettings& settings, Accounting accounting) {
  const StackSpec spec = resolve_stack(settings).top;
  if (!has_reference(spec) || spec.reference != Reference::kCopy) return 0;
  int64_t bytes = 0;
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.tied_to.empty()) bytes += account(param_storage_bytes(param, settings.precision), accounting);
    }
  }
  return bytes;
}

bool dpo_reference_forward(const RunSettings& settings) {
  const StackSpec spec = resolve_stack(settings).top;
  return has_reference(spec) && spec.recipe == Recipe::kDpo;
}

}  // namespace headroom::planner
