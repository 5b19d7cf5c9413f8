#include "cli/commands.h"

#include <nlohmann/json.hpp>
#include <ostream>

#include "graph/atomic_file.h"
#include "models/zoo.h"
#include "planner/hardware.h"
#include "planner/planner.h"
#include "reports/catalogue_report.h"
#include "reports/fit_report.h"
#include "reports/units.h"

namespace headroom::cli {
namespace {

// Spaces that overwrite the progress line when it is done.
constexpr int kProgressLineWidth = 72;

int fail(Terminal& terminal, int exit_code, const std::string& message) {
  terminal.err << "headroom: " << message << "\n";
  return exit_code;
}

void print_json(Terminal& terminal, const nlohmann::json& document) {
  terminal.out << document.dump(2) << "\n";
}

// The settings and the GPU as the planner will see them.
struct Prepared {
  planner::RunSettings settings;
  planner::GpuSpec gpu;  // with --gpu-mem applied
};

// Resolves the flags, looks the GPU up and refuses budgets the CUDA context
// alone would fill. Returns kExitOk or the exit status after printing why.
int prepare(const CliOptions& options, Terminal& terminal, Prepared& prepared) {
  Result<planner::RunSettings> settings = resolve_settings(options.model, options.settings);
  if (!settings.is_ok()) return fail(terminal, kExitUsage, settings.message());
  prepared.settings = settings.value();
  const planner::RunSettings& s = prepared.settings;

  Result<planner::GpuSpec> gpu = planner::find_gpu(s.gpu);
  if (!gpu.is_ok()) return fail(terminal, kExitFailure, gpu.message());
  prepared.gpu = gpu.value();
  if (s.gpu_memory_bytes) prepared.gpu = planner::with_memory(prepared.gpu, *s.gpu_memory_bytes);

  // Below the context size every plan is nonsense: nothing of the model fits
  // beside the memory CUDA and PyTorch's kernels take before the first tensor.
  const int64_t context = s.cuda_context_bytes.value_or(prepared.gpu.cuda_context_bytes);
  const auto budget = static_cast<int64_t>(static_cast<double>(prepared.gpu.memory_bytes) *
                                           (1.0 - s.safety_margin));
  if (budget <= context) {
    return fail(terminal, kExitUsage,
                "--gpu-mem: " + reports::format_gib(prepared.gpu.memory_bytes) +
                    " of GPU memory (" + reports::format_gib(budget) + " after the " +
                    reports::format_percent(s.safety_margin) +
                    " safety margin) does not exceed the CUDA context alone (" +
                    reports::format_gib(context) + " on " + prepared.gpu.name +
                    "); expected GPU memory larger than the context size, e.g. --gpu-mem 24GiB");
  }
  return kExitOk;
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

int run_fit(const CliOptions& options, Terminal& terminal) {
  Prepared prepared;
  if (int status = prepare(options, terminal, prepared); status != kExitOk) return status;
  Result<planner::FitAnswer> answer = planner::fit(prepared.settings);
  if (!answer.is_ok()) return fail(terminal, kExitFailure, answer.message());
  if (options.json) {
    print_json(terminal, reports::fit_to_json(answer.value(), prepared.gpu));
  } else {
    terminal.out << reports::fit_report(answer.value(), prepared.gpu.name);
  }
  return kExitOk;
}

int run_plan(const CliOptions& options, Terminal& terminal) {
  Prepared prepared;
  if (int status = prepare(options, terminal, prepared); status != kExitOk) return status;
  bool shown = false;
  Result<planner::PlanResult> result =
      planner::plan(prepared.settings, progress_callback(terminal, shown));
  clear_progress(terminal, shown);
  if (!result.is_ok()) return fail(terminal, kExitFailure, result.message());

  if (options.json) {
    nlohmann::json document = reports::plan_document_to_json(result.value(), prepared.gpu);
    document["output_file"] = result->found && !options.output_path.empty()
                                  ? nlohmann::json(options.output_path)
                                  : nlohmann::json(nullptr);
    print_json(terminal, document);
  } else {
    terminal.out << reports::plan_report(result.value(), prepared.gpu.name);
  }
  if (options.output_path.empty()) return kExitOk;
  if (!result->found) {
    return fail(terminal, kExitFailure,
                "-o " + options.output_path + ": not written, no plan fits the budgets");
  }
  const std::string text = planner::plan_to_json(result->best).dump(2) + "\n";
  if (Status written = graph::write_file_atomic(options.output_path, text); !written.is_ok()) {
    return fail(terminal, kExitFailure, "-o: " + written.message());
  }
  if (!options.json) terminal.out << "\nPlan written to " << options.output_path << "\n";
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
                    "overrides the memory. Sources: docs/hardware.md.\n";
  }
  return kExitOk;
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
     "  headroom fit ./my-model.json --gpu a100-80g --gpus 4 --zero 3",
     true, false, run_fit},
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
     true, true, run_plan},
    {"models", "List the built-in model zoo with parameter counts",
     "Lists every zoo model: its name (use it as MODEL), parameter count and description.\n\n"
     "Example:\n"
     "  headroom models --json",
     false, false, run_models},
    {"gpus", "List the GPU catalogue (memory, bf16 TFLOPS, bandwidth)",
     "Lists every catalogued GPU: the id to pass to --gpu, its name, memory in GiB as CUDA\n"
     "reports it, dense bf16 tensor TFLOPS, memory bandwidth and NVLink bandwidth.\n\n"
     "Example:\n"
     "  headroom gpus",
     false, false, run_gpus},
};

}  // namespace

const std::vector<Command>& commands() { return kCommands; }

}  // namespace headroom::cli
