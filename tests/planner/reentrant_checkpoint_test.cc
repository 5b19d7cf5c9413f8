// Reentrant checkpointing (--recompute block-reentrant, use_reentrant=True):
// a checkpointed block none of whose inputs requires grad records no graph,
// so nothing in it trains (planner/mechanisms/reentrant_checkpoint.h). The
// meta-device oracle's ViT-B/16 LoRA runs under the Trainer keep optimizer
// states for the classifier only (bench/oracle README).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graph/graph_analysis.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/mechanisms/reentrant_checkpoint.h"
#include "planner/mechanisms/trainability.h"
#include "planner/predict/training_notes.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

RunSettings vit_lora(Recompute recompute) {
  RunSettings s = hf_vit_b16(TrainMode::kLora);
  s.lora.targets = {"query", "value"};
  s.train_patterns = {"classifier"};
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = recompute;
  return s;
}

int64_t trainable_adapters(const graph::LayerGraph& graph) {
  int64_t count = 0;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& p : node.params) count += is_lora_adapter(p) && p.trainable ? 1 : 0;
  }
  return count;
}

TEST_CASE("reentrant checkpointing of a ViT under LoRA: no adapter in a layer trains, the classifier does") {
  const ModelContext reentrant = prepared_context(vit_lora(Recompute::kBlockReentrant));
  const ModelContext plain = prepared_context(vit_lora(Recompute::kBlock));
  CHECK(trainable_adapters(plain.graph) == 12 * 2 * 2);  // 12 layers, query and value, A and B
  CHECK(trainable_adapters(reentrant.graph) == 0);
  // The classifier (768 x 1000 and its bias) is outside the checkpointed layers and trains.
  const Prediction p = predict_as_given(vit_lora(Recompute::kBlockReentrant));
  const Prediction q = predict_as_given(vit_lora(Recompute::kBlock));
  CHECK(p.allocated.gradients == 2 * 768 * 1000 + 2048);  // bf16 weight and bias grads, each rounded to 512 B
  CHECK(q.allocated.gradients > p.allocated.gradients);
  CHECK(p.peak_allocated < q.peak_allocated);
  const std::vector<std::string> notes = reentrant_checkpointing_notes(reentrant.graph, vit_lora(Recompute::kBlockReentrant));
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("this answer prices that") != std::string::npos);
}

TEST_CASE("reentrant checkpointing trains every layer where a layer input requires grad") {
  // BERT's main input is input_ids: transformers 5.x hooks its embeddings.
  RunSettings bert = vit_lora(Recompute::kBlockReentrant);
  bert.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/bert-base-uncased/config.json";
  bert.seq_len = 128;
  bert.resolution = 0;
  const ModelContext hooked = prepared_context(bert);
  CHECK(trainable_adapters(hooked.graph) == 12 * 2 * 2);
  // A full fine-tune: the embeddings train, so every layer's input requires grad.
  RunSettings full = vit_lora(Recompute::kBlockReentrant);
  full.mode = TrainMode::kFull;
  const ModelContext trained = prepared_context(full);
  const graph::GraphAnalysis analysis = graph::analyze_graph(trained.graph);
  for (size_t n = 0; n < trained.graph.nodes.size(); ++n) {
    for (const graph::Param& p : trained.graph.nodes[n].params) CHECK(p.trainable);
  }
  // Without checkpointing nothing is reentrant.
  RunSettings kept = vit_lora(Recompute::kBlockReentrant);
  kept.checkpointing = CheckpointPolicy::kNone;
  CHECK(trainable_adapters(prepared_context(kept).graph) == 12 * 2 * 2);
}

TEST_CASE("the mechanism freezes a block only while no input of it requires grad") {
  ModelContext context = prepared_context(vit_lora(Recompute::kBlock));
  std::vector<bool> checkpointed(context.graph.blocks.size(), false);
  const int first = block_ending(context.graph, ".layer.0");
  checkpointed[static_cast<size_t>(first)] = true;
  checkpointed[static_cast<size_t>(first) + 2] = true;
  // Layer 0 freezes (2 adapters x A, B); layer 2's input comes through layer 1, which trains.
  CHECK(apply_reentrant_checkpointing(context.graph, checkpointed) == 4);
  CHECK(trainable_adapters(context.graph) == 11 * 2 * 2);
}

TEST_CASE("gradient_checkpointing_kwargs' use_reentrant picks the recompute, and a bad value is named") {
  auto imported = [](const nlohmann::json& kwargs) {
    return import_training_arguments_object(
        nlohmann::json{{"gradient_checkpointing", true}, {"gradient_checkpointing_kwargs", kwargs}}, "args.json",
        RunSettings{});
  };
  const Result<ConfigImport> reentrant = imported({{"use_reentrant", true}});
  REQUIRE_MESSAGE(reentrant.is_ok(), reentrant.message());
  CHECK(reentrant->settings.recompute == Recompute::kBlockReentrant);
  const Result<ConfigImport> text = imported("{\"use_reentrant\": false}");  // the command line's form
  REQUIRE_MESSAGE(text.is_ok(), text.message());
  CHECK(text->settings.recompute == Recompute::kBlock);
  const Result<ConfigImport> unsaid = imported(nlohmann::json::object());
  REQUIRE(unsaid.is_ok());
  CHECK_FALSE(unsaid->settings.recompute.has_value());
  const Result<ConfigImport> bad = imported({{"use_reentrant", "maybe"}});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("gradient_checkpointing_kwargs.use_reentrant") != std::string::npos);
}

}  // namespace
}  // namespace headroom::planner
