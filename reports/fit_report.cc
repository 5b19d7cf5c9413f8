#include "reports/fit_report.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

#include "planner/mechanisms/float8_linear.h"
#include "planner/settings/stack.h"
#include "planner/settings/stack_mechanisms.h"
#include "reports/catalogue_report.h"
#include "reports/text_table.h"
#include "reports/units.h"

namespace headroom::reports {
namespace {

using planner::BlockChoice;

// Frontier rows beyond this are summarised in one line: a frontier is a
// handful of points in practice, and a terminal page is ~40 lines.
constexpr size_t kMaxFrontierRows = 16;

// When nothing fits, find_plan (planner/search/plan_search.cc) looks for the plan
// closest to fitting under budgets widened up to this factor; if none of them
// has a plan, PlanResult::best stays default-constructed (no model, all zeros).
constexpr int kWidestSearchFactor = 64;

std::string plural(int64_t count, const std::string& one, const std::string& many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

// "layers.12" -> {"layers", 12}; names without a numeric last component -> nullopt.
std::optional<std::pair<std::string, int64_t>> split_index(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 >= name.size() || name.size() - dot > 10) {
    return std::nullopt;
  }
  int64_t index = 0;
  for (size_t i = dot + 1; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
    index = index * 10 + (name[i] - '0');
  }
  return std::make_pair(name.substr(0, dot), index);
}

std::string block_name(const planner::Plan& plan, size_t index) {
  if (index < plan.block_names.size()) return plan.block_names[index];
  return "block " + std::to_string(index);
}

std::string mode_text(const planner::RunSettings& settings) {
  switch (settings.mode) {
    case planner::TrainMode::kFull:
      return "full fine-tuning";
    case planner::TrainMode::kLora:
      return "LoRA r=" + std::to_string(settings.lora.rank);
    case planner::TrainMode::kQlora:
      return "QLoRA r=" + std::to_string(settings.lora.rank);
  }
  return "?";
}

std::string budget_line(const planner::Prediction& p) {
  std::string gpu = "GPU peak " + format_gib(p.gpu_total) + " of " + format_gib(p.gpu_budget) +
                    " budget (" +
                    (p.fits_gpu ? format_gib(p.gpu_margin()) + " to spare"
                                : "short by " + format_gib(-p.gpu_margin())) +
                    ")";
  return gpu + "; host RAM " + format_gib(p.host_ram) + " of " + format_gib(p.host_ram_budget) +
         (p.host_ram_assumed ? " assumed" : "") + "; disk " + format_gb(p.disk) + " of " + format_gb(p.disk_budget) +
         (p.disk_assumed ? " assumed" : "");
}

std::string throughput_line(const planner::Prediction& p) {
  return "step " + format_ms(p.time.step_ms) + ", " + fixed(p.time.samples_per_s, 2) +
         " samples/s, " + group_thousands(static_cast<int64_t>(p.time.tokens_per_s)) +
         " tokens/s, MFU " + format_percent(p.time.mfu);
}

std::string status_word(bool fits) { return fits ? "ok" : "DOES NOT FIT"; }

// What the run needs beyond a budget that was assumed, not given: said, never the verdict.
std::string over_assumed_budgets(const planner::Prediction& p) {
  std::string out;
  if (p.host_over_assumed()) {
    out += "; needs " + format_gib(p.host_ram) + " of host RAM per node, more than the " +
           format_gib(p.host_ram_budget) + " assumed (give --host-ram)";
  }
  if (p.disk_over_assumed()) {
    out += "; needs " + format_gb(p.disk) + " of disk, more than the " + format_gb(p.disk_budget) +
           " assumed (give --disk)";
  }
  return out;
}

// A budget's status: over an assumed one is not a verdict.
std::string budget_word(bool fits, bool over_assumed) {
  return over_assumed ? "over the assumed budget: give the real one" : status_word(fits);
}

// Whether `result.best` holds a plan: the fastest that fits, or the least-memory
// one found under a wider budget. A default-constructed Plan has no model.
bool has_best(const planner::PlanResult& result) {
  return result.found || !result.best.model.empty();
}

// Nothing fits, and the GPU is not what is short: host RAM or disk is.
bool only_host_or_disk_short(const planner::PlanResult& result) {
  return !result.found && !result.short_of.empty() &&
         std::find(result.short_of.begin(), result.short_of.end(), "GPU memory") == result.short_of.end();
}

// "No plan fits the host RAM budget; the fastest plan that fits the GPU:" or the
// least-memory plan found under a wider GPU budget.
std::string no_fit_heading(const planner::PlanResult& result) {
  if (only_host_or_disk_short(result)) {
    return "No plan fits the " + join(result.short_of, " and ") + " budget; the fastest plan that fits the GPU:\n";
  }
  return "No plan fits; the least-memory plan:\n";
}

std::string widest_search_text() {
  return "even with up to " + std::to_string(kWidestSearchFactor) + "x the GPU memory";
}

// The verdict of `headroom plan`: for `best`, or that there is none.
std::string plan_verdict(const planner::PlanResult& result, std::string_view gpu_name) {
  if (!has_best(result)) {
    return "DOES NOT FIT on " + std::string(gpu_name) + ": no plan fits, " + widest_search_text();
  }
  return verdict_line(result.best.prediction, gpu_name, result.best.settings.safety_margin);
}

std::string prediction_section(const planner::Plan& plan) {
  const planner::Prediction& p = plan.prediction;
  return "GPU memory at the peak, per GPU:\n" + breakdown_table(p) + peak_line(p) + "\n\n" +
         resources_text(p, plan.settings.checkpoints_kept) + time_text(p);
}

}  // namespace

double sample_ms(const planner::Prediction& prediction) {
  return prediction.time.samples_per_s > 0 ? 1000.0 / prediction.time.samples_per_s : 0.0;
}

std::string compact_block_list(const std::vector<std::string>& names) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < names.size()) {
    const auto head = split_index(names[i]);
    size_t j = i + 1;
    if (head) {
      while (j < names.size()) {
        const auto next = split_index(names[j]);
        if (!next || next->first != head->first ||
            next->second != head->second + static_cast<int64_t>(j - i)) {
          break;
        }
        ++j;
      }
    }
    if (j - i >= 2) {
      parts.push_back(head->first + "." + std::to_string(head->second) + "-" +
                      std::to_string(head->second + static_cast<int64_t>(j - i - 1)));
    } else {
      parts.push_back(names[i]);
    }
    i = j;
  }
  return join(parts, ", ");
}

