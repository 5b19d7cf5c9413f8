// Test support for the planner suites: the prediction of a run exactly as given
// (its own checkpointing and globals, no search), as `headroom fit` makes it, and
// the few settings and graph lookups several suites share.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "planner/predict/planner.h"

namespace headroom::planner {

// Llama 3 8B with LoRA on an A100 80GB, B = 2, S = 4096, every block checkpointed.
inline RunSettings llama_lora(Stack stack) {
  RunSettings s;
  s.model = "llama-3-8b";
  s.gpu = "a100-80g";
  s.mode = TrainMode::kLora;
  s.micro_batch = 2;
  s.seq_len = 4096;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.stack = stack;
  return s;
}

// The parameter named `name` in `graph`, or null.
inline const graph::Param* find_param(const graph::LayerGraph& graph, const std::string& name) {
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.name == name) return &param;
    }
  }
  return nullptr;
}

// A GlobalConfig at ZeRO stage `stage`, everything else at its default.
inline GlobalConfig zero_stage(int stage) {
  GlobalConfig config;
  config.zero_stage = stage;
  return config;
}

// ViT-B/16 (its config.json) at 224 px under the Trainer's bf16 on an H200, B = 32,
// transformers 5.23.0; `mode`'s defaults otherwise (LoRA's targets, what trains).
inline RunSettings hf_vit_b16(TrainMode mode) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/vit-base-patch16-224/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  s.micro_batch = 32;
  s.resolution = 224;
  s.versions["transformers"] = "5.23.0";
  return s;
}

// BERT-base (tests/data/hf/bert-base-uncased) under the Trainer in pure bf16 on an H200,
// B = 32, S = 512, at the oracle's pinned releases (grid rows hf-trainer/bert-base-uncased/*);
// LoRA on query and value with the classifier trained, as the grid's LoRA rows.
inline RunSettings hf_bert_base(TrainMode mode) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/bert-base-uncased/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  if (mode == TrainMode::kLora) {
    s.lora.targets = {"query", "value"};
    s.train_patterns = {"classifier"};
  }
  s.micro_batch = 32;
  s.seq_len = 512;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

// Flan-T5-XL's dimensions at 2 layers a stack (tests/data/hf/flan-t5-xl-2l) with LoRA on
// q and v under the Trainer's bf16 on an H200, S = 512 encoder and `target` decoder
// tokens, at the oracle's pinned releases.
inline RunSettings flan_t5_xl_lora(int64_t target) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/flan-t5-xl-2l";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q", "v"};
  s.seq_len = 512;
  s.target_tokens = target;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

// torchtune's full fine-tune of Llama 3.2 1B (its config.json: transformers'
// Python RMSNorm) on an A100 80GB in pure bf16, B = 2, S = 1024.
inline RunSettings torchtune_llama_1b(bool compile = false,
                                      models::AttentionImpl attention = models::AttentionImpl::kSdpa) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.micro_batch = 2;
  s.seq_len = 1024;
  s.stack = Stack::kTorchtune;
  s.compile = compile;
  s.attention = attention;
  return s;
}

// `s` as torchtune before 0.5 ran it: RMSNorm's normalized tensor cast back to 16
// bits before the scale (tests/planner/torchtune_rms_norm_test.cc holds 0.5's fp32).
inline RunSettings torchtune_before_0_5(RunSettings s) {
  s.versions["torchtune"] = "0.4.0";
  return s;
}

// The index of the block whose name ends with `suffix` (".layers.0").
inline int block_ending(const graph::LayerGraph& graph, const std::string& suffix) {
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    if (graph.blocks[b].name.ends_with(suffix)) return static_cast<int>(b);
  }
  FAIL("no block ending in " << suffix);
  return -1;
}

// Whether `node` keeps `tensor` for backward (under any condition).
inline bool saves(const graph::Node& node, const std::string& tensor) {
  for (const graph::SavedRef& saved : node.saves) {
    if (saved.tensor == tensor) return true;
  }
  return false;
}

// The model context of `settings`, which must prepare.
inline ModelContext prepared_context(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  return std::move(context.value());
}

inline Prediction predict_as_given(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  Result<std::vector<BlockChoice>> choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  return predict(context.value(), settings, user_config(settings), choices.value());
}

}  // namespace headroom::planner
