// T5 and Flan-T5 (transformers T5ForConditionalGeneration, models/t5/modeling_t5.py
// 5.23.0): a shared embedding, an encoder stack over the S source tokens and a
// decoder stack over the T target tokens (self-attention, cross-attention to the
// encoder's output, feed-forward), T5LayerNorm (RMS, no bias), relative position
// bias made by the first layer of each stack and passed on, an lm_head and the
// cross-entropy on the decoder's labels (docs/models.md, "T5").
#pragma once

#include <cstdint>
#include <string>

#include "graph/layer_graph.h"
#include "models/zoo.h"

namespace headroom::models {

struct T5Config {
  std::string name;
  int64_t vocab = 32128;        // vocab_size
  int64_t hidden = 512;         // d_model
  int64_t head_dim = 64;        // d_kv
  int64_t ffn = 2048;           // d_ff
  int64_t heads = 8;            // num_heads
  int64_t encoder_layers = 6;   // num_layers
  int64_t decoder_layers = 6;   // num_decoder_layers (default num_layers)
  int64_t buckets = 32;         // relative_attention_num_buckets
  // feed_forward_proj "gated-gelu" (T5 v1.1, Flan-T5): wi_0, wi_1 and gelu_new
  // (NewGELUActivation, Python ops); "relu" (the original T5): wi and ReLU.
  bool gated = false;
  std::string activation = "relu";  // "relu", "gelu_new" or "gelu"
  double dropout = 0.1;             // dropout_rate
  // T5Config.__post_init__ 5.23.0: scale_decoder_outputs = tie_word_embeddings as
  // written (true unless false), and tie_word_embeddings forced true, so lm_head is
  // shared.weight in every 5.x model; 4.x ties it only when the config says so.
  bool scale_decoder_outputs = true;
  bool tie_lm_head = true;
};

// Decoder tokens per sample when the run gives none (--target-seq): 128,
// transformers examples/pytorch/summarization/run_summarization.py max_target_length.
inline constexpr int64_t kT5DefaultTargetTokens = 128;

// The graph at options.target_tokens decoder tokens per sample (or the default).
graph::LayerGraph build_t5(const T5Config& config, const ZooOptions& options);

// Family, sequence spec (S: the encoder's tokens) and PEFT's default LoRA targets
// for t5 (q, v: peft utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, 0.21.2).
void set_t5_metadata(graph::LayerGraph& graph);

// Published configs (config.json of google/flan-t5-{base,xl,xxl}, google-t5/t5-base),
// tied as options.t5_untied_lm_head says.
T5Config flan_t5_config(const std::string& size, const ZooOptions& options);
T5Config t5_base_config(const ZooOptions& options);

}  // namespace headroom::models
