// Optimizer states made at the first step() (torch.optim, bitsandbytes) against
// states made before training (DeepSpeed): the first takes the blocks the freed
// activations left cached, so the steps after it reserve more.
#include <doctest/doctest.h>

#include "planner/memory/model_states.h"
#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"

namespace headroom::planner {
namespace {

// GPT-2 fully fine-tuned in pure bf16 with AdamW, B = 8, S = 1024, no checkpointing.
RunSettings gpt2_full(Stack stack) {
  RunSettings s;
  s.model = "gpt2";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.micro_batch = 8;
  s.seq_len = 1024;
  s.stack = stack;
  return s;
}

struct Run {
  ModelStates states;
  Simulation simulation;  // as the stack makes its states
  Simulation resident;    // the same run with the states resident from the start
  Prediction prediction;
};

Run run(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  Run out;
  out.states = model_states(context->graph, settings, config, Accounting::kAllocated);
  out.simulation = simulate(context.value(), settings, config, choices.value());
  SimulatorOptions resident;
  resident.lazy_optimizer_states = false;
  out.resident = simulate(context.value(), settings, config, choices.value(), resident);
  out.prediction = predict(context.value(), settings, config, choices.value());
  return out;
}

}  // namespace

TEST_CASE("torch.optim's states are made one tensor per state at the first step") {
  const Run r = run(gpt2_full(Stack::kHfTrainer));
  REQUIRE(r.states.states_created_lazily);
  // AdamW: exp_avg and exp_avg_sq for every trainable parameter tensor.
  int64_t trainable_tensors = 0;
  Result<ModelContext> context = prepare_context(gpt2_full(Stack::kHfTrainer));
  REQUIRE(context.is_ok());
  for (const graph::Node& node : context->graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.trainable && param.tied_to.empty() && node.op != "unused") ++trainable_tensors;
    }
  }
  CHECK(static_cast<int64_t>(r.states.state_tensors.size()) == 2 * trainable_tensors);
  // Their rounded sum is the optimizer's whole GPU share (no quantization maps here).
  int64_t rounded = 0;
  for (int64_t tensor : r.states.state_tensors) rounded += account(tensor, Accounting::kAllocated);
  CHECK(rounded == r.states.optimizer);
  // foreach AdamW's temporaries: _foreach_sqrt's list, one tensor per exp_avg_sq.
  REQUIRE(r.states.step_transient_tensors.size() == r.states.state_tensors.size() / 2);
  int64_t temporaries = 0;
  for (int64_t tensor : r.states.step_transient_tensors) temporaries += account(tensor, Accounting::kAllocated);
  CHECK(temporaries == r.states.step_transient);
}

TEST_CASE("states made at the first step: step 1 has none in backward, later steps replayed to the steady state") {
  const Run lazy = run(gpt2_full(Stack::kHfTrainer));
  const Simulation& s = lazy.simulation;
  MESSAGE("first step reserved " << s.first_step_peak_reserved / double(1 << 20) << " MiB, steady "
                                 << s.peak_reserved / double(1 << 20) << " MiB after " << s.steps_simulated
                                 << " steps (resident from the start: " << lazy.resident.peak_reserved / double(1 << 20)
                                 << " MiB); allocated " << s.first_step_peak_allocated / double(1 << 20) << " / "
                                 << s.peak_allocated / double(1 << 20) << " MiB");
  CHECK(s.steps_simulated >= 2);
  // The steady step repeats: one more step reserved nothing new before the cap.
  CHECK(s.steps_simulated < 4);
  CHECK_FALSE(s.reserved_still_growing);
  // The allocated peak is in backward: step 1's lacks the states. (Later steps may
  // hold a little more: a block whose remainder is too small to split counts whole,
  // and the states moved which blocks the activations get.)
  const double states = static_cast<double>(lazy.states.optimizer);
  CHECK(static_cast<double>(s.peak_allocated - s.first_step_peak_allocated) == doctest::Approx(states).epsilon(0.02));
  CHECK(static_cast<double>(s.peak_allocated) ==
        doctest::Approx(static_cast<double>(lazy.resident.peak_allocated)).epsilon(0.002));
  // Made after the activations, one tensor at a time, the states land in other
  // blocks than a resident flat buffer: reserved memory is the allocator's answer
  // to that order, not to the resident one.
  CHECK(s.peak_reserved >= s.first_step_peak_reserved);
  CHECK(s.peak_reserved != lazy.resident.peak_reserved);
  // The prediction reports the steady reserved peak.
  CHECK(lazy.prediction.simulated_peak_reserved == s.peak_reserved);
  CHECK(lazy.prediction.peak_reserved >= s.peak_reserved);
}

TEST_CASE("DeepSpeed makes its states before training: one step is the steady state") {
  const Run eager = run(gpt2_full(Stack::kDeepspeed));
  CHECK_FALSE(eager.states.states_created_lazily);
  CHECK(eager.simulation.steps_simulated == 1);
  CHECK(eager.simulation.first_step_peak_reserved == eager.simulation.peak_reserved);
  CHECK(eager.simulation.peak_reserved == eager.resident.peak_reserved);
}

TEST_CASE("optimizer in backward and LoRA keep their own rules") {
  RunSettings in_backward = gpt2_full(Stack::kTorchtune);
  in_backward.optimizer_impl = OptimizerImpl::kInBackward;
  const Run r = run(in_backward);
  CHECK_FALSE(r.states.states_created_lazily);
  CHECK(r.simulation.steps_simulated == 1);
}

}  // namespace headroom::planner
