// The simulator against the planner's block-level walk, and its own invariants.
#include <doctest/doctest.h>

#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"

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

namespace headroom::planner {

TEST_CASE("simulator timeline and memory curve invariants") {
  RunSettings settings;
  settings.model = "llama-3-8b";
  settings.mode = TrainMode::kLora;
  settings.grad_accum = 2;
  settings.seq_len = 1024;
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE(context.is_ok());
  std::vector<BlockChoice> choices(context->graph.blocks.size(), BlockChoice::kKeep);
  for (size_t b = 1; b + 1 < choices.size(); ++b) choices[b] = b % 3 == 0 ? BlockChoice::kOffload : BlockChoice::kCheckpoint;
  SimulatorOptions every_sample;
  every_sample.max_memory_samples = 100'000'000;
  const Simulation s = simulate(context.value(), settings, user_config(settings), choices, every_sample);
  // Compute kernels never overlap one another and time only moves forward.
  double last_end = 0;
  int recomputes = 0;
  int offloads = 0;
  for (const TimelineEvent& e : s.events) {
    CHECK(e.end_ms >= e.start_ms);
    if (e.stream == Stream::kCompute) {
      CHECK(e.start_ms >= last_end - 1e-9);
      last_end = e.end_ms;
    }
    recomputes += e.phase == Phase::kRecompute;
    offloads += e.phase == Phase::kOffload;
  }
  CHECK(recomputes > 0);
  CHECK(offloads > 0);
  CHECK(s.time.step_ms >= last_end - 1e-9);
  // Both micro-steps appear; the step ends where it began (only model states stay).
  // The curve is the last step replayed: its first samples are the model states
  // (step 1) or what the previous step left ("step 2", after lazily made states).
  CHECK(s.events.back().micro_step == 1);
  REQUIRE(s.memory.size() > 2);
  CHECK(s.memory.front().label == (s.steps_simulated == 1 ? "model states" : "step " + std::to_string(s.steps_simulated)));
  int64_t after_states = 0;
  for (const MemorySample& m : s.memory) {
    if (m.label != s.memory.front().label) break;
    after_states = m.allocated;
  }
  CHECK(after_states > 0);
  CHECK(s.memory.back().allocated == after_states);  // every activation and gradient buffer was freed
  for (const MemorySample& m : s.memory) CHECK(m.reserved >= m.allocated);
  CHECK(s.peak_reserved >= s.peak_allocated);
  CHECK_FALSE(s.live_at_peak.empty());
  CHECK_FALSE(s.out_of_memory);
}

TEST_CASE("the simulator reports an out-of-memory when the budget cannot hold the step") {
  RunSettings settings;
  settings.model = "llama-3-8b";
  settings.gpu = "4090";
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE(context.is_ok());
  const std::vector<BlockChoice> keep(context->graph.blocks.size(), BlockChoice::kKeep);
  const Simulation s = simulate(context.value(), settings, user_config(settings), keep);
  CHECK(s.out_of_memory);
  CHECK_FALSE(s.out_of_memory_at.empty());
  const Prediction p = predict(context.value(), settings, user_config(settings), keep);
  CHECK(p.simulated_out_of_memory);
  CHECK_FALSE(p.fits_gpu);
}

TEST_CASE("a calibration file changes the time prediction") {
  RunSettings settings;
  settings.model = "gpt2";
  const Result<ModelContext> plain = prepare_context(settings);
  REQUIRE(plain.is_ok());
  const std::string path = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/calibration_a6000.json";
  settings.calibration_file = path;
  const Result<ModelContext> calibrated_context = prepare_context(settings);
  REQUIRE_MESSAGE(calibrated_context.is_ok(), calibrated_context.message());
  CHECK(calibrated_context->time_options.matmul_efficiency == doctest::Approx(0.3));
  const std::vector<BlockChoice> keep(plain->graph.blocks.size(), BlockChoice::kKeep);
  const Prediction before = predict(plain.value(), settings, user_config(settings), keep);
  const Prediction after = predict(calibrated_context.value(), settings, user_config(settings), keep);
  CHECK(after.time.step_ms > before.time.step_ms * 1.3);
  CHECK(after.peak.cuda_context == 512LL << 20);

  settings.calibration_file = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/calibration_bad.json";
  const Result<ModelContext> bad = prepare_context(settings);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("matmul_efficiency") != std::string::npos);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("identical micro-steps are accounted, not replayed: the same answer as replaying every one (issue 14)") {
  struct Accumulation {
    const char* model;
    int64_t grad_accum;
    int gpus;
    int zero;
    Offload offload;
    BlockChoice choice;
  };
  const Accumulation cases[] = {
      {"gpt2", 5, 1, 0, Offload::kNone, BlockChoice::kKeep},
      {"gpt2", 12, 1, 0, Offload::kNone, BlockChoice::kCheckpoint},
      {"gpt2", 9, 4, 2, Offload::kNone, BlockChoice::kKeep},      // gradients reduced every micro-step
      {"gpt2", 7, 2, 1, Offload::kCpu, BlockChoice::kOffload},    // host copies and the last step's collectives
      {"tiny-llama", 40, 8, 2, Offload::kCpu, BlockChoice::kKeep},
  };
  for (const Accumulation& c : cases) {
    CAPTURE(c.model);
    CAPTURE(c.grad_accum);
    RunSettings settings;
    settings.model = c.model;
    settings.micro_batch = 2;
    settings.grad_accum = c.grad_accum;
    settings.gpus_per_node = c.gpus;
    settings.zero_stage = c.zero;
    settings.offload_optimizer = c.offload;
    Result<ModelContext> context = prepare_context(settings);
    REQUIRE_MESSAGE(context.is_ok(), context.message());
    std::vector<BlockChoice> blocks(context->graph.blocks.size(), BlockChoice::kKeep);
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (context->graph.blocks[b].checkpointable) blocks[b] = c.choice;
    }
    SimulatorOptions every;
    every.replay_every_micro_step = true;
    const Simulation replayed = simulate(context.value(), settings, user_config(settings), blocks, every);
    const Simulation accounted = simulate(context.value(), settings, user_config(settings), blocks);
    CHECK(accounted.peak_allocated == replayed.peak_allocated);
    CHECK(accounted.peak_reserved == replayed.peak_reserved);
    CHECK(accounted.allocations == replayed.allocations);
    CHECK(accounted.time.step_ms == doctest::Approx(replayed.time.step_ms).epsilon(1e-9));
    CHECK(accounted.time.forward_ms == doctest::Approx(replayed.time.forward_ms).epsilon(1e-9));
    CHECK(accounted.time.backward_ms == doctest::Approx(replayed.time.backward_ms).epsilon(1e-9));
    CHECK(accounted.time.recompute_ms == doctest::Approx(replayed.time.recompute_ms).epsilon(1e-9));
    CHECK(accounted.time.comm_exposed_ms == doctest::Approx(replayed.time.comm_exposed_ms).epsilon(1e-9));
    CHECK(accounted.time.offload_exposed_ms == doctest::Approx(replayed.time.offload_exposed_ms).epsilon(1e-9));
  }
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("the simulated reduce-scatter moves FSDP's reduce dtype: fp32 twice the bf16 bytes") {
  RunSettings s;
  s.model = "tiny-llama";
  s.precision = Precision::kBf16Mixed;
  s.gpus_per_node = 4;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp2;
  const auto reduced_bytes = [&](ReduceDtype dtype) {
    RunSettings run = s;
    run.reduce_dtype = dtype;
    Result<ModelContext> context = prepare_context(run);
    REQUIRE_MESSAGE(context.is_ok(), context.message());
    const std::vector<BlockChoice> keep(context->graph.blocks.size(), BlockChoice::kKeep);
    const Simulation sim = simulate(context.value(), run, user_config(run), keep, SimulatorOptions{});
    int64_t bytes = 0;
    for (const TimelineEvent& e : sim.events) {
      if (e.label.rfind("reduce gradients", 0) == 0) bytes += e.bytes;
    }
    return bytes;
  };
  const int64_t fp32 = reduced_bytes(ReduceDtype::kFp32);
  const int64_t bf16 = reduced_bytes(ReduceDtype::kParam);
  REQUIRE(bf16 > 0);
  CHECK(static_cast<double>(fp32) == doctest::Approx(2.0 * static_cast<double>(bf16)).epsilon(0.001));
  // Under AMP the gradients are already fp32 (the fp32 model's own): reducing in fp32 adds nothing.
  s.precision = Precision::kBf16Amp;
  CHECK(reduced_bytes(ReduceDtype::kFp32) == reduced_bytes(ReduceDtype::kParam));
}

}  // namespace headroom::planner
