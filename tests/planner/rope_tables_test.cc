// transformers before 4.45 makes each Mistral, Phi-3, Gemma and Qwen2 attention layer's
// cos and sin in the layer's own forward (models/rope_tables.h); from 4.45 the model makes
// one pair for every layer. docs/memory-model.md, "Rotary tables".
#include <doctest/doctest.h>

#include <string>

#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {

// hf-trainer[hf4]/mistral-7b/full/none/b2s2048 keeps 64 `_to_copy` (1, 2048, 128), 32 MiB);
// from 4.45 the model makes one pair for every layer (models/rope_tables.h). 4.53.0 against
// 4.44.2: both copy grouped K/V to every head before SDPA (until 4.54).
TEST_CASE("transformers 4.44's Mistral layers keep rope tables of their own, 4.53's share one pair") {
  const auto layer_keep = [](const std::string& transformers) {
    RunSettings s;
    s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/mistral-7b/config.json";
    s.gpu = "h200";
    s.precision = Precision::kBf16Pure;
    s.stack = Stack::kHfTrainer;
    s.mode = TrainMode::kFull;
    s.micro_batch = 2;
    s.seq_len = 2048;
    s.versions = {{"transformers", transformers}, {"torch", "2.11.0"}};
    const ModelContext context = prepared_context(s);
    const int layer = block_ending(context.graph, ".layers.3");
    const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 2, 2048,
                                             Accounting::kAllocated, context.gpu);
    return profile.blocks[static_cast<size_t>(layer)].keep;
  };
  CHECK(layer_keep("4.44.2") - layer_keep("4.53.0") == 2 * 2048 * 128 * 2);
}

}  // namespace headroom::planner
