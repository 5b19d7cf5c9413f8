// The table of stack mechanisms (docs/stacks.md): one row per mechanism a
// training stack decides and a user may pin. A row holds the setting that pins
// it (one key in the settings JSON, one flag: --key with dashes), its choices,
// what each stack does when it is not pinned (the top and bottom of the band,
// and the words for an open choice), what the band's bottom pins, and the
// words the fit report names it with. resolve_stack, bottom_of_band, the
// settings JSON reader and writer, the command-line flags, the fit report's
// stack line and the accuracy bench's settings keys all loop over it, so adding
// a mechanism is one row here plus its rewrite (planner/mechanisms/) and a test.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/settings/json_fields.h"
#include "planner/settings/run_settings.h"
#include "planner/settings/stack_spec.h"

namespace headroom::planner {

struct MechanismRow {
  const char* key;            // "optimizer_impl": RunSettings::optimizer_impl, --optimizer-impl
  const char* value_name;     // for --help: "IMPL", "on|off"
  const char* help;           // what it decides; --help adds the choices and the default
  std::string (*choices)();   // "foreach, fused, ..." or "on, off"
  // The setting: from its flag's text ("expected one of ...", the caller names the
  // flag), from a settings JSON object (absent: left unset), and back.
  Status (*set)(const MechanismRow& row, RunSettings& settings, std::string_view text);
  Status (*read)(const MechanismRow& row, JsonFields& fields, RunSettings& settings);
  void (*write)(const MechanismRow& row, const RunSettings& settings, nlohmann::json& out);
  // What the stack does with the setting unset: the top and bottom of the band,
  // and in `unknowns` what is open where it can change this run. Rows run in the
  // table's order (compile_loss reads the loss resolved before it).
  void (*resolve)(const RunSettings& settings, ResolvedStack& out);
  // Pins the setting in `bottom` to the band's bottom where the run accepts it.
  void (*pin_bottom)(const RunSettings& settings, const ResolvedStack& resolved, RunSettings& bottom);
  // The fit report's words for it ("adapters fp32", "loss full to full-keep-logits"),
  // empty where it cannot change this run.
  std::string (*words)(const RunSettings& settings, const ResolvedStack& resolved);
};

// Every row, in the order resolve_stack runs them.
std::span<const MechanismRow> stack_mechanisms();

// "--optimizer-impl" for the row of "optimizer_impl".
std::string mechanism_flag(const MechanismRow& row);
// The flag's --help text: the row's help, its choices and its default.
std::string mechanism_help(const MechanismRow& row);

}  // namespace headroom::planner