std::string block_choice_line(const planner::Plan& plan, BlockChoice choice) {
  std::vector<std::string> names;
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    if (plan.blocks[i] == choice) names.push_back(block_name(plan, i));
  }
  const std::string label(planner::block_choice_name(choice));
  if (names.empty()) return label + ": none";
  const auto count = static_cast<int64_t>(names.size());
  return label + ": " + compact_block_list(names) + " (" + plural(count, "block", "blocks") + ")";
}

std::string globals_line(const planner::GlobalConfig& config, int world_size) {
  const std::string zero =
      config.zero_stage == 0 ? "no ZeRO" : "ZeRO-" + std::to_string(config.zero_stage);
  const int64_t global = config.micro_batch * config.grad_accum * world_size;
  return zero + ", optimizer offload " +
         std::string(planner::offload_name(config.offload_optimizer)) + ", parameter offload " +
         std::string(planner::offload_name(config.offload_param)) + ", micro-batch " +
         std::to_string(config.micro_batch) + " x " +
         plural(config.grad_accum, "accumulation step", "accumulation steps") + " x " +
         plural(world_size, "GPU", "GPUs") + " = global batch " + std::to_string(global);
}

// The stack's mechanisms (one phrase per row of planner/settings/stack_mechanisms.h,
// where it changes this run's answer), then the run's other choices of kernels.
std::string stack_words(const planner::RunSettings& s, const planner::ResolvedStack& stack) {
  std::vector<std::string> words;
  for (const planner::MechanismRow& row : planner::stack_mechanisms()) {
    if (std::string phrase = row.words(s, stack); !phrase.empty()) words.push_back(std::move(phrase));
  }
  if (s.compile) words.emplace_back("torch.compile");
  if (!s.versions.empty()) words.push_back("as of " + planner::versions_text(s.versions));
  if (s.float8 != planner::Float8Recipe::kNone) {
    words.push_back("fp8 linears (torchao " + std::string(planner::float8_recipe_name(s.float8)) + ")" +
                    (s.float8_all_gather ? " gathered in fp8" : ""));
  }
  return join(words, ", ");
}

