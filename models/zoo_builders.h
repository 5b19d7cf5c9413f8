// Builders of the zoo's graphs, one per model file; zoo.cc adds the metadata
// (name, description, source, sequence spec, LoRA targets). Internal to models/.
#pragma once

#include "graph/layer_graph.h"
#include "models/zoo.h"

namespace headroom::models {

// GPT-2 family (HF GPT2Config names in comments).
struct GptConfig {
  int64_t layers = 0;     // n_layer
  int64_t hidden = 0;     // n_embd
  int64_t heads = 0;      // n_head
  int64_t vocab = 0;      // vocab_size
  int64_t positions = 0;  // n_positions
  double embedding_dropout = 0.0;  // embd_pdrop
  double attention_dropout = 0.0;  // attn_pdrop
  double residual_dropout = 0.0;   // resid_pdrop
};
graph::LayerGraph build_gpt2(const ZooOptions& options);
graph::LayerGraph build_gpt2_from(const GptConfig& config, const ZooOptions& options);

// BERT encoder with a sequence-classification head (HF BertConfig names).
struct BertConfig {
  int64_t hidden = 1024;        // hidden_size
  int64_t layers = 24;          // num_hidden_layers
  int64_t heads = 16;           // num_attention_heads
  int64_t intermediate = 4096;  // intermediate_size
  int64_t vocab = 30522;        // vocab_size
  int64_t positions = 512;      // max_position_embeddings
  int64_t token_types = 2;      // type_vocab_size
  double hidden_dropout = 0.1;  // hidden_dropout_prob
  double attention_dropout = 0.1;  // attention_probs_dropout_prob
  int64_t labels = 2;           // num_labels (len(id2label))
};
graph::LayerGraph build_bert_from(const BertConfig& config, const ZooOptions& options);
graph::LayerGraph build_flux_kontext(const ZooOptions& options);
graph::LayerGraph build_vit_b16(const ZooOptions& options);
graph::LayerGraph build_eva_vit_g(const ZooOptions& options);
graph::LayerGraph build_llava_llama3_8b(const ZooOptions& options);
graph::LayerGraph build_bert_large(const ZooOptions& options);
// Not in the zoo: the LLaVA vision tower alone, for parameter-count tests.
graph::LayerGraph build_clip_vit_l14_336_vision(const ZooOptions& options);

}  // namespace headroom::models
