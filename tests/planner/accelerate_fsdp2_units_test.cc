// accelerate's FSDP2 units under the Trainer (utils/fsdp_utils.py fsdp2_prepare_model):
// from 1.14 the input embeddings and the tail (final norm, lm_head) are units of their
// own, the tail kept unsharded from its forward to its backward, its pre-backward hook
// (and with it the last layer's prefetch) after the loss's backward. Before 1.14, or
// with no release given, both sit in the root group for the whole step.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "planner/memory/model_states.h"
#include "planner/predict/planner.h"
#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"
#include "tests/planner/fsdp_test_support.h"

namespace headroom::planner {
namespace {

RunSettings trainer_fsdp2(const std::string& accelerate) {
  RunSettings s;
  s.precision = Precision::kBf16Pure;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.stack = Stack::kHfTrainer;
  s.sharding = Sharding::kFsdp2;
  if (!accelerate.empty()) s.versions["accelerate"] = accelerate;
  return s;
}

constexpr int64_t kEmbed = (int64_t{1} << 26) * 2;  // bf16 bytes, unsharded
constexpr int64_t kLayer = (int64_t{1} << 27) * 2;
constexpr int64_t kHead = (int64_t{1} << 28) * 2;

ModelStates states_of(const graph::LayerGraph& graph, const RunSettings& settings) {
  GlobalConfig config;
  config.zero_stage = 3;
  return model_states(graph, settings, config, Accounting::kAllocated);
}

}  // namespace

TEST_CASE("accelerate from 1.14 makes the embeddings and the tail FSDP2 units, the tail kept to its backward") {
  const ModelStates carved = states_of(llm_shaped(false), trainer_fsdp2("1.15.0"));
  CHECK(carved.fsdp2_root_params == 0);
  CHECK(carved.gathered_fwd_block[0] == 2 * kEmbed);  // its own and its all-gather output
  CHECK(carved.gathered_fwd_block[3] == 2 * kHead);
  // The loss's backward sees the tail alone; from lm_head the last layer is prefetched.
  CHECK(carved.gathered_bwd_before_block[3] == kHead);
  CHECK(carved.gathered_bwd_block[3] == kHead + kLayer);
  CHECK(carved.gathered_bwd_before_block[2] == carved.gathered_bwd_block[2]);
}

TEST_CASE("before accelerate 1.14, with no release given, or tied, the ends stay in the root group") {
  for (const std::string& release : {std::string("1.13.0"), std::string()}) {
    const ModelStates root = states_of(llm_shaped(false), trainer_fsdp2(release));
    CHECK(root.fsdp2_root_params == kEmbed + kHead);
    CHECK(root.gathered_bwd_block[3] == kLayer);  // the last layer, prefetched as backward starts
    CHECK(root.gathered_bwd_before_block[3] == kLayer);
  }
  // Tied: the tail holds the shared embedding, gathered for the whole step as the root was.
  const ModelStates tied = states_of(llm_shaped(true), trainer_fsdp2("1.15.0"));
  CHECK(tied.fsdp2_root_params == kEmbed);
  RunSettings loop = trainer_fsdp2("1.15.0");
  loop.stack = Stack::kUnspecified;  // only the Trainer prepares the model through accelerate
  CHECK(states_of(llm_shaped(false), loop).fsdp2_root_params == kEmbed + kHead);
}

namespace {

// Mistral 7B trained in full on 8 GPUs under the Trainer's FSDP2 (the oracle's run).
RunSettings mistral_on_8(const std::string& accelerate) {
  RunSettings s = trainer_fsdp2(accelerate);
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/mistral-7b";
  s.gpu = "h200";
  s.micro_batch = 2;
  s.seq_len = 2048;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  return s;
}

constexpr int64_t kMistralEmbedding = int64_t{32000} * 4096 * 2;
constexpr int64_t kMistralLayer = int64_t{218'112'000} * 2;

}  // namespace

TEST_CASE("the loss's backward under accelerate 1.15 holds neither the embeddings nor the last layer") {
  const Simulation root = simulate_as_given(mistral_on_8("1.13.0"));
  const Simulation carved = simulate_as_given(mistral_on_8("1.15.0"));
  const std::string loss = "backward loss";
  CHECK(allocated_after(root, loss) - allocated_after(carved, loss) == kMistralEmbedding + kMistralLayer);
  // The walk agrees with the simulation on both layouts.
  for (const RunSettings& settings : {mistral_on_8("1.13.0"), mistral_on_8("1.15.0")}) {
    Result<ModelContext> context = prepare_context(settings);
    REQUIRE(context.is_ok());
    Result<std::vector<BlockChoice>> blocks = user_block_choices(context.value(), settings);
    REQUIRE(blocks.is_ok());
    const Prediction p = predict(context.value(), settings, user_config(settings), blocks.value(), false);
    const double simulated = static_cast<double>(simulate_as_given(settings).peak_allocated);
    CHECK(std::abs(static_cast<double>(p.peak_allocated) - simulated) < 0.01 * simulated);
  }
}

}  // namespace headroom::planner
