// The simulator against the planner's block-level walk, and its own invariants.
#include <doctest/doctest.h>

#include "planner/simulator.h"

namespace headroom::planner {
namespace {

struct Case {
  const char* model;
  TrainMode mode;
  CheckpointPolicy checkpointing;
  int64_t micro_batch;
  int64_t grad_accum;
  int zero;
  Offload offload;
};

struct Compared {
  Prediction prediction;
  Simulation simulation;
};

Compared compare(const Case& c) {
  RunSettings settings;
  settings.model = c.model;
  settings.mode = c.mode;
  settings.checkpointing = c.checkpointing;
  settings.micro_batch = c.micro_batch;
  settings.grad_accum = c.grad_accum;
  settings.zero_stage = c.zero;
  settings.offload_optimizer = c.offload;
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  Compared out;
  out.prediction = predict(context.value(), settings, user_config(settings), choices.value());
  out.simulation = simulate(context.value(), settings, user_config(settings), choices.value());
  return out;
}

}  // namespace

TEST_CASE("simulator and planner agree on the peak") {
  const Case cases[] = {
      {"gpt2", TrainMode::kFull, CheckpointPolicy::kNone, 4, 1, 0, Offload::kNone},
      {"gpt2", TrainMode::kFull, CheckpointPolicy::kEveryBlock, 8, 2, 0, Offload::kNone},
      {"llama-3-8b", TrainMode::kLora, CheckpointPolicy::kNone, 1, 1, 0, Offload::kNone},
      {"llama-3-8b", TrainMode::kQlora, CheckpointPolicy::kEveryBlock, 2, 1, 0, Offload::kNone},
      {"llama-3-8b", TrainMode::kFull, CheckpointPolicy::kEveryBlock, 1, 1, 2, Offload::kCpu},
      {"flux-kontext-dev", TrainMode::kLora, CheckpointPolicy::kEveryBlock, 1, 1, 0, Offload::kNone},
      {"bert-large-uncased", TrainMode::kFull, CheckpointPolicy::kNone, 16, 1, 0, Offload::kNone},
      {"vit-b-16", TrainMode::kFull, CheckpointPolicy::kNone, 64, 1, 0, Offload::kNone},
  };
  for (const Case& c : cases) {
    const Compared r = compare(c);
    const double planner = static_cast<double>(r.prediction.peak_allocated);
    const double simulated = static_cast<double>(r.simulation.peak_allocated);
    MESSAGE(c.model << " mb " << c.micro_batch << ": allocated planner " << planner / (1 << 30) << " GiB, simulator "
                    << simulated / (1 << 30) << " GiB; reserved planner " << r.prediction.peak_reserved / double(1 << 30)
                    << " simulator " << r.simulation.peak_reserved / double(1 << 30) << " at " << r.simulation.peak_label
                    << "; step " << r.prediction.time.step_ms << " vs " << r.simulation.time.step_ms << " ms");
    CHECK(simulated == doctest::Approx(planner).epsilon(0.03));
    CHECK(r.simulation.time.step_ms == doctest::Approx(r.prediction.time.step_ms).epsilon(0.05));
    CHECK(r.simulation.peak_reserved >= r.simulation.peak_allocated);
  }
}

}  // namespace headroom::planner
