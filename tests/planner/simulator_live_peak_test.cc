// The allocator simulation counts allocated memory as torch.cuda does, whole blocks:
// a large-pool block whose remainder would be 1 MiB or less is handed out unsplit
// (CUDACachingAllocator.cpp should_split). The step walk and the meta-device oracle
// count tensors. Simulation::peak_live is the simulation's figure for what they count,
// so that `simulate` can be checked against `fit` mechanism by mechanism
// (bench/oracle/simulator_agreement.py; docs/simulator.md, "Agreement with the planner").
#include <doctest/doctest.h>

#include <string>

#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"
#include "tests/planner/deepspeed_test_support.h"

namespace headroom::planner {
namespace {

RunSettings bert_full_checkpointed() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/bert-base-uncased";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kFull;
  s.micro_batch = 8;
  s.seq_len = 128;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  return s;
}

}  // namespace

// BERT-base, full, b8 s128, every layer checkpointed: the peak is at the word embedding's
// backward (877,476,740 bytes on the oracle, workspace aside). The simulation's blocks held
// 45 MB of unsplit tails there (44 segments), 5.2% above the walk; its live tensors are the
// walk's to the byte.
TEST_CASE("the simulation's live peak is the walk's, its allocated peak adds the unsplit blocks' tails") {
  const RunSettings settings = bert_full_checkpointed();
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  const Prediction walk = predict(context.value(), settings, config, choices.value(), false);
  const Simulation simulation = simulate(context.value(), settings, config, choices.value());
  CHECK(simulation.peak_live == walk.peak_allocated);
  const int64_t allocated = std::max(simulation.peak_allocated, simulation.first_step_peak_allocated);
  CHECK(allocated > simulation.peak_live + 40'000'000);
  // The prediction carries both (fit --json: simulated_peak_live_bytes, simulated_peak_allocated_bytes).
  const Prediction full = predict(context.value(), settings, config, choices.value(), true);
  CHECK(full.simulated_peak_live == simulation.peak_live);
  CHECK(full.simulated_peak_allocated == allocated);
}

// The live peak never exceeds the allocated one: a tail only adds to a live tensor's block.
TEST_CASE("the simulation's live peak is at most its allocated peak") {
  RunSettings settings = bert_full_checkpointed();
  settings.checkpointing = CheckpointPolicy::kNone;
  settings.mode = TrainMode::kLora;
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const Simulation simulation = simulate(context.value(), settings, user_config(settings), choices.value());
  CHECK(simulation.peak_live > 0);
  CHECK(simulation.peak_live <= std::max(simulation.peak_allocated, simulation.first_step_peak_allocated));
}

}  // namespace headroom::planner
