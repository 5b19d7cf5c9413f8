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
#include <optional>
#include <string>

#include "planner/predict/model_context.h"
#include "planner/predict/plan.h"
#include "planner/predict/prediction.h"

namespace headroom::planner {

// The settings of the plan for `searched` at `config`: the globals applied, no
// block checkpointed or offloaded yet (with_block_choices adds them).
RunSettings plan_settings_for(const RunSettings& searched, const GlobalConfig& config);

// `settings` with exactly the blocks `choices` checkpoints and offloads (graph order).
RunSettings with_block_choices(RunSettings settings, const graph::LayerGraph& graph,
                                     const std::vector<BlockChoice>& choices);

// A context and the step profiles at its own micro-batch, for one plan's settings.
struct PricedContext {
  ModelContext context;
  int64_t micro_batch = 0;
  StepProfile profile;  // reserved accounting, at the settings' micro-batch
  // Allocated accounting at the same micro-batch: made by the first prediction.
  mutable std::optional<StepProfile> allocated;
};

// The key a plan's context is kept under: its settings as a plan file writes them
// (settings_to_json: every field, so a new field is keyed until shown unread),
// less the block choices and the fields no context reads (kContextFreeFields in
// plan_contexts.cc: the offloads).
std::string context_key(const RunSettings& plan_settings);

// Contexts prepared once per context key (the blocks' choices and the offloads
// aside: no context depends on them, only the band's wording does). Not
// thread-safe; a search owns one.
class PlanContexts {
 public:
  // The context for `plan_settings`, or nullptr where prepare_context refuses
  // them (a plan no command could price is never proposed). The pointer lives as
  // long as this object.
  const PricedContext* context_for(const RunSettings& plan_settings);

  // How many contexts were prepared (each key once), for the bench and the tests.
  int prepared() const { return static_cast<int>(cache_.size()); }

 private:
  std::map<std::string, std::unique_ptr<PricedContext>> cache_;
};

// predict() of `settings` in `priced`'s context, at its micro-batch, with its kept
// profiles (the allocated one made at the first call): the same prediction.
Prediction predict_in(const PricedContext& priced, const RunSettings& settings, const GlobalConfig& config,
                      const std::vector<BlockChoice>& blocks, bool simulate_allocator = true);

}  // namespace headroom::planner
