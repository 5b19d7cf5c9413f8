// headroom: the command-line front end. Builds one CLI11 subcommand per row of
// cli::commands(), parses, and runs the chosen row. The only place that talks
// to the terminal; every error ends as one message on stderr and an exit
// status (0 answered, 1 the planner refused, 2 usage).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/mmengine_loader.h"
#include "cli/settings_flags.h"

namespace headroom::cli {
namespace {

constexpr const char* kDescription =
    "headroom: will this fine-tuning run fit on this GPU? Predicts peak GPU memory, host RAM,\n"
    "disk and step time of a training run before you launch it, and finds the fastest plan\n"
    "(checkpointing, ZeRO, offload, micro-batch) that fits.";

constexpr const char* kFooter =
    "Run `headroom COMMAND --help` for a command's flags and examples.\n\n"
    "Start here:\n"
    "  headroom models                                  # what MODEL can be\n"
    "  headroom gpus                                    # what --gpu can be\n"
    "  headroom fit llama-3-8b --gpu 4090 --qlora       # does it fit?\n"
    "  headroom plan llama-3-8b --gpu a6000 -o plan.json  # the fastest plan that fits\n\n"
    "Exit status: 0 answered (whether or not the run fits), 1 the planner refused (unknown\n"
    "model or GPU, bad graph file, file not written), 2 bad command line or settings.\n"
    "--json prints one JSON document on stdout (docs/cli-json.md); errors go to stderr.";

bool is_command(std::string_view name) {
  for (const Command& command : commands()) {
    if (name == command.name) return true;
  }
  return false;
}

std::string command_names() {
  std::string names;
  for (const Command& command : commands()) {
    names += (names.empty() ? "" : ", ") + std::string(command.name);
  }
  return names;
}

int run(int argc, char** argv) {
  end_escaped_config_children();  // this process's children are all its own
  CLI::App app(kDescription, "headroom");
  app.footer(kFooter);
  app.get_formatter()->column_width(32);  // fits "--checkpoint-blocks A,B,..."
  app.require_subcommand(1);
  CliOptions options;
  options.arguments.assign(argv + 1, argv + argc);
  std::vector<std::pair<CLI::App*, const Command*>> subcommands;
  for (const Command& command : commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.summary);
    sub->footer(command.description);
    if (command.takes_model) {
      sub->add_option("MODEL", options.model,
                      "zoo name (`headroom models`) or layer-graph JSON file");
    }
    if (command.takes_plan) {
      sub->add_option("PLAN", options.plan_path, "a plan file written by `headroom plan -o`")->required();
    }
    sub->add_flag("--json", options.json, "print one JSON document on stdout (docs/cli-json.md)");
    if (command.output_help != nullptr) {
      sub->add_option("-o,--output", options.output_path, command.output_help)->type_name("FILE");
    }
    if (command.add_flags != nullptr) command.add_flags(*sub, options);
    if (command.takes_model) add_settings_flags(*sub, options.settings);
    subcommands.emplace_back(sub, &command);
  }

  if (argc <= 1) {
    std::cerr << app.help();
    return exit_status(StatusCode::kInvalidInput);
  }
  if (argv[1][0] != '-' && !is_command(argv[1])) {
    std::cerr << "headroom: unknown command '" << argv[1]
              << "' (expected one of: " << command_names()
              << ")\nRun 'headroom --help' for usage.\n";
    return exit_status(StatusCode::kInvalidInput);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help: prints usage on stdout
    std::string where = "headroom";
    for (const auto& [sub, command] : subcommands) {
      if (sub->parsed()) where += std::string(" ") + command->name;
    }
    std::cerr << "headroom: " << error.what() << "\nRun '" << where << " --help' for usage.\n";
    return exit_status(StatusCode::kInvalidInput);
  }

  Terminal terminal{std::cout, std::cerr, isatty(fileno(stderr)) != 0};
  for (const auto& [sub, command] : subcommands) {
    if (sub->parsed()) return command->run(options, terminal);
  }
  std::cerr << "headroom: expected a command (" << command_names() << ")\n";
  return exit_status(StatusCode::kInvalidInput);
}

}  // namespace
}  // namespace headroom::cli

int main(int argc, char** argv) { return headroom::cli::run_guarded(headroom::cli::run, argc, argv); }