// "\nmodel: 8.03 B parameters, 8.03 B trainable; weights 16.1 GB bf16".
std::string model_line(const planner::ModelSize& model) {
  if (model.total_params == 0) return "";
  std::vector<std::string> weights;
  for (const auto& [dtype, bytes] : model.weight_bytes_by_dtype) {
    // Quantization constants are megabytes beside gigabytes of weights.
    const std::string size = bytes >= 100'000'000 ? format_gb(bytes) : fixed(static_cast<double>(bytes) / 1e6, 1) + " MB";
    weights.push_back(size + " " + dtype);
  }
  return "\nmodel: " + format_count(model.total_params) + " parameters, " + format_count(model.trainable_params) +
         " trainable; weights " + join(weights, " + ");
}

// "sequence N", and how much of it the image takes where a model's S counts image tokens.
std::string sequence_text(const planner::Plan& plan) {
  const int64_t image = plan.prediction.model.image_tokens;
  const int64_t target = plan.prediction.model.target_tokens;
  if (target > 0) {
    return "sequence " + std::to_string(plan.seq_len) + " encoder + " + std::to_string(target) +
           " decoder tokens (--target-seq)";
  }
  const std::string seq = "sequence " + std::to_string(plan.seq_len);
  if (image <= 0) return seq;
  return seq + " (" + std::to_string(image) + " image + " + std::to_string(plan.seq_len - image) + " text tokens)";
}

std::string run_line(const planner::Plan& plan) {
  const planner::RunSettings& s = plan.settings;
  return plan.model + ": " + std::string(planner::precision_name(s.precision)) + ", " +
         std::string(planner::optimizer_name(s.optimizer)) + ", " + mode_text(s) + ", " + sequence_text(plan) + ", " + plural(s.world_size(), "GPU", "GPUs") +
         (s.nodes > 1 ? " (" + std::to_string(s.nodes) + " nodes)" : "") + "\nstack " +
         std::string(planner::stack_name(s.stack)) + ": " + stack_words(s, planner::resolve_stack(s)) +
         " (docs/stacks.md)" + model_line(plan.prediction.model);
}

std::string verdict_line(const planner::Prediction& p, std::string_view gpu_name,
                         double safety_margin) {
  const std::string where =
      " on " + std::string(gpu_name) + " (" + format_gib(p.gpu_capacity) + "): ";
  const std::string margin = "the " + format_percent(safety_margin) + " safety margin";
  if (p.fits()) {
    return "FITS" + where + "peak " + format_gib(p.gpu_total) + ", " + format_gib(p.gpu_margin()) +
           " to spare above " + margin + over_assumed_budgets(p);
  }
  if (p.tight()) {
    return "TIGHT" + where + "peak " + format_gib(p.gpu_total_bottom) + " to " + format_gib(p.gpu_total) +
           " against a budget of " + format_gib(p.gpu_budget) + " after " + margin +
           ": it fits only if " + join(p.band_unknowns, "; ") + " turn out the cheaper way";
  }
  std::vector<std::string> reasons;
  if (!p.fits_gpu) {
    reasons.push_back("peak " + format_gib(p.gpu_total) + ", short by " +
                      format_gib(-p.gpu_margin()) + " (budget " + format_gib(p.gpu_budget) +
                      " after " + margin + ")");
  } else {
    reasons.push_back("GPU peak " + format_gib(p.gpu_total) + " fits");
  }
  if (!p.fits_host) {
    reasons.push_back("host RAM needs " + format_gib(p.host_ram) + " of " +
                      format_gib(p.host_ram_budget));
  }
  if (!p.fits_disk) {
    reasons.push_back("disk needs " + format_gb(p.disk) + " of " + format_gb(p.disk_budget));
  }
  return "DOES NOT FIT" + where + join(reasons, "; ");
}

