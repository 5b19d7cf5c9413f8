#include "planner/predict/simulator.h"

#include "planner/predict/step_simulator.h"

namespace headroom::planner {

Simulation simulate(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                    const std::vector<BlockChoice>& blocks, const SimulatorOptions& options) {
  StepSimulator simulator(context, settings, config, blocks, options);
  Simulation out = simulator.run();
  if (settings.shortest_sample && *settings.shortest_sample < context.seq_len) {
    StepSimulator varied(context, settings, config, blocks, options);
    const Simulation run = varied.run_varied_lengths();
    out.varied_length_micro_steps = run.varied_length_micro_steps;
    out.varied_peak_reserved = run.varied_peak_reserved;
    out.varied_peak_allocated = run.varied_peak_allocated;
    out.peak_live = std::max(out.peak_live, run.peak_live);
    if (run.out_of_memory && !out.out_of_memory) {
      out.out_of_memory = true;
      out.varied_out_of_memory = true;
      out.out_of_memory_at = run.out_of_memory_at;
    }
  }
  return out;
}

}  // namespace headroom::planner
