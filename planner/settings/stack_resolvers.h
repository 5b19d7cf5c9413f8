// What each training stack does with each mechanism when the user pins none:
// the rows of docs/stacks.md's table, one function per mechanism, each filling
// its part of the band (top, bottom) and saying what is open where it can
// change the run. The mechanism table (settings/stack_mechanisms.h) calls them.
#pragma once

#include "planner/settings/run_settings.h"
#include "planner/settings/stack_spec.h"

namespace headroom::planner {

void resolve_optimizer_impl(const RunSettings& settings, ResolvedStack& out);
void resolve_loss(const RunSettings& settings, ResolvedStack& out);
void resolve_recompute(const RunSettings& settings, ResolvedStack& out);
void resolve_adapter_dtype(const RunSettings& settings, ResolvedStack& out);
// After resolve_loss: torchtune compiles only its chunked loss.
void resolve_compile_loss(const RunSettings& settings, ResolvedStack& out);
void resolve_liger_kernels(const RunSettings& settings, ResolvedStack& out);
void resolve_fsdp_no_sync(const RunSettings& settings, ResolvedStack& out);
void resolve_kbit_prep(const RunSettings& settings, ResolvedStack& out);
void resolve_autocast(const RunSettings& settings, ResolvedStack& out);
void resolve_repeat_kv(const RunSettings& settings, ResolvedStack& out);
void resolve_input_require_grads(const RunSettings& settings, ResolvedStack& out);
void resolve_grads_through_forward(const RunSettings& settings, ResolvedStack& out);
void resolve_recipe(const RunSettings& settings, ResolvedStack& out);
void resolve_reference(const RunSettings& settings, ResolvedStack& out);
void resolve_generation(const RunSettings& settings, ResolvedStack& out);
void resolve_rope_modules(const RunSettings& settings, ResolvedStack& out);

}  // namespace headroom::planner