std::string breakdown_table(const planner::Prediction& p) {
  const planner::MemoryBreakdown& b = p.peak;
  const int64_t total = b.total();
  TextTable table({"category", "memory", "share"});
  auto row = [&](const std::string& name, int64_t bytes) {
    const std::string share =
        total > 0 ? format_percent(static_cast<double>(bytes) / static_cast<double>(total)) : "-";
    table.add_row({name, format_gib(bytes), share});
  };
  row("CUDA context", b.cuda_context);
  row("workspaces", b.workspaces);
  row("parameters", b.parameters);
  row("gradients", b.gradients);
  row("optimizer states", b.optimizer_states);
  row("master weights", b.master_weights);
  row("ZeRO buffers", b.zero_buffers);
  row("activations", b.activations);
  row("transient", b.transient);
  row("allocator slack", b.allocator);
  if (b.vllm > 0) row("vLLM (colocated)", b.vllm);
  row("total", total);
  table.add_row({"peak allocated", format_gib(p.peak_allocated), ""});
  table.add_row({"peak reserved", format_gib(p.peak_reserved), ""});
  std::string out = table.render();
  if (b.paged_optimizer_states > 0) {
    out += "  plus " + format_gib(b.paged_optimizer_states) +
           " of paged optimizer states in unified memory (outside the caching allocator; moved to host RAM when "
           "the GPU runs short, slower but no out-of-memory)\n";
    if (p.time.paged_migration_ms > 0) {
      out += "  they do not fit in the " + format_gib(std::max<int64_t>(0, p.gpu_capacity - p.gpu_total)) +
             " the run leaves free: every step moves them in and out over the host link (" +
             format_ms(p.time.paged_migration_ms) + ")\n";
    }
  }
  return out;
}

std::string peak_line(const planner::Prediction& p) {
  if (p.where.block < 0) {
    return "The peak happens during the " +
           (p.where.phase.empty() ? "optimizer step" : p.where.phase) + ".";
  }
  const std::string name =
      p.where.block_name.empty() ? "block " + std::to_string(p.where.block) : p.where.block_name;
  return "The peak happens during " + (p.where.phase.empty() ? "the step" : p.where.phase) +
         ", in " + name + " (block " + std::to_string(p.where.block) + ").";
}

std::string resources_text(const planner::Prediction& p, int checkpoints_kept) {
  std::string out = "Host RAM: " + format_gib(p.host_ram) + " needed of " +
                    format_gib(p.host_ram_budget) + " (" + budget_word(p.fits_host, p.host_over_assumed()) + ")\n";
  out += "Disk: " + format_gb(p.disk) + " needed of " + format_gb(p.disk_budget) + " (" +
         budget_word(p.fits_disk, p.disk_over_assumed()) + ")";
  if (p.checkpoint_bytes > 0) {
    const int64_t copies = checkpoints_kept + 1;
    out += ": " + plural(copies, "training-state checkpoint", "training-state checkpoints") +
           " of " + format_gb(p.checkpoint_bytes) + " (" + std::to_string(checkpoints_kept) +
           " kept + 1 being written)";
    const int64_t swap = p.disk - copies * p.checkpoint_bytes;
    if (swap > 0) out += " + " + format_gb(swap) + " NVMe offload";
  }
  return out + "\n";
}

