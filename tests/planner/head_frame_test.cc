// What lives while the head block runs forward: the last decoder layer's output dies
// once the final norm has read it (the norm saves its own fp32 copy and the model's
// forward rebinds `hidden_states` to the norm's output: transformers 5.23.0
// Qwen2Model.forward), so planner/time/block_profile.cc frees a block's entry input
// after its last reader under autograd (ForwardPass::kAutograd). A transformers
// causal-LM computes its loss inside its forward, whose frame binds the head's input
// until the loss has run (LlamaForCausalLM.forward: `hidden_states =
// outputs.last_hidden_state`, `logits = self.lm_head(hidden_states)`,
// `self.loss_function(...)`); models/graph_builder.cc lm_loss holds it there and
// planner/mechanisms/loss_variants.cc releases it where the caller computes the loss
// (torchtune's recipes, litgpt's fit).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/mechanisms/trl_fused_head.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kHidden = 896;  // Qwen2.5-0.5B
constexpr int64_t kTokens = 512;

// Qwen2.5-0.5B (its config.json), LoRA on q_proj and v_proj, bf16, 1 x 512, every
// layer checkpointed: the oracle's run trl-sft[trl]/qwen2.5-0.5b/lora/non-reentrant/b1s512.
RunSettings qwen_lora(Stack stack) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b/config.json";
  s.gpu = "h200";
  s.stack = stack;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kLora;
  s.lora.rank = 16;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 1;
  s.seq_len = kTokens;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

const graph::Node& loss_node(const graph::LayerGraph& graph) {
  const auto it = std::find_if(graph.nodes.begin(), graph.nodes.end(),
                               [](const graph::Node& n) { return n.op == "loss"; });
  REQUIRE(it != graph.nodes.end());
  return *it;
}

}  // namespace

TEST_CASE("TRL's fused head runs forward without the last layer's output") {
  RunSettings s = qwen_lora(Stack::kHfTrainer);
  s.versions["trl"] = "1.16.0";
  const ModelContext context = prepared_context(s);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 1,
                                           context.seq_len, Accounting::kAllocated, context.gpu);
  const BlockProfile& head = profile.blocks[static_cast<size_t>(block_ending(context.graph, "head"))];
  // Live at the fused head's tile (the oracle at its peak in the head's forward): the
  // final norm's saved fp32 input and fp32 rstd, its bf16 output (the head's input), the
  // compact hidden copy with log_z and entropy, the [512 x 32768] bf16 tile and 52
  // bytes a token of statistics, labels and index rows. Not the last layer's output.
  const int64_t norm_saved = kTokens * kHidden * 4 + kTokens * 4;
  const int64_t norm_out = kTokens * kHidden * 2;
  const int64_t copy = kTokens * kHidden * 2 + kTokens * kTrlSavedBytesPerToken;
  const int64_t tile = kTokens * kTrlVocabTile * 2 + kTokens * kTrlForwardBytesPerToken;
  CHECK(head.fwd_peak == norm_saved + norm_out + copy + tile);
  CHECK(head.fwd_peak_saved == norm_saved + copy);
}

TEST_CASE("the Trainer's causal-LM loss holds the head's input, torchtune's does not") {
  const ModelContext trainer = prepared_context(qwen_lora(Stack::kHfTrainer));
  const graph::Node& held = loss_node(trainer.graph);
  CHECK(std::count(held.holds.begin(), held.holds.end(), "model.norm") == 1);
  RunSettings tune = qwen_lora(Stack::kTorchtune);
  tune.versions = {{"torchtune", "0.6.1"}, {"torch", "2.11.0"}};
  const ModelContext torchtune = prepared_context(tune);
  CHECK(loss_node(torchtune.graph).holds.empty());
  // The hold is the norm's bf16 output beside the full loss's forward.
  const StepProfile with = profile_step(trainer.graph, trainer.analysis, trainer.compute_dtype, 1,
                                        trainer.seq_len, Accounting::kAllocated, trainer.gpu);
  graph::LayerGraph released = trainer.graph;
  for (graph::Node& node : released.nodes) {
    if (node.op == "loss") node.holds.clear();
  }
  const graph::GraphAnalysis analysis = graph::analyze_graph(released);
  const StepProfile without = profile_step(released, analysis, trainer.compute_dtype, 1, trainer.seq_len,
                                           Accounting::kAllocated, trainer.gpu);
  const size_t head = static_cast<size_t>(block_ending(trainer.graph, "head"));
  CHECK(with.blocks[head].fwd_peak - without.blocks[head].fwd_peak == kTokens * kHidden * 2);
}

}  // namespace headroom::planner
