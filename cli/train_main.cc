// headroom-train: the trainer executable, the only one that loads LibTorch.
// `headroom run PLAN ...` execs it with the same arguments (cli/trainer_launch.h);
// it can also be run directly as `headroom-train run PLAN ...`. Exit statuses as
// headroom's (cli/exit_status.h): 0 trained, 2 wrong input, 1 refused or failed.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <exception>
#include <iostream>

#include "cli/checkpoint_lock.h"
#include "cli/commands.h"
#include "cli/rank_launcher.h"
#include "cli/run_flags.h"
#include "cli/train_command.h"

namespace headroom::cli {
namespace {

// Whether this process is the one that locks the job's checkpoint directory:
// a single process, the --nproc launcher, or rank 0 of a job torchrun started
// (the ranks of --nproc share their launcher's lock, kLauncherPidVariable).
bool starts_the_job(const char* world) {
  if (world == nullptr) return true;
  const char* rank = std::getenv("RANK");
  return std::getenv(kLauncherPidVariable) == nullptr && rank != nullptr && std::string(rank) == "0";
}

int run(int argc, char** argv) {
  CLI::App app("headroom-train: trains a headroom plan through LibTorch and measures it against the "
               "prediction. Usually started by `headroom run`.",
               "headroom-train");
  app.require_subcommand(1);
  CliOptions options;
  options.arguments.assign(argv + 1, argv + argc);
  CLI::App* command = app.add_subcommand("run", "Train with a plan and measure what was predicted");
  command->add_option("PLAN", options.plan_path, "a plan file written by `headroom plan -o` or `fit -o`")
      ->required();
  command->add_flag("--json", options.json, "print one JSON document on stdout (docs/cli-json.md)");
  add_run_flags(*command, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);
    std::cerr << "headroom: " << error.what() << "\nRun 'headroom run --help' for usage.\n";
    return exit_status(StatusCode::kInvalidInput);
  }
  Terminal terminal{std::cout, std::cerr, isatty(fileno(stderr)) != 0};
  const char* world = std::getenv("WORLD_SIZE");
  // Held until this process (and the ranks it starts, which inherit it) ends.
  Result<CheckpointLock> lock = CheckpointLock();
  if (starts_the_job(world)) lock = lock_checkpoint_directory(options.run);
  if (!lock.is_ok()) return fail(terminal, lock.status());
  if (options.nproc > 1 && world == nullptr) {
    // This process starts the ranks; each one, seeing RANK, trains.
    std::error_code error;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", error).string();
    if (error) {
      return fail(terminal,
                  Status::runtime("--nproc: cannot find this executable (/proc/self/exe): " +
                                  error.message()));
    }
    return launch_local_ranks(self, options.arguments, options.nproc, options.run.comm_timeout_s, terminal);
  }
  if (options.nproc > 1 && std::to_string(options.nproc) != world) {
    return fail(terminal,
                Status::invalid_input("--nproc " + std::to_string(options.nproc) +
                                      ": this process is one rank of a job of WORLD_SIZE=" + world +
                                      " (started by torchrun or --nproc); expected --nproc " +
                                      world + " or none"));
  }
  return run_training(options, terminal);
}

}  // namespace
}  // namespace headroom::cli

int main(int argc, char** argv) { return headroom::cli::run_guarded(headroom::cli::run, argc, argv); }
