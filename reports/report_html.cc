#include "reports/report_html.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "reports/fit_report.h"
#include "reports/report_plan_sections.h"
#include "reports/svg.h"
#include "reports/units.h"

namespace headroom::reports {
namespace {

constexpr double kGiBf = 1024.0 * 1024.0 * 1024.0;
constexpr int kWidth = 1100;
constexpr size_t kMaxTimelineRects = 5000;

double gib(int64_t bytes) { return static_cast<double>(bytes) / kGiBf; }

const char* choice_color(planner::BlockChoice choice) {
  switch (choice) {
    case planner::BlockChoice::kKeep: return "#4c9be8";
    case planner::BlockChoice::kCheckpoint: return "#f0a030";
    case planner::BlockChoice::kOffload: return "#8a5cc2";
  }
  return "#999";
}

const char* stream_color(planner::Phase phase) {
  switch (phase) {
    case planner::Phase::kForward: return "#4c9be8";
    case planner::Phase::kBackward: return "#2e7d32";
    case planner::Phase::kRecompute: return "#f0a030";
    case planner::Phase::kOptimizer: return "#c62828";
    case planner::Phase::kOffload: return "#8a5cc2";
    case planner::Phase::kComm: return "#00897b";
  }
  return "#999";
}


std::string relative_error(double predicted, double measured) {
  if (measured <= 0) return "";
  return fixed(100.0 * (predicted - measured) / measured, 1) + "%";
}

std::string breakdown_chart(const planner::Prediction& p) {
  const planner::MemoryBreakdown& m = p.peak;
  const std::vector<std::pair<std::string, int64_t>> parts = {
      {"CUDA context", m.cuda_context}, {"workspaces", m.workspaces},     {"parameters", m.parameters},
      {"gradients", m.gradients},       {"optimizer states", m.optimizer_states},
      {"master weights", m.master_weights}, {"ZeRO buffers", m.zero_buffers}, {"activations", m.activations},
      {"transient", m.transient},       {"allocator", m.allocator},      {"vLLM", m.vllm}};
  const char* colors[] = {"#9e9e9e", "#bdbdbd", "#4c9be8", "#2e7d32", "#c62828",
                          "#ef9a9a", "#00897b", "#f0a030", "#ffd54f", "#8a5cc2", "#6d4c41"};
  const double top = std::max({gib(m.total()), gib(p.gpu_capacity)}) * 1.12;
  SvgChart chart("chart-breakdown", kWidth, 190, Axis{0, top, "GPU memory per GPU at the peak (GiB)"}, Axis{0, 1, ""});
  chart.y_categories({"peak"});
  double x = 0;
  std::vector<LegendEntry> legend;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double width = gib(parts[i].second);
    if (width <= 0) continue;
    chart.rect(x, 0.2, x + width, 0.8, colors[i], parts[i].first + ": " + format_gib(parts[i].second));
    x += width;
    legend.push_back({parts[i].first, colors[i], false});
  }
  chart.vline(gib(p.gpu_capacity), "#000", "GPU " + format_gib(p.gpu_capacity), false);
  chart.vline(gib(p.gpu_budget), "#c62828", "budget " + format_gib(p.gpu_budget), true, true);
  chart.legend(legend);
  return chart.render();
}

// The measured curve when the executor recorded one; the per-step peaks always,
// as horizontal lines (the highest step's, which is what an OOM would hit).
void overlay_measurement(SvgChart& chart, const MeasuredRun& measured, std::vector<LegendEntry>& legend) {
  const char* kReserved = "#2e7d32";
  const char* kAllocated = "#00897b";
  if (!measured.memory.empty()) {
    std::vector<std::pair<double, double>> reserved;
    std::vector<std::pair<double, double>> allocated;
    for (const MeasuredSample& m : measured.memory) {
      reserved.emplace_back(m.time_ms, gib(m.reserved));
      allocated.emplace_back(m.time_ms, gib(m.allocated));
    }
    chart.polyline(reserved, kReserved, 2.0, true);
    chart.polyline(allocated, kAllocated, 2.0, true);
    legend.push_back({"reserved (measured)", kReserved, true});
    legend.push_back({"allocated (measured)", kAllocated, true});
  }
  chart.hline(gib(measured.max_peak_reserved()), kReserved, "", true);
  chart.hline(gib(measured.max_peak_allocated()), kAllocated, "", true);
  legend.push_back({"measured peak reserved " + format_gib(measured.max_peak_reserved()), kReserved, true});
  legend.push_back({"measured peak allocated " + format_gib(measured.max_peak_allocated()), kAllocated, true});
}

std::string memory_chart(const planner::Plan& plan, const planner::Simulation& s, const MeasuredRun* measured) {
  double end = std::max(1.0, s.time.step_ms);
  if (!s.memory.empty()) end = std::max(end, s.memory.back().time_ms);
  double top = std::max(gib(s.peak_reserved), gib(plan.prediction.gpu_budget - plan.prediction.peak.cuda_context));
  if (measured) {
    top = std::max(top, gib(measured->max_peak_reserved()));
    for (const MeasuredSample& m : measured->memory) {
      end = std::max(end, m.time_ms);
      top = std::max(top, gib(m.reserved));
    }
  }
  SvgChart chart("chart-memory", kWidth, 380, Axis{0, end, "time in the step (ms)"},
                 Axis{0, top * 1.1, "GPU memory held by PyTorch (GiB, without the CUDA context)"});
  std::vector<std::pair<double, double>> allocated;
  std::vector<std::pair<double, double>> reserved;
  for (const planner::MemorySample& m : s.memory) {
    allocated.emplace_back(m.time_ms, gib(m.allocated));
    reserved.emplace_back(m.time_ms, gib(m.reserved));
  }
  chart.polyline(reserved, "#8a5cc2", 1.5);
  chart.polyline(allocated, "#4c9be8", 1.5);
  std::vector<LegendEntry> legend = {{"reserved (predicted)", "#8a5cc2", false},
                                     {"allocated (predicted)", "#4c9be8", false},
                                     {"budget", "#c62828", true}};
  chart.hline(gib(plan.prediction.gpu_budget - plan.prediction.peak.cuda_context), "#c62828", "budget", true, true);
  chart.marker(s.peak_time_ms, gib(s.peak_allocated), "#c62828",
               "peak " + format_gib(s.peak_allocated) + " at " + s.peak_label);
  if (measured) overlay_measurement(chart, *measured, legend);
  chart.legend(legend);
  return chart.render();
}

std::string frontier_chart(const planner::Plan& plan, const std::vector<planner::FrontierPoint>& frontier) {
  double max_x = gib(plan.prediction.gpu_total);
  double max_y = plan.prediction.time.step_ms;
  for (const planner::FrontierPoint& point : frontier) {
    max_x = std::max(max_x, gib(point.gpu_total));
    max_y = std::max(max_y, point.sample_ms);
  }
  max_x = std::max(max_x, gib(plan.prediction.gpu_capacity));
  SvgChart chart("chart-frontier", kWidth, 340, Axis{0, max_x * 1.08, "peak GPU memory (GiB)"},
                 Axis{0, max_y * 1.15, "time per sample (ms)"});
  // A step line: with more memory than a frontier point needs, its time holds
  // until the next point's memory buys a faster plan.
  std::vector<std::pair<double, double>> line;
  for (const planner::FrontierPoint& point : frontier) {
    if (!line.empty()) line.emplace_back(gib(point.gpu_total), line.back().second);
    line.emplace_back(gib(point.gpu_total), point.sample_ms);
  }
  chart.polyline(line, "#4c9be8", 2.0);
  for (size_t i = 0; i < frontier.size(); ++i) {
    const planner::FrontierPoint& point = frontier[i];
    chart.text(gib(point.gpu_total) + max_x * 0.006, point.sample_ms + max_y * 0.03, point_label(i));
    chart.rect(gib(point.gpu_total) - max_x * 0.003, point.sample_ms - max_y * 0.01, gib(point.gpu_total) + max_x * 0.003,
               point.sample_ms + max_y * 0.01, "#4c9be8",
               "ZeRO-" + std::to_string(point.config.zero_stage) + ", micro-batch " +
                   std::to_string(point.config.micro_batch) + ", " + std::to_string(point.checkpointed) +
                   " checkpointed, " + std::to_string(point.offloaded) + " offloaded: " +
                   format_gib(point.gpu_total) + ", " + format_ms(point.sample_ms) + " per sample");
  }
  chart.marker(gib(plan.prediction.gpu_total), sample_ms(plan.prediction), "#c62828", "chosen plan");
  chart.vline(gib(plan.prediction.gpu_budget), "#c62828", "budget", true, true);
  chart.legend({{"frontier (fastest plan at each memory)", "#4c9be8", false}, {"chosen plan", "#c62828", false}});
  return chart.render();
}

std::string block_name(const planner::Plan& plan, size_t b) {
  return b < plan.block_names.size() && !plan.block_names[b].empty() ? plan.block_names[b] : std::to_string(b);
}

// Up to kNamedBlocks blocks (Flux's 57, an 80-layer Llama) sit in one row with
// their names written under them; longer chains wrap kGridColumns to a row and
// name blocks in tooltips and the table below the chart.
constexpr size_t kNamedBlocks = 96;
constexpr size_t kGridColumns = 64;
constexpr size_t kMaxShownNameChars = 40;

std::string blocks_chart(const planner::Plan& plan) {
  const size_t n = plan.blocks.size();
  const bool named = n <= kNamedBlocks;
  const size_t columns = std::max<size_t>(1, named ? n : kGridColumns);
  const size_t rows = std::max<size_t>(1, (n + columns - 1) / columns);
  std::vector<std::string> shown(named ? n : 0);
  size_t longest = 0;
  for (size_t b = 0; b < shown.size(); ++b) {
    shown[b] = block_name(plan, b);
    if (shown[b].size() > kMaxShownNameChars) shown[b] = shown[b].substr(0, kMaxShownNameChars - 3) + "...";
    longest = std::max(longest, shown[b].size());
  }
  const int name_band = named ? 30 + static_cast<int>(6.0 * static_cast<double>(longest)) : 0;  // ~6 px a char at 10 px
  SvgChart chart("chart-blocks", kWidth, 90 + static_cast<int>(rows) * 22 + name_band,
                 Axis{0, static_cast<double>(columns),
                      named ? "block (execution order)" : "block index within the row (execution order)"},
                 Axis{0, static_cast<double>(rows), ""}, name_band);
  std::vector<std::string> row_names;
  for (size_t r = 0; r < rows; ++r) {
    row_names.push_back("blocks " + std::to_string(r * columns) + "-" + std::to_string(std::min(n, (r + 1) * columns) - 1));
  }
  std::reverse(row_names.begin(), row_names.end());
  chart.y_categories(row_names);
  for (size_t b = 0; b < n; ++b) {
    const double col = static_cast<double>(b % columns);
    const double r = static_cast<double>(rows - 1 - b / columns);
    const std::string tooltip = block_name(plan, b) + ": " + std::string(planner::block_choice_name(plan.blocks[b]));
    chart.rect(col + 0.05, r + 0.1, col + 0.95, r + 0.9, choice_color(plan.blocks[b]), tooltip);
    if (named) chart.rotated_label(col + 0.5, chart.plot_bottom() + 22, shown[b], tooltip);
  }
  chart.legend({{"keep", choice_color(planner::BlockChoice::kKeep), false},
                {"checkpoint", choice_color(planner::BlockChoice::kCheckpoint), false},
                {"offload activations", choice_color(planner::BlockChoice::kOffload), false}});
  return chart.render();
}

std::string timeline_chart(const planner::Simulation& s, size_t& not_drawn) {
  std::vector<const planner::TimelineEvent*> events;
  double end = 0;
  for (const planner::TimelineEvent& e : s.events) {
    if (e.micro_step != 0 && e.phase != planner::Phase::kOptimizer) continue;
    events.push_back(&e);
    end = std::max(end, e.end_ms);
  }
  const std::vector<planner::Stream> streams = {planner::Stream::kCompute, planner::Stream::kCopyOut,
                                                planner::Stream::kCopyIn, planner::Stream::kComm, planner::Stream::kCpu};
  SvgChart chart("chart-timeline", kWidth, 260, Axis{0, std::max(end, 1.0), "time (ms), first micro-step and the optimizer step"},
                 Axis{0, static_cast<double>(streams.size()), ""});
  std::vector<std::string> names;
  for (auto it = streams.rbegin(); it != streams.rend(); ++it) names.emplace_back(planner::stream_name(*it));
  chart.y_categories(names);
  // Thin: events of one phase closer than a pixel merge into one rectangle (its
  // tooltip counts them); each stream draws at most its share of kMaxTimelineRects.
  const double pixel_ms = std::max(end, 1.0) / (kWidth - 90);
  const size_t per_stream = kMaxTimelineRects / streams.size();
  not_drawn = 0;
  for (size_t s_index = 0; s_index < streams.size(); ++s_index) {
    const double r = static_cast<double>(streams.size() - 1 - s_index);
    size_t drawn = 0;
    const planner::TimelineEvent* open = nullptr;
    double open_end = 0;
    size_t merged = 0;
    auto flush = [&] {
      if (!open) return;
      if (drawn == per_stream) {
        not_drawn += merged + 1;
        return;
      }
      chart.rect(open->start_ms, r + 0.15, open_end, r + 0.85, stream_color(open->phase),
                 std::string(planner::phase_name(open->phase)) + ": " + open->label +
                     (merged > 0 ? " and " + std::to_string(merged) + " more" : ""));
      ++drawn;
    };
    for (const planner::TimelineEvent* e : events) {
      if (e->stream != streams[s_index]) continue;
      if (open && e->phase == open->phase && e->start_ms - open_end < pixel_ms) {
        open_end = std::max(open_end, e->end_ms);
        ++merged;
        continue;
      }
      flush();
      open = e;
      open_end = e->end_ms;
      merged = 0;
    }
    flush();
  }
  chart.legend({{"forward", stream_color(planner::Phase::kForward), false},
                {"backward", stream_color(planner::Phase::kBackward), false},
                {"recompute", stream_color(planner::Phase::kRecompute), false},
                {"offload copies", stream_color(planner::Phase::kOffload), false},
                {"collectives", stream_color(planner::Phase::kComm), false},
                {"optimizer", stream_color(planner::Phase::kOptimizer), false}});
  return chart.render();
}

const char* kStyle = R"(body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1160px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}.verdict{font-size:18px;font-weight:600;padding:8px;border-radius:4px}
.fits{background:#e8f5e9}.nofit{background:#ffebee}svg text{font-size:11px}svg .axis{font-size:12px}
svg .mark{font-size:12px;font-weight:600}svg .name{font-size:10px}
svg .mark,svg .lbl{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}details{margin:8px 0}code{font-size:12px}
pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;font-size:12px}.band{color:#555})";

// The verdict, the run's settings and its memory at the peak.
void run_sections(const ReportInput& in, std::ostringstream& html) {
  const planner::Plan& plan = *in.plan;
  const planner::Prediction& p = plan.prediction;
  html << "<p class=\"verdict " << (p.fits() ? "fits\">FITS" : "nofit\">DOES NOT FIT") << ": peak "
       << escape_html(format_gib(p.gpu_total)) << " of " << escape_html(format_gib(p.gpu_budget))
       << " budget (GPU " << escape_html(format_gib(p.gpu_capacity)) << ", "
       << escape_html(format_percent(plan.settings.safety_margin)) << " safety margin)</p>\n";
  html << "<h2>Run</h2><table>\n" << html_row({"setting", "value"}, true);
  html << html_row({"model", plan.model}) << html_row({"GPU", in.gpu_name + " x " + std::to_string(plan.settings.world_size())});
  html << html_row({"stack", std::string(planner::stack_name(plan.settings.stack))});
  html << html_row({"precision", std::string(planner::precision_name(plan.settings.precision))});
  html << html_row({"optimizer", std::string(planner::optimizer_name(plan.settings.optimizer))});
  html << html_row({"training", std::string(planner::mode_name(plan.settings.mode))});
  html << html_row({"sequence length", std::to_string(plan.seq_len)});
  html << "</table>\n";
  html << comparison_section(plan, in.fastest, in.space, in.alternatives);
  html << assumptions_section(in.assumptions, p);
  html << apply_section(in.fastest != nullptr ? *in.fastest : plan);
}

void peak_section(const planner::Plan& plan, std::ostringstream& html) {
  const planner::Prediction& p = plan.prediction;
  html << "<h2>Memory at the peak</h2>\n" << breakdown_chart(p);
  html << "<table>\n" << html_row({"category", "GiB"}, true);
  const planner::MemoryBreakdown& m = p.peak;
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, int64_t>>{
           {"CUDA context", m.cuda_context}, {"workspaces", m.workspaces}, {"parameters", m.parameters},
           {"gradients", m.gradients}, {"optimizer states", m.optimizer_states}, {"master weights", m.master_weights},
           {"ZeRO buffers", m.zero_buffers}, {"activations", m.activations}, {"transient", m.transient},
           {"allocator slack and fragmentation", m.allocator}, {"total", m.total()}}) {
    html << html_row({name, gib_number(bytes)});
  }
  html << "</table><p>Peak during " << escape_html(p.where.phase)
       << (p.where.block_name.empty() ? "" : " of " + escape_html(p.where.block_name)) << ". Host RAM "
       << escape_html(format_gib(p.host_ram)) << " of " << escape_html(format_gib(p.host_ram_budget)) << "; disk "
       << escape_html(format_gb(p.disk)) << " of " << escape_html(format_gb(p.disk_budget)) << ".</p>\n";
}

// The simulated curve, the frontier and the per-block decisions.
void chart_sections(const ReportInput& in, std::ostringstream& html) {
  const planner::Plan& plan = *in.plan;
  if (in.simulation) {
    html << "<h2>Memory over one step</h2>\n" << memory_chart(plan, *in.simulation, in.measurement);
    html << "<p>Simulated on a model of PyTorch's caching allocator: peak allocated "
         << escape_html(format_gib(in.simulation->peak_allocated)) << ", reserved "
         << escape_html(format_gib(in.simulation->peak_reserved))
         << (in.simulation->out_of_memory ? ", OUT OF MEMORY at " + escape_html(in.simulation->out_of_memory_at) : "")
         << ".</p>\n";
  }
  if (in.frontier && !in.frontier->empty()) {
    html << "<h2>Memory / time frontier</h2>\n" << frontier_chart(plan, *in.frontier)
         << frontier_points_table(*in.frontier);
  }
  html << "<h2>Per-block decisions</h2>\n" << blocks_chart(plan);
  html << "<details><summary>All " << plan.blocks.size() << " blocks by name</summary><table>\n"
       << html_row({"#", "block", "decision"}, true);
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    html << html_row({std::to_string(b), block_name(plan, b), std::string(planner::block_choice_name(plan.blocks[b]))});
  }
  html << "</table></details>\n";
  if (in.simulation && !in.simulation->events.empty()) {
    size_t not_drawn = 0;
    html << "<h2>Timeline</h2>\n" << timeline_chart(*in.simulation, not_drawn);
    if (not_drawn > 0) {
      html << "<p>" << not_drawn << " further events are not drawn: each stream shows at most "
           << kMaxTimelineRects / 5 << " rectangles.</p>\n";
    }
  }
}

