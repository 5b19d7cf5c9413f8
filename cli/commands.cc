#include "cli/commands.h"

#include <unistd.h>

#include <filesystem>

#include "cli/answers.h"
#include "cli/output_guard.h"
#include "cli/run_flags.h"
#include "cli/plan_exports.h"
#include "cli/trainer_launch.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <ostream>

#include "graph/atomic_file.h"
#include "models/zoo.h"
#include "planner/settings/hardware.h"
#include "planner/predict/plan_file.h"
#include "planner/predict/planner.h"
#include "graph/graph_json.h"
#include "planner/predict/simulator.h"
#include "planner/settings/stack.h"
#include "reports/catalogue_report.h"
#include "reports/config_export.h"
#include "reports/measured_run.h"
#include "reports/report_html.h"
#include "reports/simulation_report.h"
#include "reports/fit_report.h"
#include "reports/units.h"

namespace headroom::cli {
namespace {

// Spaces that overwrite the progress line when it is done.
constexpr int kProgressLineWidth = 72;

void print_json(Terminal& terminal, const nlohmann::json& document) {
  terminal.out << document.dump(2) << "\n";
}

// Prints the notes of an answer, then, when it is a refusal, its message.
// Returns kExitOk or the exit status of the refusal.
template <typename T>
int report_refusal(Terminal& terminal, const Answered<T>& answered) {
  for (const std::string& note : answered.notes) terminal.err << "headroom: " << note << "\n";
  return answered.is_ok() ? kExitOk : fail(terminal, answered.status);
}

// A progress callback that rewrites one line on a terminal; empty otherwise.
planner::Progress progress_callback(Terminal& terminal, bool& shown) {
  if (!terminal.progress) return {};
  return [&terminal, &shown](int done, int total) {
    terminal.err << "\rplanning: " << done << "/" << total << " configurations" << std::flush;
    shown = true;
  };
}

void clear_progress(Terminal& terminal, bool shown) {
  if (shown) terminal.err << "\r" << std::string(kProgressLineWidth, ' ') << "\r" << std::flush;
}

int emit_exports(const CliOptions& options, Terminal& terminal, const planner::Plan& best,
                 nlohmann::json* document);

int run_fit(const CliOptions& options, Terminal& terminal) {
  if (Status outputs = refuse_outputs_over_inputs(options); !outputs.is_ok()) return fail(terminal, outputs);
  const Answered<FitOutcome> fit = answer_fit(options.model, options.settings);
  if (int status = report_refusal(terminal, fit); status != kExitOk) return status;
  if (Status outputs = refuse_outputs_over_config_files(options, fit.files_read); !outputs.is_ok()) {
    return fail(terminal, outputs);
  }
  if (options.json) {
    print_json(terminal, fit_document(*fit.value));
  } else {
    terminal.out << reports::fit_report(fit->answer, fit->run.gpu.name);
  }
  // -o: the run exactly as given, as a plan file that `headroom run` can train.
  if (options.output_path.empty()) return kExitOk;
  const std::string text = planner::plan_to_json(fit->answer.as_given).dump(2) + "\n";
  if (Status written = graph::write_file_atomic(options.output_path, text); !written.is_ok()) {
    return fail(terminal, written.with_prefix("-o: "));
  }
  if (!options.json) terminal.out << "\nPlan (the run as given) written to " << options.output_path << "\n";
  return kExitOk;
}

int run_plan(const CliOptions& options, Terminal& terminal) {
  if (Status outputs = refuse_outputs_over_inputs(options); !outputs.is_ok()) return fail(terminal, outputs);
  bool shown = false;
  const Answered<PlanOutcome> plan =
      answer_plan(options.model, options.settings, progress_callback(terminal, shown));
  clear_progress(terminal, shown);
  if (int status = report_refusal(terminal, plan); status != kExitOk) return status;
  if (Status outputs = refuse_outputs_over_config_files(options, plan.files_read); !outputs.is_ok()) {
    return fail(terminal, outputs);
  }
  const planner::PlanResult& result = plan->result;

  if (!options.emit.empty() && !result.found) {
    return fail(terminal,
                Status::unsupported("--emit: nothing to export, no plan fits the budgets"));
  }
  if (options.json) {
    nlohmann::json document = plan_document(*plan.value, options.output_path);
    if (int status = emit_exports(options, terminal, result.best, &document); status != kExitOk) return status;
    print_json(terminal, document);
  } else {
    terminal.out << reports::plan_report(result, plan->run.gpu.name);
    if (int status = emit_exports(options, terminal, result.best, nullptr); status != kExitOk) return status;
  }
  if (options.output_path.empty()) return kExitOk;
  if (!result.found) {
    return fail(terminal, Status::unsupported("-o " + options.output_path +
                                              ": not written, no plan fits the budgets"));
  }
  const std::string text = planner::plan_to_json(result.best).dump(2) + "\n";
  if (Status written = graph::write_file_atomic(options.output_path, text); !written.is_ok()) {
    return fail(terminal, written.with_prefix("-o: "));
  }
  if (!options.json) terminal.out << "\nPlan written to " << options.output_path << "\n";
  return kExitOk;
}

// Reads a plan file and simulates it; the plan's own settings say model and GPU.
struct LoadedPlan {
  planner::Plan plan;
  planner::Simulation simulation;
  planner::ModelContext context;  // prepared from the plan's own settings (GPU included)
};

int load_and_simulate(const CliOptions& options, Terminal& terminal, bool with_events, LoadedPlan& loaded) {
  Result<planner::PreparedPlan> prepared = planner::load_prepared_plan(options.plan_path);
  if (!prepared.is_ok()) return fail(terminal, prepared.status().with_prefix("PLAN: "));
  loaded.plan = std::move(prepared->plan);
  loaded.context = std::move(prepared->context);
  // The replay has DPO's reference copy and forward (planner/predict/dpo_reference.h).
  // Reward modelling has no reference: its step is the graph's own. GRPO's generation
  // and log-prob pass (planner/predict/grpo_phases.h) are in `fit`'s walk, not in the replay.
  const planner::Recipe recipe = planner::resolve_stack(loaded.plan.settings).top.recipe;
  if (recipe == planner::Recipe::kGrpo) {
    return fail(terminal, Status::invalid_input("PLAN: settings.recipe: grpo: the step replay has no generation (its "
                                                "KV cache, prefill and sampling) and no log-prob pass; expected recipe "
                                                "supervised, or `fit` for GRPO's peak"));
  }
  planner::SimulatorOptions simulator_options;
  simulator_options.record_events = with_events;
  loaded.simulation = planner::simulate(loaded.context, loaded.plan.settings, loaded.plan.config, loaded.plan.blocks,
                                        simulator_options);
  return kExitOk;
}

int run_simulate(const CliOptions& options, Terminal& terminal) {
  LoadedPlan loaded;
  if (int status = load_and_simulate(options, terminal, options.events || !options.json, loaded); status != kExitOk) {
    return status;
  }
  if (options.json) {
    nlohmann::json document;
    document["plan"] = planner::plan_to_json(loaded.plan);
    document["simulation"] = planner::simulation_to_json(loaded.simulation, options.events);
    print_json(terminal, document);
  } else {
    terminal.out << reports::simulation_summary(loaded.plan, loaded.simulation, loaded.context.gpu.name);
  }
  return kExitOk;
}

int run_report(const CliOptions& options, Terminal& terminal) {
  if (Status outputs = refuse_outputs_over_inputs(options); !outputs.is_ok()) return fail(terminal, outputs);
  if (options.output_path.empty()) {
    return fail(terminal,
                Status::invalid_input(
                    "-o: missing (expected the HTML file to write, e.g. -o report.html)"));
  }
  std::optional<reports::MeasuredRun> measurement;
  if (!options.measurement_path.empty()) {
    Result<reports::MeasuredRun> loaded = reports::load_measured_run(options.measurement_path);
    if (!loaded.is_ok()) return fail(terminal, loaded.status().with_prefix("--measurement: "));
    measurement = loaded.value();
  }
  LoadedPlan loaded;
  if (int status = load_and_simulate(options, terminal, true, loaded); status != kExitOk) return status;
  // The frontier around the plan: the same search `headroom plan` runs.
  bool shown = false;
  const planner::PlanResult around =
      planner::find_plan(loaded.context, loaded.plan.settings, progress_callback(terminal, shown));
  clear_progress(terminal, shown);
  reports::ReportInput input;
  input.plan = &loaded.plan;
  input.simulation = &loaded.simulation;
  input.frontier = &around.frontier;
  input.fastest = around.found ? &around.best : nullptr;
  input.space = around.space;
  input.alternatives = around.alternatives;
  input.assumptions = planner::input_warnings(loaded.context, loaded.plan.settings);
  input.measurement = measurement ? &*measurement : nullptr;
  input.gpu_name = loaded.context.gpu.name;
  // The file's name only: the report is shared, the local directory is not its business.
  input.generated_by =
      "headroom " HEADROOM_VERSION " from " + std::filesystem::path(options.plan_path).filename().string();
  const std::string html = reports::render_html_report(input);
  if (Status written = graph::write_file_atomic(options.output_path, html); !written.is_ok()) {
    return fail(terminal, written.with_prefix("-o: "));
  }
  if (options.json) {
    print_json(terminal, {{"command", "report"}, {"output_file", options.output_path}, {"bytes", html.size()}});
  } else {
    terminal.out << "Report written to " << options.output_path << " (" << reports::format_count(static_cast<int64_t>(html.size()))
                 << " bytes, self-contained; open it in a browser)\n";
  }
  return kExitOk;
}

// --emit KIND[=FILE]: the best plan's exports (cli/plan_exports.h), in the
// JSON document or on stdout, or written atomically to FILE.
int emit_exports(const CliOptions& options, Terminal& terminal, const planner::Plan& best,
                 nlohmann::json* document) {
  if (options.emit.empty()) return kExitOk;
  Result<PlanExports> exports = build_exports(options.emit, options.settings, best);
  if (!exports.is_ok()) return fail(terminal, exports.status());
  if (Status written = write_export_files(exports.value()); !written.is_ok()) return fail(terminal, written);
  if (document) {
    add_exports_to_document(exports.value(), *document);
    return kExitOk;
  }
  for (const PlanExport& item : exports->exports) {
    if (item.path.empty()) {
      terminal.out << "\n--- " << item.kind << " ---\n" << item.text;
    } else {
      terminal.out << "\n" << item.kind << " export written to " << item.path << "\n";
    }
  }
  for (const std::string& note : exports->notes) terminal.out << "note: " << note << "\n";
  return kExitOk;
}

int run_models(const CliOptions& options, Terminal& terminal) {
  std::vector<reports::ModelSummary> summaries;
  for (const models::ZooEntry& entry : models::zoo_models()) {
    reports::ModelSummary summary{entry.name, entry.description, 0, ""};
    Result<graph::LayerGraph> graph = models::build_zoo_model(entry.name, models::ZooOptions{});
    if (graph.is_ok()) {
      summary.parameters = graph->parameter_count();
    } else {
      summary.error = graph.message();
    }
    summaries.push_back(std::move(summary));
  }
  if (options.json) {
    print_json(terminal, reports::models_to_json(summaries));
  } else {
    terminal.out << reports::models_table(summaries)
                 << "\nUse a name as MODEL (`headroom fit NAME`), or give a layer-graph JSON file "
                    "(docs/layer-graph-format.md).\n";
  }
  return kExitOk;
}

int run_gpus(const CliOptions& options, Terminal& terminal) {
  const std::vector<planner::GpuSpec>& gpus = planner::gpu_catalogue();
  if (options.json) {
    print_json(terminal, reports::gpus_to_json(gpus));
  } else {
    terminal.out << reports::gpus_table(gpus)
                 << "\nUse an id with --gpu (aliases and nvidia-smi names work too); --gpu-mem "
                    "overrides the memory; --gpu-file FILE describes a GPU that is not here. "
                    "Sources: docs/hardware.md.\n";
  }
  return kExitOk;
}

// The flags only one command has.
void add_plan_flags(CLI::App& command, CliOptions& options) {
  command
      .add_option("--emit", options.emit,
                  "also export the best plan: deepspeed, accelerate or torch (docs/config-export.md), or "
                  "torchtune / hf-args / axolotl / llamafactory / xtuner / mmengine / accelerate (the keys to change "
                  "in the file the run was read from, docs/config-import.md; accelerate is a patch of --accelerate "
                  "FILE when one was given), to stdout or KIND=FILE; repeatable. FILE must not be an input: a "
                  "recipe export is a patch, written beside the config (tt.patch), never over it")
      ->type_name("KIND[=FILE]");
}

void add_report_flags(CLI::App& command, CliOptions& options) {
  command.add_option("--measurement", options.measurement_path, "measured peaks and step times to overlay (docs/report.md)")
      ->type_name("FILE");
}

void add_simulate_flags(CLI::App& command, CliOptions& options) {
  command.add_flag("--events", options.events, "include the whole timeline in --json output");
}

const std::vector<Command> kCommands = {
    {"fit", "Will this run fit? Predict memory, disk and time for the run exactly as given",
     "Predicts the peak GPU memory (by category), host RAM, disk and step time of one training\n"
     "run exactly as given, and says whether it fits. When it does not, it shows the fastest\n"
     "plan that does, or what would make it fit.\n\n"
     "MODEL is a zoo name (see `headroom models`) or a layer-graph JSON file (a path that\n"
     "contains '/' or ends in .json). Sizes take units: 24GiB, 48GB, 49140MiB or bytes.\n\n"
     "Examples:\n"
     "  headroom fit llama-3-8b --gpu 4090 --qlora --seq 2048\n"
     "  headroom fit gpt2 --gpu a6000 --batch 8 --json\n"
     "  headroom fit ./my-model.json --gpu a100-80g --gpus 4 --zero 3\n"
     "  headroom fit tiny-llama --gpu a6000 --checkpointing every -o plan.json   # then: headroom run plan.json",
     true, "write the run as given as a plan file for `headroom run` (atomically)", false, run_fit},
    {"plan", "Find the fastest plan that fits (checkpointing, ZeRO, offload, micro-batch)",
     "Searches ZeRO stage, optimizer and parameter offload, micro-batch and the per-block\n"
     "choice (keep / checkpoint / offload activations) for the fastest run that fits the GPU,\n"
     "host RAM and disk. Prints the best plan, the memory/time frontier, the largest\n"
     "micro-batch and sequence length that fit, and what would help when nothing fits.\n"
     "The flags describe the run; --max-zero, --no-offload, --allow-nvme,\n"
     "--no-activation-offload and --fixed-micro-batch limit what the planner may change.\n\n"
     "Examples:\n"
     "  headroom plan llama-3-8b --gpu a6000 --lora --seq 4096 -o plan.json\n"
     "  headroom plan llama-3-8b --gpu h100 --gpus 8 --global-batch 256 --no-offload",
     true, "write the best plan as JSON to FILE (replaced atomically)", false, run_plan, add_plan_flags},
    {"run", "Train with a plan through LibTorch and measure what was predicted",
     "Trains the plan's model (tiny-llama, tiny-flux, Llama-family and Flux models) exactly as\n"
     "the plan says: blocks kept, checkpointed or offloaded, mixed precision with fp32 master\n"
     "weights, gradient accumulation, AdamW on the GPU or offloaded to the CPU. Shows a progress\n"
     "bar, can write metrics as JSON lines, saves training-state checkpoints that never destroy\n"
     "the previous good one, resumes from them, and ends with predicted vs measured memory per\n"
     "category. Runs the trainer executable headroom-train, built when LibTorch is found\n"
     "(scripts/setup_torch.sh); trains on the CPU when there is no GPU.\n\n"
     "Examples:\n"
     "  headroom fit tiny-llama --gpu a6000 --checkpointing every -o plan.json\n"
     "  headroom run plan.json --steps 30 --checkpoint-dir ckpt --checkpoint-every 10\n"
     "  headroom run plan.json --steps 60 --resume ckpt --metrics metrics.jsonl",
     false, nullptr, true, launch_trainer, add_run_flags},
    {"models", "List the built-in model zoo with parameter counts",
     "Lists every zoo model: its name (use it as MODEL), parameter count and description.\n\n"
     "Example:\n"
     "  headroom models --json",
     false, nullptr, false, run_models},
    {"gpus", "List the GPU catalogue (memory, bf16 TFLOPS, bandwidth)",
     "Lists every catalogued GPU: the id to pass to --gpu, its name, memory in GiB as CUDA\n"
     "reports it, dense bf16 tensor TFLOPS, memory bandwidth and NVLink bandwidth.\n\n"
     "Example:\n"
     "  headroom gpus",
     false, nullptr, false, run_gpus},
    {"simulate", "Replay one training step of a plan: memory curve, peak, timeline",
     "Replays one optimizer step of a plan file tensor by tensor on a model of PyTorch's CUDA\n"
     "caching allocator: every allocation and free, every kernel with its roofline time, offload\n"
     "copies and collectives on their own streams. Prints the peak allocated and reserved memory,\n"
     "where the peak happens and what is live then, fragmentation, and the step time breakdown\n"
     "(docs/simulator.md).\n\n"
     "Examples:\n"
     "  headroom plan llama-3-8b --gpu a6000 --lora -o plan.json && headroom simulate plan.json\n"
     "  headroom simulate plan.json --json --events > step.json",
     false, nullptr, true, run_simulate, add_simulate_flags},
    {"report", "Write a self-contained HTML report with charts for a plan",
     "Writes one HTML file, viewable offline, for a plan file: the memory breakdown against the\n"
     "GPU and the budget, memory over the step with the peak marked, the memory/time frontier\n"
     "with the plan marked, the per-block decisions, the timeline of streams, and, with\n"
     "--measurement, predicted vs measured (docs/report.md).\n\n"
     "Examples:\n"
     "  headroom plan flux-kontext-dev --gpu a6000 --lora --resolution 1024 -o plan.json\n"
     "  headroom report plan.json -o report.html\n"
     "  headroom report plan.json -o report.html --measurement measured.json",
     false, "write the HTML report to FILE (replaced atomically)", true, run_report, add_report_flags},
};

}  // namespace

const std::vector<Command>& commands() { return kCommands; }

int fail(Terminal& terminal, const Status& status) {
  terminal.err << "headroom: " << status.message() << "\n";
  return exit_status(status);
}

namespace {

// The answer goes to stdout: when writing it fails (a full disk, /dev/full) the
// answer is lost, and exiting 0 would tell a script that it is there.
int check_stdout(int status) {
  std::cout.flush();
  const bool failed = !std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (!failed) return status;
  // The stream does not keep the reason (errno is long overwritten when an
  // early write failed): one more byte to the already incomplete answer says it.
  errno = 0;
  const int error = ::write(STDOUT_FILENO, "\n", 1) < 0 && errno != 0 ? errno : EIO;
  std::cerr << "headroom: standard output: cannot write the answer: " << std::strerror(error) << "\n";
  return status == kExitOk ? exit_status(StatusCode::kIo) : status;
}

}  // namespace

int run_guarded(int (*run)(int, char**), int argc, char** argv) {
  int status = exit_status(StatusCode::kInternal);
  try {
    status = run(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "headroom: internal error: " << error.what() << " (please report it with the command line)\n";
  } catch (...) {
    std::cerr << "headroom: internal error: unknown exception (please report it with the command line)\n";
  }
  return check_stdout(status);
}

}  // namespace headroom::cli
