// The HTML report: every chart present with units and legends, names escaped,
// numbers in GiB, big plans and long simulations bounded in size. The
// measurement format is tested in measurement_test.cc.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "reports/measured_run.h"
#include "reports/report_html.h"
#include "reports/report_plan_sections.h"

namespace headroom::reports {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

planner::Plan hand_made_plan(int blocks) {
  planner::Plan plan;
  plan.model = "toy<script>alert(1)</script>";
  plan.gpu = "a6000";
  plan.seq_len = 2048;
  for (int b = 0; b < blocks; ++b) {
    plan.block_names.push_back("model.layers." + std::to_string(b));
    plan.blocks.push_back(b % 3 == 0 ? planner::BlockChoice::kCheckpoint
                          : b % 3 == 1 ? planner::BlockChoice::kKeep
                                       : planner::BlockChoice::kOffload);
  }
  planner::Prediction& p = plan.prediction;
  p.peak.cuda_context = kGiB / 2;
  p.peak.parameters = 40 * kGiB;
  p.peak.activations = 3 * kGiB;
  p.gpu_total = p.peak.total();
  p.gpu_capacity = 48 * kGiB;
  p.gpu_budget = 45 * kGiB;
  p.fits_gpu = p.fits_host = p.fits_disk = true;
  p.peak_allocated = 43 * kGiB;
  p.peak_reserved = 43 * kGiB + kGiB / 2;
  p.time.step_ms = 1000;
  return plan;
}

planner::Simulation hand_made_simulation() {
  planner::Simulation s;
  for (int i = 0; i <= 100; ++i) {
    const int64_t allocated = (40 + i % 4) * kGiB;
    s.memory.push_back({i * 10.0, allocated, allocated + kGiB / 4, "forward x"});
  }
  s.peak_allocated = 43 * kGiB;
  s.peak_reserved = 43 * kGiB + kGiB / 4;
  s.peak_time_ms = 30;
  s.peak_label = "backward <layer 3>";
  s.time.step_ms = 1000;
  for (int i = 0; i < 20; ++i) {
    s.events.push_back({planner::Stream::kCompute, i < 10 ? planner::Phase::kForward : planner::Phase::kBackward,
                        i * 50.0, i * 50.0 + 40, 0, i, "op " + std::to_string(i), 0, 1e9});
  }
  s.events.push_back({planner::Stream::kCopyOut, planner::Phase::kOffload, 100, 180, 0, 2, "offload", 1 << 20, 0});
  return s;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// The <svg id=...> element of one chart.
std::string chart(const std::string& html, const std::string& id) {
  const size_t begin = html.find("<svg id=\"" + id + "\"");
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</svg>", begin) - begin);
}

// The points="x,y x,y ..." lists of the chart's polylines, in order.
std::vector<std::string> polylines(const std::string& svg) {
  std::vector<std::string> lists;
  const std::string key = "points=\"";
  for (size_t at = svg.find(key); at != std::string::npos; at = svg.find(key, at + 1)) {
    const size_t begin = at + key.size();
    lists.push_back(svg.substr(begin, svg.find('"', begin) - begin));
  }
  return lists;
}

std::vector<size_t> polyline_points(const std::string& svg) {
  std::vector<size_t> counts;
  for (const std::string& list : polylines(svg)) counts.push_back(count(list, ","));
  return counts;
}

ReportInput plan_only(const planner::Plan& plan) {
  ReportInput input;
  input.plan = &plan;
  input.gpu_name = "NVIDIA RTX A6000";
  return input;
}

}  // namespace

TEST_CASE("the report holds every chart with units, legends and block names") {
  const planner::Plan plan = hand_made_plan(12);
  const planner::Simulation simulation = hand_made_simulation();
  std::vector<planner::FrontierPoint> frontier = {{30 * kGiB, 1300, {}, 12, 0}, {44 * kGiB, 1000, {}, 4, 4}};
  MeasuredRun measured;
  measured.device = "NVIDIA RTX A6000";
  measured.steps = {{1, 42 * kGiB, 44 * kGiB, 1100, 2.0}, {2, 42 * kGiB, 44 * kGiB, 1050, 1.9}};
  ReportInput input;
  input.plan = &plan;
  input.simulation = &simulation;
  input.frontier = &frontier;
  input.measurement = &measured;
  input.gpu_name = "NVIDIA RTX A6000";
  input.generated_by = "test";
  const std::string html = render_html_report(input);
  for (const char* id : {"chart-breakdown", "chart-memory", "chart-frontier", "chart-blocks", "chart-timeline"}) {
    CHECK_MESSAGE(contains(html, std::string("<svg id=\"") + id + "\""), id);
  }
  CHECK(contains(html, "(GiB)"));
  CHECK(contains(html, "time in the step (ms)"));
  CHECK(contains(html, "time per sample (ms)"));
  CHECK(contains(html, "class=\"legend\""));
  CHECK(contains(html, "model.layers.11"));
  CHECK(contains(html, "checkpoint"));
  CHECK(contains(html, "offload activations"));
  CHECK(contains(html, "40.0"));  // parameters in GiB
  CHECK(contains(html, "Predicted vs measured"));
  CHECK(contains(html, "-1.1%"));  // reserved: 43.5 GiB predicted vs 44 GiB measured
  CHECK(contains(html, "-4.8%"));  // step: 1000 ms predicted vs 1050 ms measured (median after warm-up)
  // Names are escaped, never markup.
  CHECK_FALSE(contains(html, "<script>"));
  CHECK(contains(html, "toy&lt;script&gt;"));
  CHECK(contains(html, "backward &lt;layer 3&gt;"));
  CHECK_FALSE(contains(html, "<script"));
}

TEST_CASE("a 1024-block plan renders within a bounded size") {
  const planner::Plan plan = hand_made_plan(1024);
  const std::string html = render_html_report(plan_only(plan));
  CHECK(html.size() < 5'000'000);
  CHECK(contains(html, "model.layers.1023"));
  // 64 blocks a row, names in tooltips and the table, not under the cells.
  CHECK(contains(chart(html, "chart-blocks"), "blocks 960-1023"));
  CHECK(count(chart(html, "chart-blocks"), "<rect") == 1024 + 1);  // + the plot background
  CHECK_FALSE(contains(html, "class=\"name\""));
}

TEST_CASE("the breakdown is in GiB: table, verdict and chart agree") {
  const planner::Plan plan = hand_made_plan(4);  // 0.5 + 40 + 3 GiB, budget 45 of 48 GiB
  const std::string html = render_html_report(plan_only(plan));
  CHECK(contains(html, "<td>CUDA context</td><td>0.5</td>"));
  CHECK(contains(html, "<td>parameters</td><td>40.0</td>"));
  CHECK(contains(html, "<td>activations</td><td>3.0</td>"));
  CHECK(contains(html, "<td>total</td><td>43.5</td>"));
  CHECK(contains(html, "FITS: peak 43.5 GiB of 45.0 GiB budget (GPU 48.0 GiB"));
  const std::string breakdown = chart(html, "chart-breakdown");
  CHECK(contains(breakdown, "GPU memory per GPU at the peak (GiB)"));
  CHECK(contains(breakdown, "parameters: 40.0 GiB"));
  CHECK(contains(breakdown, "budget 45.0 GiB"));
  CHECK(contains(breakdown, "GPU 48.0 GiB"));
  // Without a simulation, frontier or measurement those sections are left out.
  CHECK_FALSE(contains(html, "chart-memory"));
  CHECK_FALSE(contains(html, "chart-frontier"));
  CHECK_FALSE(contains(html, "chart-timeline"));
  CHECK_FALSE(contains(html, "Predicted vs measured"));
}

TEST_CASE("a Flux-sized chain names every block under its cell") {
  planner::Plan plan = hand_made_plan(60);
  plan.block_names[59] = "a_block_name_far_longer_than_anything_shown_under_a_cell";
  const std::string blocks = chart(render_html_report(plan_only(plan)), "chart-blocks");
  CHECK(count(blocks, "class=\"name\"") == 60);
  CHECK(contains(blocks, "class=\"name\">model.layers.0<title>"));
  CHECK(contains(blocks, "class=\"name\">model.layers.58<title>"));
  // Long names are cut under the cell and whole in the tooltip.
  CHECK(contains(blocks, "a_block_name_far_longer_than_anything...<title>"));
  CHECK(contains(blocks, "<title>a_block_name_far_longer_than_anything_shown_under_a_cell: offload</title>"));
}

TEST_CASE("a custom title is escaped") {
  const planner::Plan plan = hand_made_plan(2);
  ReportInput input = plan_only(plan);
  input.title = "Run <b>7</b> & co";
  const std::string html = render_html_report(input);
  CHECK(contains(html, "<title>Run &lt;b&gt;7&lt;/b&gt; &amp; co</title>"));
  CHECK(contains(html, "<h1>Run &lt;b&gt;7&lt;/b&gt; &amp; co</h1>"));
}

TEST_CASE("the frontier is a step line and the measured curve is overlaid") {
  const planner::Plan plan = hand_made_plan(4);
  const planner::Simulation simulation = hand_made_simulation();
  const std::vector<planner::FrontierPoint> frontier = {{30 * kGiB, 1300, {}, 4, 0}, {44 * kGiB, 1000, {}, 0, 0}};
  MeasuredRun measured;
  measured.steps = {{1, 42 * kGiB, 44 * kGiB, 1100, 2.0}};
  measured.memory = {{0, 20 * kGiB, 21 * kGiB}, {500, 42 * kGiB, 44 * kGiB}, {1000, 20 * kGiB, 44 * kGiB}};
  ReportInput input = plan_only(plan);
  input.simulation = &simulation;
  input.frontier = &frontier;
  input.measurement = &measured;
  const std::string html = render_html_report(input);
  // (30, 1300) -> (44, 1300) -> (44, 1000)
  CHECK(polyline_points(chart(html, "chart-frontier")) == std::vector<size_t>{3});
  const std::string memory = chart(html, "chart-memory");
  CHECK(polyline_points(memory) == std::vector<size_t>{101, 101, 3, 3});  // predicted, then measured
  CHECK(contains(memory, "allocated (measured)"));
  CHECK(contains(memory, "reserved (measured)"));
  CHECK(contains(memory, "measured peak allocated 42.0 GiB"));
  CHECK(contains(memory, "measured peak reserved 44.0 GiB"));
  CHECK(contains(memory, "peak 43.0 GiB at backward &lt;layer 3&gt;"));
}

TEST_CASE("a long simulation is thinned: curves to the pixels, at most 5000 timeline rectangles") {
  const planner::Plan plan = hand_made_plan(1024);
  planner::Simulation s;
  const int samples = 400'000;
  for (int i = 0; i < samples; ++i) {
    const int64_t allocated = (10 + (int64_t{i} * 7919) % 30) * kGiB;  // jumps between 10 and 39 GiB
    s.memory.push_back({i * 0.01, allocated, allocated + kGiB, ""});
  }
  s.memory[123'457].allocated = 41 * kGiB;  // one spike: thinning must keep it
  s.memory[123'457].reserved = 42 * kGiB;
  s.peak_allocated = 41 * kGiB;
  s.peak_reserved = 42 * kGiB;
  s.time.step_ms = samples * 0.01;
  for (int i = 0; i < 100'000; ++i) {  // alternating phases: nothing merges
    const planner::Phase phase = i % 2 ? planner::Phase::kForward : planner::Phase::kRecompute;
    s.events.push_back({planner::Stream::kCompute, phase, i * 0.04, i * 0.04 + 0.03, 0, i % 1024, "op", 0, 0});
    s.events.push_back({planner::Stream::kCopyIn, planner::Phase::kOffload, i * 0.04, i * 0.04 + 0.01, 0, 0, "in", 0, 0});
  }
  ReportInput input = plan_only(plan);
  input.simulation = &s;
  const std::string html = render_html_report(input);
  CHECK(html.size() < 5'000'000);
  const std::string memory = chart(html, "chart-memory");
  for (size_t points : polyline_points(memory)) CHECK(points <= 4 * 1010 + 4);
  const std::string timeline = chart(html, "chart-timeline");
  CHECK(count(timeline, "<rect") <= 5000 + 1);
  CHECK(contains(timeline, ": in and 99999 more</title>"));  // copy-in events merged below a pixel, still drawn
  CHECK(contains(html, "further events are not drawn"));
  // The spike survives thinning: its y is the highest point drawn (smallest pixel y).
  double top_pixel = 1e9;
  const std::string reserved = polylines(memory).at(0);
  for (size_t comma = reserved.find(','); comma != std::string::npos; comma = reserved.find(',', comma + 1)) {
    top_pixel = std::min(top_pixel, std::stod(reserved.substr(comma + 1)));
  }
  // y axis 0..1.1 x the budget line (45 GiB - 0.5 GiB context), plot from pixel 30
  // to 380 - 48 = 332: the 42 GiB spike sits at 332 - 42 / 48.95 * 302.
  CHECK(top_pixel == doctest::Approx(332 - 42 / (44.5 * 1.1) * 302).epsilon(0.002));
}

TEST_CASE("the report puts the file's run beside the fastest plan, with every assumption and what to apply") {
  const planner::Plan plan = hand_made_plan(6);
  planner::Plan fastest = hand_made_plan(6);
  fastest.config.zero_stage = 3;
  fastest.config.offload_param = planner::Offload::kCpu;
  fastest.prediction.gpu_total = 30 * kGiB;
  planner::Prediction& top = const_cast<planner::Plan&>(plan).prediction;
  top.gpu_total_bottom = 40 * kGiB;
  top.band_unknowns = {"whether the model output is kept through backward (give --stack or --loss)"};
  const std::vector<planner::FrontierPoint> frontier = {{30 * kGiB, 1300, {}, 4, 0}, {44 * kGiB, 1000, {}, 0, 0}};
  ReportInput input;
  input.plan = &plan;
  input.fastest = &fastest;
  input.frontier = &frontier;
  input.space = "gradient checkpointing of every block or none";
  planner::Suggestion wider;
  wider.change = "--may-change all";
  wider.gpu_total = 33 * kGiB;
  wider.sample_ms = 800;
  input.alternatives = {wider};
  input.assumptions = {"host RAM budget assumed to be 128 GiB per node (give --host-ram)"};
  input.gpu_name = "NVIDIA RTX A6000";
  const std::string html = render_html_report(input);
  CHECK(contains(html, "<th>this plan file</th><th>fastest plan found</th>"));
  CHECK(contains(html, "<td>30.0 GiB (45.0 GiB)</td>"));  // the fastest plan's peak beside the file's
  CHECK(contains(html, "Searched: gradient checkpointing of every block or none."));
  CHECK(contains(html, "<code>--may-change all</code>: peak 33.0 GiB"));
  CHECK(contains(html, "Band: 40.0 GiB to 43.5 GiB"));
  CHECK(contains(html, "host RAM budget assumed to be 128 GiB per node"));
  // What to apply is the fastest plan's: its flags, DeepSpeed config and wrappers.
  CHECK(contains(html, "--zero 3 --offload-optimizer none --offload-param cpu"));
  CHECK(contains(html, "--checkpoint-blocks model.layers.0,model.layers.3"));
  CHECK(contains(html, "--offload-blocks model.layers.2,model.layers.5"));
  CHECK(contains(html, "&quot;zero_optimization&quot;"));
  // Frontier points labelled in the chart and in the table.
  CHECK(contains(html, "<table id=\"table-frontier\">"));
  CHECK(contains(html, "<tr><td>B</td><td>44.0 GiB</td>"));
  CHECK(point_label(0) == "A");
  CHECK(point_label(25) == "Z");
  CHECK(point_label(26) == "AA");
}

}  // namespace headroom::reports