void time_section(const planner::Plan& plan, std::ostringstream& html) {
  const planner::TimeBreakdown& t = plan.prediction.time;
  html << "<h2>Time per optimizer step</h2><table>\n" << html_row({"part", "ms"}, true);
  for (const auto& [name, ms] : std::vector<std::pair<std::string, double>>{
           {"forward", t.forward_ms}, {"backward", t.backward_ms}, {"recompute", t.recompute_ms},
           {"exposed offload copies", t.offload_exposed_ms}, {"exposed communication", t.comm_exposed_ms},
           {"optimizer", t.optimizer_ms}, {"step", t.step_ms}}) {
    html << html_row({name, fixed(ms, 1)});
  }
  html << "</table><p>" << fixed(t.samples_per_s, 2) << " samples/s, " << group_thousands(static_cast<int64_t>(t.tokens_per_s))
       << " tokens/s, MFU " << escape_html(format_percent(t.mfu)) << ".</p>\n";
}

void measurement_section(const planner::Plan& plan, const MeasuredRun& run, std::ostringstream& html) {
  const planner::Prediction& p = plan.prediction;
  html << "<h2>Predicted vs measured</h2><p>Measured on " << escape_html(run.device) << ", driver "
       << escape_html(run.driver) << ", torch " << escape_html(run.torch_version) << ", " << escape_html(run.date)
       << ".</p><table>\n" << html_row({"quantity", "predicted", "measured", "error"}, true);
  html << html_row({"peak allocated (GiB)", gib_number(p.peak_allocated), gib_number(run.max_peak_allocated()),
               relative_error(static_cast<double>(p.peak_allocated), static_cast<double>(run.max_peak_allocated()))});
  html << html_row({"peak reserved (GiB)", gib_number(p.peak_reserved), gib_number(run.max_peak_reserved()),
               relative_error(static_cast<double>(p.peak_reserved), static_cast<double>(run.max_peak_reserved()))});
  html << html_row({"step time (ms)", fixed(p.time.step_ms, 1), fixed(run.median_step_ms(), 1),
               relative_error(p.time.step_ms, run.median_step_ms())});
  html << "</table>\n";
}

}  // namespace

std::string render_html_report(const ReportInput& in) {
  const planner::Plan& plan = *in.plan;
  const std::string title = in.title.empty() ? "headroom report: " + plan.model + " on " + in.gpu_name : in.title;
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << escape_html(title)
       << "</title><style>" << kStyle << "</style></head><body>\n";
  html << "<h1>" << escape_html(title) << "</h1>\n";
  run_sections(in, html);
  peak_section(plan, html);
  chart_sections(in, html);
  time_section(plan, html);
  if (in.measurement) measurement_section(plan, *in.measurement, html);
  html << "<p><small>" << escape_html(in.generated_by) << ". Sources of every number: docs/memory-model.md.</small></p>\n";
  html << "</body></html>\n";
  return html.str();
}

}  // namespace headroom::reports
