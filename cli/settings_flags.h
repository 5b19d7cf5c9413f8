// The settings flags shared by `headroom fit` and `headroom plan`: one row per
// flag in a table (names, help, how it changes planner::RunSettings). The
// parser records what was given; resolve_settings() (cli/resolve_settings.h)
// then builds RunSettings from them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace CLI {
class App;
}

namespace headroom::planner {
struct MechanismRow;
}

namespace headroom::cli {

struct SettingsFlag {
  const char* names;       // CLI11 spelling, primary name first: "--batch,--micro-batch"
  const char* value_name;  // "N", "SIZE", ...; nullptr for a switch
  const char* group;       // help section
  const char* help;
  bool repeatable;  // --freeze a --freeze b appends
  // Applies the value ("" for a switch); the error says what was expected,
  // the caller prefixes the flag name.
  Status (*apply)(planner::RunSettings& settings, std::string_view value);
  bool apply_last = false;  // applied after every other flag (--deepspeed reads on top of them)
  // A stack mechanism's flag (planner/settings/stack_mechanisms.h): its row sets
  // the value, and `apply` is null.
  const planner::MechanismRow* mechanism = nullptr;
};

// Applies `flag`'s value to `settings`, through its mechanism row or its `apply`.
Status apply_flag(const SettingsFlag& flag, planner::RunSettings& settings, std::string_view value);

// A row's primary spelling: "--batch" of "--batch,--micro-batch".
std::string primary_name(const SettingsFlag& flag);

// Every settings flag, in the order they are applied and listed in --help.
const std::vector<SettingsFlag>& settings_flag_table();

// What the command line gave: the --settings file and each flag with its value.
struct SettingsFlags {
  std::string settings_file;
  // The same RunSettings JSON given as text rather than a file (the Python
  // package's settings dict), named `settings_origin` in messages. Read only
  // when settings_file is empty.
  std::string settings_text;
  std::string settings_origin = "settings";
  std::vector<std::pair<const SettingsFlag*, std::string>> given;
};

// Appends a flag by any of its spellings ("--hf-args", "--micro-batch") with its
// value ("" for a switch), as the command line would; for front ends other than
// the command line (the Python package). Errors name the flag.
Status give_flag(SettingsFlags& flags, std::string_view name, std::string value);

// Adds --settings and every row of the table to `command`, recording into `flags`.
void add_settings_flags(CLI::App& command, SettingsFlags& flags);

// Whether the command line gave `wanted` (a flag's primary spelling, "--batch").
bool flag_given(const SettingsFlags& flags, std::string_view wanted);
// The values given for `wanted`, in command-line order.
std::vector<std::string> given_values(const SettingsFlags& flags, std::string_view wanted);

}  // namespace headroom::cli