std::string time_text(const planner::Prediction& p) {
  const planner::TimeBreakdown& t = p.time;
  std::vector<std::string> parts;
  auto part = [&](const std::string& name, double ms) {
    if (ms > 0) parts.push_back(name + " " + format_ms(ms));
  };
  part("forward", t.forward_ms);
  part("backward", t.backward_ms);
  part("recompute", t.recompute_ms);
  part("exposed activation offload", t.offload_exposed_ms);
  part("exposed communication", t.comm_exposed_ms);
  if (t.paged_migration_ms > 0) {
    parts.push_back("optimizer " + format_ms(t.optimizer_ms) + ", of which paging optimizer states " +
                    format_ms(t.paged_migration_ms));
  } else {
    part("optimizer", t.optimizer_ms);
  }
  std::string out = "Time: " + format_ms(t.step_ms) + " per optimizer step";
  if (!parts.empty()) out += " (" + join(parts, ", ") + ")";
  out += "\nThroughput: " + fixed(t.samples_per_s, 2) + " samples/s, " +
         group_thousands(static_cast<int64_t>(t.tokens_per_s)) + " tokens/s, MFU " +
         format_percent(t.mfu) + "\n";
  return out;
}

std::string plan_summary(const planner::Plan& plan) {
  std::string out = "  " + globals_line(plan.config, plan.settings.world_size()) + "\n";
  out += "  " + block_choice_line(plan, BlockChoice::kCheckpoint) + "\n";
  out += "  " + block_choice_line(plan, BlockChoice::kOffload) + "\n";
  out += "  " + budget_line(plan.prediction) + "\n";
  out += "  " + throughput_line(plan.prediction) + "\n";
  return out;
}

std::string frontier_table(const std::vector<planner::FrontierPoint>& frontier) {
  TextTable table({"GPU peak", "per sample", "ZeRO", "opt offload", "param offload", "micro-batch",
                   "accum", "checkpointed", "offloaded"});
  const size_t shown = std::min(frontier.size(), kMaxFrontierRows);
  for (size_t i = 0; i < shown; ++i) {
    const planner::FrontierPoint& point = frontier[i];
    table.add_row({format_gib(point.gpu_total), format_ms(point.sample_ms),
                   std::to_string(point.config.zero_stage),
                   std::string(planner::offload_name(point.config.offload_optimizer)),
                   std::string(planner::offload_name(point.config.offload_param)),
                   std::to_string(point.config.micro_batch),
                   std::to_string(point.config.grad_accum), std::to_string(point.checkpointed),
                   std::to_string(point.offloaded)});
  }
  std::string out = table.render();
  if (frontier.size() > shown) {
    out += "  ... and " + std::to_string(frontier.size() - shown) + " more (see --json)\n";
  }
  return out;
}

std::string suggestions_text(const std::vector<planner::Suggestion>& suggestions) {
  if (suggestions.empty()) return "  (no change the planner knows of makes it fit)\n";
  std::string out;
  for (const planner::Suggestion& s : suggestions) {
    out += "  - " + s.change;
    // A suggestion without a prediction (e.g. "the longest sequence that fits")
    // carries no numbers; printing zeros would read as a 0 GiB peak.
    if (s.gpu_budget > 0) {
      out += ": peak " + format_gib(s.gpu_total) + " of " + format_gib(s.gpu_budget) + " budget";
      if (s.sample_ms > 0) out += ", " + format_ms(s.sample_ms) + " per sample";
    }
    out += "\n";
    if (!s.detail.empty()) out += "      " + s.detail + "\n";
  }
  return out;
}

// What the search could change, and how to change that.
std::string space_text(const planner::PlanResult& result) {
  const planner::Stack stack = result.best.settings.stack;
  if (!result.space_is_stack) return "Searched: " + result.space + " (--may-change)\n";
  if (stack == planner::Stack::kUnspecified || stack == planner::Stack::kTorchAmp) {
    return "Searched: " + result.space +
           " (what headroom's --emit torch applies; name the stack with --stack to search what it changes "
           "without editing the training code)\n";
  }
  return "Searched: " + result.space + " (what the " + std::string(planner::stack_name(stack)) +
         " stack changes without editing the training code; --may-change widens or narrows it)\n";
}

