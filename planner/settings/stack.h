// The training stack a run uses: the same model, batch and GPU allocate
// differently under transformers' Trainer, torchtune, litgpt, torchtitan,
// DeepSpeed or a plain AMP loop. A stack selects a row of a documented table
// of mechanisms (docs/stacks.md, with the framework file that shows each);
// every entry can be overridden on its own. What neither the stack nor an
// override pins down is priced at its most expensive value (the top of the
// band, what `plan` plans against) and at its cheapest (the bottom), so the
// verdict can say TIGHT instead of a false FITS.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/settings/run_settings.h"
#include "planner/settings/stack_choices.h"
#include "planner/settings/stack_spec.h"
#include "planner/settings/stack_traits.h"

namespace headroom::planner {

ResolvedStack resolve_stack(const RunSettings& settings);

// What the band says when the transformers release, and so repeat_kv, is open.
std::string_view repeat_kv_unknown();
// What it says when that release leaves transformers' per-layer RoPE caches open.
std::string_view layer_rope_caches_unknown();

// `settings` with every unknown of its stack pinned to the cheapest value (the
// bottom of the band); nullopt when the stack leaves nothing open.
std::optional<RunSettings> bottom_of_band(const RunSettings& settings);

}  // namespace headroom::planner
