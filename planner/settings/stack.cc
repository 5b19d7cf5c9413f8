#include "planner/settings/stack.h"

#include "planner/settings/bnb_release.h"
#include "planner/settings/stack_mechanisms.h"

namespace headroom::planner {

std::string_view repeat_kv_unknown() {
  return "the transformers release: before 4.54 SDPA runs on K and V copied to every head (repeat_kv), from 4.54 "
         "on the grouped K and V (give --versions transformers=X or --repeat-kv)";
}

std::string_view layer_rope_caches_unknown() {
  return "the transformers release: before 4.45 every Qwen2 and GPT-NeoX attention layer keeps its own RoPE cos/sin "
         "cache over max_position_embeddings, from 4.45 none (give --versions transformers=X or --layer-rope-caches)";
}

ResolvedStack resolve_stack(const RunSettings& settings) {
  ResolvedStack out;
  // An override pins a mechanism; else the run's releases may; else the stack's row.
  for (const MechanismRow& row : stack_mechanisms()) row.resolve(settings, out);
  add_bnb_unknowns(settings, out.unknowns);  // priced by the release (mechanisms/bnb_matmul4bit.h)
  return out;
}

std::optional<RunSettings> bottom_of_band(const RunSettings& settings) {
  const ResolvedStack resolved = resolve_stack(settings);
  if (resolved.unknowns.empty() && !resolved.repeat_kv_open && !resolved.layer_rope_caches_open) return std::nullopt;
  RunSettings bottom = settings;
  for (const MechanismRow& row : stack_mechanisms()) row.pin_bottom(settings, resolved, bottom);
  pin_bnb_bottom(settings, bottom);
  return bottom;
}
}  // namespace headroom::planner
