// Simulation time of one training step for a 1024-block plan (target: under
// 100 ms on this machine), against the planner's block-level walk of the same
// plan as the in-run baseline. The model is a stack of 1024 GPT layers
// (h = 1024, 16 heads, SDPA, S = 1024, micro-batch 1) with every other block
// checkpointed and every fourth offloaded.
#include <chrono>
#include <cstdio>

#include "models/gpt_stack.h"
#include "planner/predict/simulator.h"
#include "reports/report_html.h"

namespace {

template <typename F>
double best_of_ms(int repeats, F&& f) {
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    const auto end = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(end - start).count());
  }
  return best;
}

}  // namespace

int main() {
  using namespace headroom;
  planner::ModelContext context;
  context.graph = models::build_gpt_layer_stack(1024, 1024, 16, 50304, models::AttentionImpl::kSdpa, 0.0);
  context.analysis = graph::analyze_graph(context.graph);
  context.gpu = planner::find_gpu("h100").value();
  context.seq_len = 1024;
  planner::RunSettings settings;
  settings.gpu = "h100";
  planner::GlobalConfig config;
  std::vector<planner::BlockChoice> choices(context.graph.blocks.size(), planner::BlockChoice::kKeep);
  int checkpointable = 0;
  for (size_t b = 0; b < choices.size(); ++b) {
    if (!context.graph.blocks[b].checkpointable) continue;
    if (checkpointable % 2 == 0) choices[b] = planner::BlockChoice::kCheckpoint;
    if (checkpointable % 4 == 1) choices[b] = planner::BlockChoice::kOffload;
    ++checkpointable;
  }
  std::printf("1024-block plan: %zu blocks, %zu nodes, %zu tensors\n", context.graph.blocks.size(),
              context.graph.nodes.size(), context.graph.tensors.size());
  planner::Prediction prediction;
  const double walk_ms = best_of_ms(3, [&] { prediction = planner::predict(context, settings, config, choices); });
  planner::Simulation simulation;
  planner::SimulatorOptions quiet;
  quiet.record_events = false;
  const double quiet_ms = best_of_ms(3, [&] { simulation = planner::simulate(context, settings, config, choices, quiet); });
  const double full_ms = best_of_ms(3, [&] { simulation = planner::simulate(context, settings, config, choices); });
  // The optimizer makes its states at its first step (torch.optim), so steps are
  // replayed until steady; against one step with the states resident from the start.
  planner::SimulatorOptions one_step = quiet;
  one_step.lazy_optimizer_states = false;
  const double one_step_ms = best_of_ms(3, [&] { planner::simulate(context, settings, config, choices, one_step); });
  std::printf("%-44s %10.1f ms\n", "predict (block walk + simulation, baseline)", walk_ms);
  std::printf("%-44s %10.1f ms  (%.2fx of predict)\n", "simulate, no timeline", quiet_ms, quiet_ms / walk_ms);
  std::printf("%-44s %10.1f ms  (%d steps replayed: %.2fx of one)\n", "simulate, one step, states resident", one_step_ms,
              simulation.steps_simulated, quiet_ms / one_step_ms);
  std::printf("%-44s %10.1f ms  (%.2fx of predict)\n", "simulate, full timeline", full_ms, full_ms / walk_ms);
  // Unpacked batches padded to their longest (shortest_sample): 256 micro-batches
  // of drawn lengths replayed after the steps at seq_len.
  planner::RunSettings varied_settings = settings;
  varied_settings.shortest_sample = 16;
  planner::Simulation varied;
  const double varied_ms =
      best_of_ms(1, [&] { varied = planner::simulate(context, varied_settings, config, choices, quiet); });
  std::printf("%-44s %10.1f ms  (%lld micro-batches: %.2fx of the steps at seq_len; reserved %.2f -> %.2f GiB)\n",
              "simulate, batches of varied length", varied_ms, static_cast<long long>(varied.varied_length_micro_steps),
              varied_ms / quiet_ms, static_cast<double>(simulation.peak_reserved) / (1 << 30),
              static_cast<double>(varied.varied_peak_reserved) / (1 << 30));
  planner::Plan plan;
  plan.model = "gpt-stack-1024";
  plan.settings = settings;
  plan.config = config;
  plan.blocks = choices;
  for (const graph::Block& block : context.graph.blocks) plan.block_names.push_back(block.name);
  plan.seq_len = context.seq_len;
  plan.prediction = prediction;
  std::string html;
  const double report_ms = best_of_ms(3, [&] {
    reports::ReportInput input;
    input.plan = &plan;
    input.simulation = &simulation;
    input.gpu_name = context.gpu.name;
    html = reports::render_html_report(input);
  });
  std::printf("%-44s %10.1f ms  (%.2fx of predict), %zu bytes\n", "HTML report (all charts, full timeline)", report_ms,
              report_ms / walk_ms, html.size());
  std::printf("allocations %lld, timeline events %zu, memory samples %zu, peak allocated %.2f GiB at %s, reserved %.2f GiB\n",
              static_cast<long long>(simulation.allocations), simulation.events.size(), simulation.memory.size(),
              static_cast<double>(simulation.peak_allocated) / (1 << 30), simulation.peak_label.c_str(),
              static_cast<double>(simulation.peak_reserved) / (1 << 30));
  return 0;
}
