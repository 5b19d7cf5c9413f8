// The subcommands of `headroom`, as rows of one table (like ninja's kTools):
// a name, a one-line summary, an example for --help, which arguments the
// command takes, and the function that runs it. Commands print through a
// Terminal; they return the process exit status, an error's by fail() below.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "cli/exit_status.h"
#include "cli/settings_flags.h"
#include "executor/run.h"
#include "graph/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

struct Terminal {
  std::ostream& out;      // the answer (text or one JSON document)
  std::ostream& err;      // errors and progress
  bool progress = false;  // show progress lines on `err` (it is a terminal)
};

// An error as every command reports it: "headroom: MESSAGE" on terminal.err;
// returns the exit status of its kind (exit_status(), cli/exit_status.h).
int fail(Terminal& terminal, const Status& status);

// Everything the command line gave, for whichever command runs.
struct CliOptions {
  std::string model;        // MODEL: zoo name or layer-graph JSON path
  SettingsFlags settings;   // settings flags (fit, plan)
  std::string output_path;  // plan -o FILE, report -o FILE
  bool json = false;        // --json: one JSON document on stdout
  std::string plan_path;    // simulate / report: PLAN.json written by `headroom plan -o`
  std::vector<std::string> emit;  // plan --emit deepspeed|accelerate|torch[=FILE]
  std::string measurement_path;   // report --measurement FILE
  bool events = false;            // simulate --events: the timeline in the JSON
  executor::RunOptions run;        // run: steps, data, checkpoints, resume
  std::string metrics_path;        // run --metrics FILE (JSON lines)
  std::string measurement_out;     // run --measurement-out FILE
  std::string calibration_out;     // run --write-calibration FILE
  int nproc = 1;                   // run --nproc N: ranks started on this machine (cli/rank_launcher.h)
  // The command line after the program name, as given: `headroom run` passes it
  // on to the trainer executable unchanged (cli/trainer_launch.h).
  std::vector<std::string> arguments;
};

// One row per command: what it takes and the flags it owns. main.cc builds a
// subcommand from each row and adds nothing by command name.
struct Command {
  const char* name;
  const char* summary;      // one line in `headroom --help`
  const char* description;  // a paragraph and an example for `headroom NAME --help`
  bool takes_model;         // MODEL argument and the settings flags
  const char* output_help;  // -o FILE: what it writes; nullptr: no -o
  bool takes_plan;          // PLAN argument (simulate, report)
  int (*run)(const CliOptions& options, Terminal& terminal);
  void (*add_flags)(CLI::App& command, CliOptions& options) = nullptr;  // the command's own flags
};

const std::vector<Command>& commands();

// Runs a front end's `run(argc, argv)` for main(): an exception that escapes it
// becomes one "internal error" message on stderr and the exit status of
// kInternal, and an answer that could not be written to stdout turns a 0 into
// the exit status of kIo with a message.
// Shared by headroom and headroom-train.
int run_guarded(int (*run)(int, char**), int argc, char** argv);

}  // namespace headroom::cli
