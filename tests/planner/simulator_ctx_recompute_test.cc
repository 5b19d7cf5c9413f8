// A non-reentrant recompute makes the ctx tensors of a block's own autograd Functions
// again beside the first forward's (planner/predict/ctx_recomputed.h): the step walk and
// the allocator simulation price both copies from one list (docs/simulator.md,
// "Agreement with the planner").
#include <doctest/doctest.h>

#include <string>

#include "planner/predict/ctx_recomputed.h"
#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// The oracle's hf-trainer[hf4bnb43]/mixtral-2l/qlora/bf16/non-reentrant/b1s512/tf4-experts:
// bitsandbytes 0.43.1's MatMul4Bit keeps each 4-bit linear's input on ctx.tensors.
RunSettings mixtral_qlora_bnb043() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/mixtral-2l/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kQlora;
  s.lora.rank = 16;
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3"};
  s.lora.dropout = 0.0;
  s.kbit_prep = KbitPrep::kNone;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlock;
  s.optimizer_impl = OptimizerImpl::kForeach;
  s.versions = {{"transformers", "4.44.2"}, {"torch", "2.11.0"}, {"peft", "0.12.0"}, {"accelerate", "0.34.2"},
                {"bitsandbytes", "0.43.1"}};
  return s;
}

}  // namespace

// The walk holds layer 0's 4-bit linears' inputs twice through its recompute and backward
// (the oracle: 2.72 GB at layer 0's backward, workspace aside). The simulator found the
// first forward's copies alive and made none: 2.5% under the walk and the oracle.
TEST_CASE("simulator and walk agree on a non-reentrant recompute's second ctx copies") {
  const RunSettings settings = mixtral_qlora_bnb043();
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  CHECK_FALSE(ctx_recomputed_tensors(context.value(), 1).empty());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  const Prediction walk = predict(context.value(), settings, config, choices.value(), false);
  const Simulation simulation = simulate(context.value(), settings, config, choices.value());
  CHECK(static_cast<double>(simulation.peak_live) == doctest::Approx(walk.peak_allocated).epsilon(0.01));
}

}  // namespace headroom::planner
