#include "planner/search/plan_contexts.h"

#include <nlohmann/json.hpp>

#include "planner/memory/state_bytes.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// Settings fields no context reads: prepare_context passes them to validate_settings
// only (context_for validates each plan's own settings), and the profiles do not read
// them. The search varies the offloads per global configuration.
constexpr const char* kContextFreeFields[] = {"offload_optimizer", "offload_param", "allow_micro_batch_change"};

}  // namespace

RunSettings plan_settings_for(const RunSettings& searched, const GlobalConfig& config) {
  RunSettings out = settings_for_plan(searched);
  out.zero_stage = config.zero_stage;
  // FSDP1's wrapping means nothing below stage 3, where the plan does not shard with it.
  if (config.zero_stage < 3) out.fsdp_wrap = FsdpWrap::kLayers;
  out.offload_optimizer = config.offload_optimizer;
  out.offload_param = config.offload_param;
  out.micro_batch = config.micro_batch;
  out.grad_accum = config.grad_accum;
  out.global_batch = 0;
  out.checkpointing = CheckpointPolicy::kNone;
  out.checkpoint_blocks.clear();
  out.offload_blocks.clear();
  return out;
}

RunSettings with_block_choices(RunSettings settings, const graph::LayerGraph& graph,
                                     const std::vector<BlockChoice>& choices) {
  settings.checkpoint_blocks.clear();
  settings.offload_blocks.clear();
  for (size_t b = 0; b < choices.size() && b < graph.blocks.size(); ++b) {
    if (choices[b] == BlockChoice::kCheckpoint) settings.checkpoint_blocks.push_back(graph.blocks[b].name);
    if (choices[b] == BlockChoice::kOffload) settings.offload_blocks.push_back(graph.blocks[b].name);
  }
  settings.checkpointing = settings.checkpoint_blocks.empty() ? CheckpointPolicy::kNone : CheckpointPolicy::kList;
  return settings;
}

std::string context_key(const RunSettings& plan_settings) {
  // Which blocks are checkpointed or offloaded changes no context (prepare_context reads the
  // policy only to word the band's unknowns): one key for every block choice.
  RunSettings keyed = plan_settings;
  keyed.checkpointing = CheckpointPolicy::kNone;
  keyed.checkpoint_blocks.clear();
  keyed.offload_blocks.clear();
  nlohmann::json json = settings_to_json(keyed);
  for (const char* field : kContextFreeFields) json.erase(field);
  return json.dump();
}

const PricedContext* PlanContexts::context_for(const RunSettings& plan_settings) {
  RunSettings keyed = plan_settings;
  keyed.checkpointing = CheckpointPolicy::kNone;
  keyed.checkpoint_blocks.clear();
  keyed.offload_blocks.clear();
  // The context-free fields are validated here, for these settings: the kept
  // context may come from settings that differ in them only.
  if (!validate_settings(keyed, "settings").is_ok()) return nullptr;
  const std::string key = context_key(keyed);
  auto found = cache_.find(key);
  if (found != cache_.end()) return found->second.get();
  std::unique_ptr<PricedContext> priced;
  Result<ModelContext> context = prepare_context(keyed);
  if (context.is_ok() && check_batch_norm_values(context.value(), keyed.micro_batch).is_ok()) {
    priced = std::make_unique<PricedContext>();
    priced->context = std::move(context.value());
    priced->micro_batch = keyed.micro_batch;
    priced->profile = step_profile(priced->context, keyed, keyed.micro_batch, Accounting::kReserved);
  }
  return cache_.emplace(key, std::move(priced)).first->second.get();
}

Prediction predict_in(const PricedContext& priced, const RunSettings& settings, const GlobalConfig& config,
                      const std::vector<BlockChoice>& blocks, bool simulate_allocator) {
  // The kept profiles are at the context's micro-batch (the key holds it and the precision).
  if (config.micro_batch != priced.micro_batch) {
    return predict(priced.context, settings, config, blocks, simulate_allocator);
  }
  if (!priced.allocated) {
    priced.allocated = step_profile(priced.context, settings, config.micro_batch, Accounting::kAllocated);
  }
  return predict(priced.context, priced.profile, *priced.allocated, settings, config, blocks, simulate_allocator);
}

}  // namespace headroom::planner
