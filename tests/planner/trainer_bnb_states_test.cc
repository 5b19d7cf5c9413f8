// transformers' Trainer with a bitsandbytes optimizer (planner/mechanisms/trainer_bnb_states.h):
// the 32-bit states of embeddings under an 8-bit optimizer, and what a paged optimizer pages.
#include <doctest/doctest.h>

#include "graph/layer_graph.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/model_states.h"
#include "planner/memory/state_bytes.h"

namespace headroom::planner {
namespace {

constexpr int64_t kVocab = 1'000, kWidth = 100;  // the embedding: 1e5 elements, paged when asked
constexpr int64_t kLinear = 1'000'000;

int64_t absmax(int64_t elements) { return (elements + 255) / 256 * 4; }  // one fp32 per 256-element block

// An embedding, one linear, and a head tied to the embedding's weight, all trainable bf16.
graph::LayerGraph tied_model() {
  graph::LayerGraph graph;
  graph.name = "tied";
  graph.blocks = {{"embeddings", "embedding", false}, {"layer", "dense", true}, {"head", "lm_head", false}};
  graph::Node embed;
  embed.name = "embed_tokens";
  embed.op = "embedding";
  embed.block = 0;
  embed.params.push_back({"embed_tokens.weight", {kVocab, kWidth}, graph::DType::kBF16, true, ""});
  graph::Node linear;
  linear.name = "w";
  linear.op = "linear";
  linear.block = 1;
  linear.params.push_back({"w.weight", {kLinear}, graph::DType::kBF16, true, ""});
  graph::Node head;
  head.name = "lm_head";
  head.op = "linear";
  head.block = 2;
  head.params.push_back({"lm_head.weight", {kVocab, kWidth}, graph::DType::kBF16, true, "embed_tokens.weight"});
  graph.nodes = {embed, linear, head};
  return graph;
}

RunSettings eight_bit(Stack stack) {
  RunSettings settings;
  settings.stack = stack;
  settings.precision = Precision::kBf16Pure;
  settings.optimizer = OptimizerKind::kAdamW8bit;
  return settings;
}

ModelStates states_of(const RunSettings& settings) {
  return model_states(tied_model(), settings, GlobalConfig{}, Accounting::kAllocated);
}

const int64_t kMaps = 2 * allocated_bytes(256 * 4);  // the signed and unsigned dynamic maps
const int64_t kLinear8bit = 2 * allocated_bytes(kLinear) + 2 * allocated_bytes(absmax(kLinear));

}  // namespace

TEST_CASE("the Trainer's 8-bit bitsandbytes optimizer keeps an embedding's states in fp32, a tied head's once") {
  // trainer.py create_optimizer: nn.Embedding weights registered {"optim_bits": 32}.
  const ModelStates trainer = states_of(eight_bit(Stack::kHfTrainer));
  CHECK(trainer.optimizer == 2 * allocated_bytes(kVocab * kWidth * 4) + kLinear8bit + kMaps);
  // torchtune and litgpt make their bitsandbytes optimizers themselves: 8-bit everywhere.
  const ModelStates torchtune = states_of(eight_bit(Stack::kTorchtune));
  CHECK(torchtune.optimizer ==
        2 * allocated_bytes(kVocab * kWidth) + 2 * allocated_bytes(absmax(kVocab * kWidth)) + kLinear8bit + kMaps);
  // The override is of 8-bit states only: torch's AdamW is unchanged.
  RunSettings adamw = eight_bit(Stack::kHfTrainer);
  adamw.optimizer = OptimizerKind::kAdamW;
  CHECK(states_of(adamw).optimizer == 2 * allocated_bytes(kVocab * kWidth * 2) + 2 * allocated_bytes(kLinear * 2));
}

TEST_CASE("a paged 8-bit optimizer pages the uint8 codes and keeps their absmax on the device") {
  RunSettings settings = eight_bit(Stack::kTorchtune);
  settings.paged_optimizer = true;
  // optim/optimizer.py: get_state_buffer pages state1 and state2 from 1e5 elements;
  // absmax1 and absmax2 are torch.zeros on the parameter's device.
  const ModelStates paged = states_of(settings);
  CHECK(paged.paged_optimizer == 2 * kVocab * kWidth + 2 * kLinear);
  CHECK(paged.optimizer == 2 * allocated_bytes(absmax(kVocab * kWidth)) + 2 * allocated_bytes(absmax(kLinear)) + kMaps);
  // Under the Trainer the embedding's 32-bit states are paged whole.
  settings.stack = Stack::kHfTrainer;
  const ModelStates trainer = states_of(settings);
  CHECK(trainer.paged_optimizer == 2 * kVocab * kWidth * 4 + 2 * kLinear);
  CHECK(trainer.optimizer == 2 * allocated_bytes(absmax(kLinear)) + kMaps);
}

TEST_CASE("bitsandbytes' paged 32-bit AdamW steps without torch's foreach temporaries") {
  graph::LayerGraph graph = tied_model();
  graph::Node norm;
  norm.name = "norm";
  norm.op = "norm";
  norm.block = 1;
  norm.params.push_back({"norm.weight", {1'000}, graph::DType::kBF16, true, ""});  // under 1e5: on the device
  graph.nodes.push_back(norm);
  RunSettings settings = eight_bit(Stack::kUnspecified);  // torch's default, foreach
  settings.optimizer = OptimizerKind::kAdamW;
  CHECK(model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated).step_transient > 0);
  // optim/optimizer.py Optimizer8bit.step: one in-place update kernel per parameter.
  settings.paged_optimizer = true;
  const ModelStates paged = model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated);
  CHECK(paged.optimizer == 2 * allocated_bytes(1'000 * 4));
  CHECK(paged.step_transient == 0);
  // Stepped in backward (torchtune's optimizer_in_bwd with PagedAdamW8bit) it stays so.
  settings.optimizer = OptimizerKind::kAdamW8bit;
  settings.optimizer_impl = OptimizerImpl::kInBackward;
  CHECK(model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated).grads_in_backward);
}

}  // namespace headroom::planner
