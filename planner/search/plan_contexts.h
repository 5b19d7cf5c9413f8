// The context each candidate plan is priced in: prepare_context of the plan's own
// settings, as `simulate`, `fit`, `report` and `run` prepare it from the plan file.
// The stack's mechanisms depend on what the search changes (the ZeRO stage decides
// whether DeepSpeed's engine runs the forward without autocast and casts the
// adapters; the micro-batch, what compiled blocks keep; the sequence, the document
// mask): one context for the whole search priced a ZeRO-3 plan with the ZeRO-0
// stack's mechanisms and declared 74.2 GiB for a run its own simulation put at
// 92.0 GiB (issue 36).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "planner/predict/model_context.h"
#include "planner/predict/plan.h"

namespace headroom::planner {

// The settings of the plan for `searched` at `config`: the globals applied, no
// block checkpointed or offloaded yet (with_block_choices adds them).
RunSettings plan_settings_for(const RunSettings& searched, const GlobalConfig& config);

// `settings` with exactly the blocks `choices` checkpoints and offloads (graph order).
RunSettings with_block_choices(RunSettings settings, const graph::LayerGraph& graph,
                                     const std::vector<BlockChoice>& choices);

// A context and the step profile at its own micro-batch, for one plan's settings.
struct PricedContext {
  ModelContext context;
  StepProfile profile;  // reserved accounting, at the settings' micro-batch
};

// Contexts prepared once per distinct plan settings (the blocks' choices
// aside: no context depends on them, only the band's wording does). Not
// thread-safe; a search owns one.
class PlanContexts {
 public:
  // The context for `plan_settings`, or nullptr where prepare_context refuses
  // them (a plan no command could price is never proposed). The pointer lives as
  // long as this object.
  const PricedContext* context_for(const RunSettings& plan_settings);

 private:
  std::map<std::string, std::unique_ptr<PricedContext>> cache_;
};

}  // namespace headroom::planner