std::string fit_report_body(const planner::FitAnswer& answer, std::string_view gpu_name);
std::string plan_report_body(const planner::PlanResult& result, std::string_view gpu_name);

std::string warnings_text(const std::vector<std::string>& warnings) {
  if (warnings.empty()) return "";
  std::string out = "\nNotes:\n";
  for (const std::string& warning : warnings) out += "  - " + warning + "\n";
  return out;
}

std::string fit_report(const planner::FitAnswer& answer, std::string_view gpu_name) {
  return fit_report_body(answer, gpu_name) + warnings_text(answer.warnings);
}

std::string fit_report_body(const planner::FitAnswer& answer, std::string_view gpu_name) {
  const planner::Plan& given = answer.as_given;
  std::string out = run_line(given) + "\n";
  out += verdict_line(given.prediction, gpu_name, given.settings.safety_margin) + "\n";
  // Open mechanisms that change this run by less than the report shows (e.g. no LM
  // loss, or a tiny model) leave no band to show: "0.4 GiB to 0.4 GiB" says nothing.
  const std::string bottom = format_gib(given.prediction.gpu_total_bottom);
  const std::string top = format_gib(given.prediction.gpu_total);
  if (bottom != top) {
    out += "Band: " + bottom + " to " + top +
           " (the verdict and any plan use the top); open: " + join(given.prediction.band_unknowns, "; ") + "\n";
  }
  out += "\n";
  out += "The run as given:\n" + plan_summary(given) + "\n";
  out += prediction_section(given);
  if (answer.fits) return out;

  const planner::PlanResult& alt = answer.alternative;
  if (alt.found) {
    out += "\nThe fastest plan that fits (" + std::to_string(alt.configs_evaluated) +
           " configurations evaluated; `headroom plan` for details):\n" + plan_summary(alt.best) + space_text(alt);
  } else if (has_best(alt)) {
    out += only_host_or_disk_short(alt)
               ? "\n" + no_fit_heading(alt) + plan_summary(alt.best)
               : "\nNo plan fits within the budgets. The least-memory plan:\n" + plan_summary(alt.best);
    out += "\nWhat would make it fit:\n" + suggestions_text(alt.suggestions);
  } else {
    out += "\nNo plan fits, " + widest_search_text() + "; what would make it fit:\n" +
           suggestions_text(alt.suggestions);
  }
  return out;
}

std::string plan_report(const planner::PlanResult& result, std::string_view gpu_name) {
  return plan_report_body(result, gpu_name) + warnings_text(result.warnings);
}

std::string plan_report_body(const planner::PlanResult& result, std::string_view gpu_name) {
  const planner::Plan& best = result.best;
  std::string out;
  if (has_best(result)) {
    out += run_line(best) + "\n" + plan_verdict(result, gpu_name) + "\n\n";
    out += result.found ? "The fastest plan that fits:\n" : no_fit_heading(result);
    out += plan_summary(best) + "\n" + prediction_section(best) + "\n";
  } else {
    out += plan_verdict(result, gpu_name) + "\n\n";
  }
  out += space_text(result);
  if (result.found && !result.alternatives.empty()) {
    out += "Faster beyond that space:\n" + suggestions_text(result.alternatives);
  }
  out += "\nMemory/time frontier (" + std::to_string(result.configs_evaluated) +
         " configurations evaluated):\n";
  out += result.frontier.empty() ? "  (empty)\n" : frontier_table(result.frontier);
  // Both hold for this model, GPU and stack, within the space searched.
  const std::string within = "within the space searched";
  const std::string at_seq = has_best(result) ? " at sequence " + std::to_string(best.seq_len) : "";
  out += "\nLargest micro-batch that fits" + at_seq + ", " + within + ": " + (result.max_micro_batch > 0 ? std::to_string(result.max_micro_batch) : "none") + "\n";
  out += "Largest sequence length that fits at micro-batch 1, " + within + ": " +
         (result.max_seq_len > 0 ? std::to_string(result.max_seq_len) : "none") + "\n";
  if (!result.found) out += "\nWhat would make it fit:\n" + suggestions_text(result.suggestions);
  return out;
}

