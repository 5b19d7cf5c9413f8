// Builders of the zoo's graphs, one per model file; zoo.cc adds the metadata
// (name, description, source, sequence spec, LoRA targets). Internal to models/.
#pragma once

#include "graph/layer_graph.h"
#include "models/llama.h"
#include "models/vision.h"
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
  int64_t inner = 0;               // n_inner, the MLP width; 0: 4 * n_embd
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
  double classifier_dropout = 0.1;  // classifier_dropout (null: hidden_dropout_prob)
  int64_t labels = 2;           // num_labels (len(id2label))
  const char* prefix = "bert";  // "roberta": parameter names "roberta.embeddings..."
  bool roberta_head = false;    // RobertaClassificationHead (dense, tanh, out_proj), no pooler
  // Read for the executor's module (models/torch/bert_module.h); the graph's
  // memory does not depend on them.
  double layer_norm_eps = 1e-12;  // layer_norm_eps (RoBERTa's checkpoints: 1e-5)
  bool exact_gelu = true;         // hidden_act "gelu" (ACT2FN's exact erf GELU)
  bool absolute_positions = true;  // position_embedding_type "absolute"
  int64_t pad_token = 0;          // pad_token_id: word_embeddings' padding_idx
};
// google-bert/bert-large-uncased (the zoo's bert-large-uncased): BertConfig's
// field defaults above are its config.json.
inline constexpr BertConfig kBertLargeUncased{};
graph::LayerGraph build_bert_from(const BertConfig& config, const ZooOptions& options);

// GPT-NeoX / Pythia (HF GPTNeoXConfig names in comments).
struct NeoxConfig {
  int64_t hidden = 0;        // hidden_size
  int64_t intermediate = 0;  // intermediate_size
  int64_t layers = 0;        // num_hidden_layers
  int64_t heads = 0;         // num_attention_heads
  int64_t vocab = 0;         // vocab_size
  int64_t max_position = 0;  // max_position_embeddings
  double rotary_pct = 0.25;  // rotary_pct: share of head_dim rotated
  bool parallel_residual = true;  // use_parallel_residual: x + attn(ln1 x) + mlp(ln2 x)
  bool bias = true;               // attention_bias (the MLP always has biases)
  bool tie_embeddings = false;    // tie_word_embeddings
  double attention_dropout = 0.0;
  double hidden_dropout = 0.0;
};
graph::LayerGraph build_neox_from(const NeoxConfig& config, const ZooOptions& options);

// MPT as llm-foundry builds it (MPTConfig names in comments; configuration_mpt.py,
// modeling_mpt.py). Defaults are MPTConfig's.
struct MptConfig {
  int64_t hidden = 2048;        // d_model
  int64_t heads = 16;           // n_heads
  int64_t layers = 24;          // n_layers
  int64_t expansion_ratio = 4;  // MPTMLP width = expansion_ratio * d_model
  int64_t max_seq = 2048;       // max_seq_len (rows of wpe)
  int64_t vocab = 50368;        // vocab_size
  double residual_dropout = 0.0;   // resid_pdrop
  double embedding_dropout = 0.0;  // emb_pdrop
  double attention_dropout = 0.0;  // attn_config.attn_pdrop
  bool learned_positions = true;   // learned_pos_emb (MPTConfig sets it false under ALiBi)
  bool alibi = false;              // attn_config.alibi
  bool bias = true;                // not no_bias: every Linear and LayerNorm has a bias
  bool low_precision_norm = true;  // norm_type low_precision_layernorm (else layernorm)
  graph::DType param_dtype = graph::DType::kF32;  // the checkpoint's torch_dtype
};
graph::LayerGraph build_mpt_from(const MptConfig& config, const ZooOptions& options);
graph::LayerGraph build_mpt_7b(const ZooOptions& options);

// OPT (HF OPTConfig names in comments).
struct OptConfig {
  int64_t hidden = 0;        // hidden_size
  int64_t ffn = 0;           // ffn_dim
  int64_t layers = 0;        // num_hidden_layers
  int64_t heads = 0;         // num_attention_heads
  int64_t vocab = 0;         // vocab_size
  int64_t max_position = 0;  // max_position_embeddings (the table has 2 more rows)
  int64_t embed_dim = 0;     // word_embed_proj_dim: project_in/out when != hidden
  bool pre_norm = true;      // do_layer_norm_before
  bool bias = true;          // enable_bias
  bool tie_embeddings = true;
  double dropout = 0.1;
  double attention_dropout = 0.0;
  const char* activation = "relu";  // activation_function
};
graph::LayerGraph build_opt_from(const OptConfig& config, const ZooOptions& options);

// ViTForImageClassification (no pooler) over `classes` labels.
// ViTForImageClassification, or Dinov2ForImageClassification when spec.style is kDinov2.
graph::LayerGraph build_vit_from(const VisionSpec& spec, int64_t classes, const ZooOptions& options);

// CLIPModel / SiglipModel: both towers and the contrastive loss, or the vision
// tower alone (CLIPVisionModel / SiglipVisionModel) when text_layers is 0.
// S = image tokens; the text runs over a fixed text_tokens per sample.
struct ClipConfig {
  VisionSpec vision;          // style kClip or kSiglip, prefix "vision_model"
  int64_t text_hidden = 0;    // text_config.hidden_size
  int64_t text_layers = 0;    // text_config.num_hidden_layers (0: vision only)
  int64_t text_heads = 0;     // text_config.num_attention_heads
  int64_t text_mlp = 0;       // text_config.intermediate_size
  int64_t text_vocab = 0;     // text_config.vocab_size
  int64_t text_tokens = 0;    // text_config.max_position_embeddings
  int64_t projection_dim = 0; // CLIP: projection_dim; SigLIP: none (heads keep the width)
  bool vision_head = true;    // SigLIP: vision_use_head (attention-pooling head)
};
graph::LayerGraph build_clip_from(const ClipConfig& config, const ZooOptions& options);

// LlavaForConditionalGeneration: a CLIP vision tower, a 2-layer projector and a
// Llama-style language model; image_tokens image features per sample replace
// placeholder tokens of the S text tokens.
struct LlavaConfig {
  VisionSpec vision;         // rows fixed per sample; layers_to_run from vision_feature_layer
  LlamaConfig text;
  int64_t image_tokens = 0;  // image_seq_length: patches (default strategy drops the class token)
  const char* projector_act = "gelu";  // projector_hidden_act
};
graph::LayerGraph build_llava_from(const LlavaConfig& config, const ZooOptions& options);

// EVA ViT-g/14 as BLIP-2's vision encoder (HF Blip2VisionModel names, LAVIS
// create_eva_vit_g's q_bias/v_bias): the encoder, its post LayerNorm and a
// feature loss over every token (the seed story's outputs.mean()). The
// executor builds its module from the same specs (models/torch/eva_vit_module.h).
VisionSpec eva_vit_g_spec();
VisionSpec tiny_eva_vit_spec();  // the same structure at toy size for CPU runs
graph::LayerGraph build_eva_vit_from(const VisionSpec& spec, const ZooOptions& options);

graph::LayerGraph build_flux_kontext(const ZooOptions& options);
graph::LayerGraph build_vit_b16(const ZooOptions& options);
graph::LayerGraph build_eva_vit_g(const ZooOptions& options);
graph::LayerGraph build_llava_llama3_8b(const ZooOptions& options);
graph::LayerGraph build_bert_large(const ZooOptions& options);
// Not in the zoo: the LLaVA vision tower alone, for parameter-count tests.
graph::LayerGraph build_clip_vit_l14_336_vision(const ZooOptions& options);

}  // namespace headroom::models
