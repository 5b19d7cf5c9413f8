#include "reports/report_plan_sections.h"

#include <algorithm>

#include "reports/config_export.h"
#include "reports/fit_report.h"
#include "reports/svg.h"
#include "reports/units.h"

namespace headroom::reports {
namespace {

std::string verdict_of(const planner::Prediction& p) {
  if (p.fits()) return "fits";
  if (p.tight()) return "tight (fits only at the band's bottom)";
  return p.fits_gpu ? "short of host RAM or disk" : "does not fit";
}


int count_of(const planner::Plan& plan, planner::BlockChoice choice) {
  return static_cast<int>(std::count(plan.blocks.begin(), plan.blocks.end(), choice));
}

// One row per quantity, a cell per plan.
std::string comparison_rows(const std::vector<const planner::Plan*>& plans) {
  const auto line = [&](const std::string& name, auto cell) {
    std::vector<std::string> cells = {name};
    for (const planner::Plan* plan : plans) cells.push_back(cell(*plan));
    return html_row(cells);
  };
  using P = const planner::Plan&;
  std::string out;
  out += line("verdict", [](P p) { return verdict_of(p.prediction); });
  out += line("GPU peak (budget)", [](P p) {
    return format_gib(p.prediction.gpu_total) + " (" + format_gib(p.prediction.gpu_budget) + ")";
  });
  out += line("host RAM", [](P p) {
    return format_gib(p.prediction.host_ram) + (p.prediction.host_ram_assumed ? " (budget assumed)" : "");
  });
  out += line("disk", [](P p) { return format_gb(p.prediction.disk) + (p.prediction.disk_assumed ? " (budget assumed)" : ""); });
  out += line("step / per sample", [](P p) { return format_ms(p.prediction.time.step_ms) + " / " + format_ms(sample_ms(p.prediction)); });
  out += line("ZeRO stage", [](P p) { return std::to_string(p.config.zero_stage); });
  out += line("optimizer / parameter offload", [](P p) {
    return std::string(planner::offload_name(p.config.offload_optimizer)) + " / " +
           std::string(planner::offload_name(p.config.offload_param));
  });
  out += line("micro-batch x accumulation", [](P p) {
    return std::to_string(p.config.micro_batch) + " x " + std::to_string(p.config.grad_accum);
  });
  out += line("blocks checkpointed / offloaded", [](P p) {
    return std::to_string(count_of(p, planner::BlockChoice::kCheckpoint)) + " / " +
           std::to_string(count_of(p, planner::BlockChoice::kOffload));
  });
  return out;
}

}  // namespace

std::string html_row(const std::vector<std::string>& cells, bool header) {
  std::string out = "<tr>";
  for (const std::string& cell : cells) {
    out += header ? "<th>" : "<td>";
    out += escape_html(cell);
    out += header ? "</th>" : "</td>";
  }
  return out + "</tr>\n";
}

std::string band_paragraph(const planner::Prediction& p) {
  const std::string bottom = format_gib(p.gpu_total_bottom);
  const std::string top = format_gib(p.gpu_total);
  if (p.band_unknowns.empty() || bottom == top) return "";
  std::string open;
  for (const std::string& unknown : p.band_unknowns) open += (open.empty() ? "" : "; ") + unknown;
  return "<p class=\"band\">Band: " + escape_html(bottom) + " to " + escape_html(top) +
         " (the verdict and any plan use the top); open: " + escape_html(open) + "</p>\n";
}

std::string comparison_section(const planner::Plan& run, const planner::Plan* fastest, const std::string& space,
                               const std::vector<planner::Suggestion>& alternatives) {
  std::string out = "<h2>This run and the fastest plan</h2><table id=\"table-comparison\">\n";
  std::vector<const planner::Plan*> plans = {&run};
  std::vector<std::string> header = {"", "this plan file"};
  if (fastest != nullptr) {
    plans.push_back(fastest);
    header.push_back("fastest plan found");
  }
  out += html_row(header, true) + comparison_rows(plans) + "</table>\n";
  if (fastest == nullptr) out += "<p>No plan fits in the space searched.</p>\n";
  if (!space.empty()) out += "<p>Searched: " + escape_html(space) + ".</p>\n";
  if (!alternatives.empty()) {
    out += "<p>Faster beyond that space:</p><ul>\n";
    for (const planner::Suggestion& s : alternatives) {
      out += "<li><code>" + escape_html(s.change) + "</code>: peak " + escape_html(format_gib(s.gpu_total)) + ", " +
             escape_html(format_ms(s.sample_ms)) + " per sample; " + escape_html(s.detail) + "</li>\n";
    }
    out += "</ul>\n";
  }
  return out;
}

std::string assumptions_section(const std::vector<std::string>& assumptions, const planner::Prediction& p) {
  std::string out = "<h2>Assumptions</h2>\n" + band_paragraph(p);
  if (assumptions.empty()) return out + "<p>None: every budget was given and the speeds are calibrated.</p>\n";
  out += "<ul id=\"list-assumptions\">\n";
  for (const std::string& assumption : assumptions) out += "<li>" + escape_html(assumption) + "</li>\n";
  return out + "</ul>\n";
}

std::string plan_flags(const planner::Plan& plan) {
  const planner::GlobalConfig& c = plan.config;
  std::string out = "--zero " + std::to_string(c.zero_stage) + " --offload-optimizer " +
                    std::string(planner::offload_name(c.offload_optimizer)) + " --offload-param " +
                    std::string(planner::offload_name(c.offload_param)) + " --batch " +
                    std::to_string(c.micro_batch) + " --grad-accum " + std::to_string(c.grad_accum);
  std::string checkpointed;
  std::string offloaded;
  const auto append = [](std::string& list, const std::string& name) { list += (list.empty() ? "" : ",") + name; };
  for (size_t b = 0; b < plan.blocks.size() && b < plan.block_names.size(); ++b) {
    if (plan.blocks[b] == planner::BlockChoice::kCheckpoint) append(checkpointed, plan.block_names[b]);
    if (plan.blocks[b] == planner::BlockChoice::kOffload) append(offloaded, plan.block_names[b]);
  }
  if (!checkpointed.empty()) out += " --checkpoint-blocks " + checkpointed;
  if (!offloaded.empty()) out += " --offload-blocks " + offloaded;
  return out;
}

std::string apply_section(const planner::Plan& plan) {
  std::string out = "<h2>What to apply</h2>\n<p>The flags that give this plan to <code>headroom fit</code>, "
                    "<code>plan</code> and <code>run</code> (beside the model, GPU and run flags):</p>\n";
  out += "<pre id=\"pre-flags\">" + escape_html(plan_flags(plan)) + "</pre>\n";
  out += "<details><summary>DeepSpeed config (<code>--emit deepspeed</code>)</summary><pre>" +
         escape_html(deepspeed_config(plan).dump(2)) + "</pre></details>\n";
  out += "<details><summary>Per-block wrappers for a PyTorch loop (<code>--emit torch</code>)</summary><pre>" +
         escape_html(torch_snippet(plan)) + "</pre></details>\n";
  out += "<p>A recipe's own config (torchtune, the Trainer's arguments, axolotl, LLaMA-Factory, XTuner) is "
         "patched by <code>headroom plan ... --emit KIND=FILE</code> with that config given.</p>\n";
  return out;
}

std::string point_label(size_t index) {
  std::string out;
  size_t n = index + 1;
  while (n > 0) {
    out.insert(out.begin(), static_cast<char>('A' + (n - 1) % 26));
    n = (n - 1) / 26;
  }
  return out;
}

std::string frontier_points_table(const std::vector<planner::FrontierPoint>& frontier) {
  std::string out = "<table id=\"table-frontier\">\n" +
                    html_row({"point", "GPU peak", "per sample", "ZeRO", "optimizer / parameter offload",
                              "micro-batch x accumulation", "checkpointed", "offloaded"},
                             true);
  for (size_t i = 0; i < frontier.size(); ++i) {
    const planner::FrontierPoint& point = frontier[i];
    out += html_row({point_label(i), format_gib(point.gpu_total), format_ms(point.sample_ms),
                     std::to_string(point.config.zero_stage),
                     std::string(planner::offload_name(point.config.offload_optimizer)) + " / " +
                         std::string(planner::offload_name(point.config.offload_param)),
                     std::to_string(point.config.micro_batch) + " x " + std::to_string(point.config.grad_accum),
                     std::to_string(point.checkpointed), std::to_string(point.offloaded)});
  }
  return out + "</table>\n";
}

}  // namespace headroom::reports