nlohmann::json config_to_json(const planner::GlobalConfig& config) {
  return {{"zero_stage", config.zero_stage},
          {"offload_optimizer", planner::offload_name(config.offload_optimizer)},
          {"offload_param", planner::offload_name(config.offload_param)},
          {"micro_batch", config.micro_batch},
          {"grad_accum", config.grad_accum}};
}

nlohmann::json frontier_point_to_json(const planner::FrontierPoint& point) {
  return {{"gpu_total_bytes", point.gpu_total},
          {"sample_ms", point.sample_ms},
          {"config", config_to_json(point.config)},
          {"checkpointed_blocks", point.checkpointed},
          {"offloaded_blocks", point.offloaded}};
}

nlohmann::json suggestion_to_json(const planner::Suggestion& suggestion) {
  return {{"change", suggestion.change},
          {"detail", suggestion.detail},
          {"gpu_total_bytes", suggestion.gpu_total},
          {"gpu_budget_bytes", suggestion.gpu_budget},
          {"sample_ms", suggestion.sample_ms}};
}

nlohmann::json plan_result_to_json(const planner::PlanResult& result) {
  nlohmann::json frontier = nlohmann::json::array();
  for (const auto& point : result.frontier) frontier.push_back(frontier_point_to_json(point));
  nlohmann::json suggestions = nlohmann::json::array();
  for (const auto& s : result.suggestions) suggestions.push_back(suggestion_to_json(s));
  nlohmann::json alternatives = nlohmann::json::array();
  for (const auto& s : result.alternatives) alternatives.push_back(suggestion_to_json(s));
  return {{"found", result.found},
          {"best", has_best(result) ? planner::plan_to_json(result.best) : nlohmann::json(nullptr)},
          {"best_sample_ms", sample_ms(result.best.prediction)},
          {"frontier", frontier},
          {"max_micro_batch", result.max_micro_batch},
          {"max_seq_len", result.max_seq_len},
          {"suggestions", suggestions},
          {"space", result.space},
          {"space_is_stack", result.space_is_stack},
          {"alternatives", alternatives},
          {"short_of", result.short_of},
          {"configs_evaluated", result.configs_evaluated},
          {"warnings", result.warnings}};
}

nlohmann::json fit_to_json(const planner::FitAnswer& answer, const planner::GpuSpec& gpu) {
  const planner::Prediction& p = answer.as_given.prediction;
  return {{"command", "fit"},
          {"gpu", gpu_to_json(gpu)},
          {"fits", answer.fits},
          {"tight", p.tight()},
          {"fits_gpu", p.fits_gpu},
          {"fits_host", p.fits_host},
          {"fits_disk", p.fits_disk},
          {"verdict", verdict_line(p, gpu.name, answer.as_given.settings.safety_margin)},
          {"gpu_margin_bytes", p.gpu_margin()},
          {"as_given", planner::plan_to_json(answer.as_given)},
          {"alternative",
           answer.fits ? nlohmann::json(nullptr) : plan_result_to_json(answer.alternative)},
          {"warnings", answer.warnings}};
}

nlohmann::json plan_document_to_json(const planner::PlanResult& result,
                                     const planner::GpuSpec& gpu) {
  nlohmann::json document = {
      {"command", "plan"}, {"gpu", gpu_to_json(gpu)}, {"verdict", plan_verdict(result, gpu.name)}};
  document.update(plan_result_to_json(result));
  return document;
}

}  // namespace headroom::reports
