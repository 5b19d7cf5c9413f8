// config.json readers of the text families: Llama-style decoders (llama,
// mistral, qwen2, qwen3, gemma, phi3), gpt2, gpt_neox, opt, bert and roberta.
// Field names and defaults as in transformers' configuration_<family>.py.
#include <cmath>
#include <string>

#include "models/hf_fields.h"
#include "models/llama.h"
#include "models/rope_tables.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// LlamaConfig's defaults (hidden_size 4096, intermediate_size 11008, 32 layers,
// 32 heads, vocab_size 32000) apply only inside a multimodal config's
// text_config, which transformers writes without its default values; a
// top-level config.json must state its sizes.
int64_t size_field(HfReader& r, const char* key, int64_t nested_default) {
  return r.fields().path.empty() ? r.positive(key) : r.positive_or(key, nested_default);
}

// Defaults of max_position_embeddings per model_type.
int64_t default_max_position(const std::string& type) {
  if (type == "llama") return 2048;
  if (type == "mistral") return 4096 * 32;  // MistralConfig: 4096 * 32
  if (type == "gemma") return 8192;
  if (type == "phi3") return 4096;
  return 32768;  // qwen2, qwen3
}

// What the libraries' rotary modules cache for a model_type (models/rope_caches.h):
// a Llama config with rope_scaling's rope_type "llama3" (3.1, 3.2) is what
// torchtune's llama3_1/llama3_2 builders make; Qwen3 has no torchtune builder (0.6.1).
RopeCacheStyle rope_cache_style(const HfFields& c, const std::string& type) {
  if (type == "qwen2") return kQwen2Rope;
  if (type == "phi3") return kPhi3Rope;
  if (type == "qwen3") return RopeCacheStyle{};
  if (type == "llama" && c.has("rope_scaling") && c.json.at("rope_scaling").is_object()) {
    const nlohmann::json& scaling = c.json.at("rope_scaling");
    for (const char* key : {"rope_type", "type"}) {
      if (scaling.contains(key) && scaling.at(key) == "llama3") return kLlama3ScaledRope;
    }
  }
  return kLlamaRope;
}

// Phi3Config's sliding_window defaults to None, MistralConfig's to 4096; null in
// config.json turns it off (configuration_phi3.py, configuration_mistral.py, 5.23.0).
// Their models then build every layer's mask with create_sliding_window_causal_mask.
int64_t read_sliding_window(HfReader& r, const HfFields& c, const std::string& type) {
  if (type != "phi3" && type != "mistral") return 0;
  if (c.json.contains("sliding_window") && c.json.at("sliding_window").is_null()) return 0;
  return r.positive_or("sliding_window", type == "mistral" ? 4096 : 0);
}

}  // namespace

Result<LlamaConfig> read_llama_config(const HfFields& c, const std::string& type) {
  HfReader r(c);
  LlamaConfig config;
  config.hidden = size_field(r, "hidden_size", 4096);
  config.intermediate = size_field(r, "intermediate_size", 11008);
  config.layers = r.fields().path.empty() ? r.layers("num_hidden_layers")
                                          : r.layers_or("num_hidden_layers", 32);
  config.heads = size_field(r, "num_attention_heads", 32);
  config.vocab = size_field(r, "vocab_size", 32000);
  // num_key_value_heads defaults to num_attention_heads everywhere; head_dim to
  // hidden / heads except Qwen3 (128) and Gemma (256); q/k/v biases: Qwen2
  // always, others per attention_bias (false); tie_word_embeddings true for
  // Gemma only.
  config.kv_heads = r.positive_or("num_key_value_heads", config.heads);
  config.max_position = r.positive_or("max_position_embeddings", default_max_position(type));
  const int64_t head_dim_default = type == "qwen3"   ? 128
                                   : type == "gemma" ? 256
                                                     : config.hidden / config.heads;
  config.head_dim = r.positive_or("head_dim", head_dim_default);
  config.qkv_bias = type == "qwen2" || r.boolean_or("attention_bias", false);
  config.qk_norm = type == "qwen3";
  config.tie_embeddings = r.boolean_or("tie_word_embeddings", type == "gemma");
  config.attention_dropout = r.probability_or("attention_dropout", 0.0);
  config.sliding_window = read_sliding_window(r, c, type);
  r.divides("num_key_value_heads", config.heads, config.kv_heads, "num_attention_heads");
  r.at_most("head_dim", config.heads * config.head_dim, kMaxHfSize,
            "num_attention_heads x head_dim");
  if (type != "qwen3" && type != "gemma" && !c.has("head_dim")) {
    r.divides("num_attention_heads", config.hidden, config.heads, "hidden_size");
  }
  // transformers' RMSNorm classes are Python ops (LlamaRMSNorm, copied by Mistral,
  // Qwen2/3, Phi3): they keep a float32 copy of x, rstd and the normalized tensor,
  // 6 bytes per value under bf16; traced by scripts/exporter (docs/exporter.md).
  config.rms_norm = RmsNormStyle::kTransformers;
  config.rope_cache = rope_cache_style(c, type);
  if (type == "gemma") {
    // GemmaMLP uses hidden_activation (default gelu_pytorch_tanh), not hidden_act.
    config.mlp_activation = "gelu_tanh";
    config.scale_embeddings = true;
    // GemmaRMSNorm scales in float32, (1 + weight.float()) * n: n is kept as f32.
    config.rms_norm = RmsNormStyle::kTransformersF32;
  }
  if (type == "phi3") {
    config.fused_projections = true;
    // Phi-3 ties nothing and its partial_rotary_factor only changes cos/sin width.
    r.fraction_or("partial_rotary_factor", 1.0);
  }
  if (!r.status().is_ok()) return r.status();
  return config;
}

Result<graph::LayerGraph> hf_llama_family(const HfFields& c, const std::string& type,
                                          const ZooOptions& options) {
  Result<LlamaConfig> config = read_llama_config(c, type);
  if (!config.is_ok()) return config.status();
  graph::LayerGraph graph = build_llama(config.value(), options);
  // Per-layer rotary modules (transformers before 4.45; models/rope_tables.h): each of
  // Mistral's, Phi-3's, Gemma's and Qwen2's layers makes its own cos/sin; Llama's model
  // shares one pair already.
  if (options.rope_modules == RopeModules::kTransformersCached && type != "llama" && type != "qwen3") {
    give_layers_own_rope_tables(graph, "model");
  }
  graph.family = type;
  set_token_sequence(graph, config->max_position);
  if (type == "phi3") {
    graph.lora_targets = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  } else {
    graph.lora_targets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                          "gate_proj", "up_proj", "down_proj"};
  }
  return graph;
}

// The original Qwen (QWenConfig in configuration_qwen.py, remote code):
// hidden_size, num_hidden_layers, num_attention_heads, intermediate_size (w1 and
// w2 take half each), vocab_size, kv_channels (hidden_size / heads: c_attn is
// hidden -> 3 x heads x kv_channels), max_position_embeddings 8192,
// attn_dropout_prob and emb_dropout_prob 0.0, no_bias true.
Result<graph::LayerGraph> hf_qwen_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options) {
  HfReader r(c);
  QwenConfig config;
  config.hidden = r.positive("hidden_size");
  config.layers = r.layers("num_hidden_layers");
  config.heads = r.positive("num_attention_heads");
  const int64_t intermediate = r.positive("intermediate_size");
  config.ffn_half = intermediate / 2;
  config.vocab = r.positive("vocab_size");
  config.dropout = r.probability_or("attn_dropout_prob", 0.0);
  const double embedding_dropout = r.probability_or("emb_dropout_prob", 0.0);
  const int64_t max_position = r.positive_or("max_position_embeddings", 8192);
  r.divides("num_attention_heads", config.hidden, config.heads, "hidden_size");
  const int64_t kv_channels = r.positive_or("kv_channels", config.hidden / config.heads);
  // After an earlier error the sizes are stand-ins (1): these checks still run,
  // and only the first failure is reported.
  r.check(kv_channels * config.heads == config.hidden, "kv_channels",
          "hidden_size / num_attention_heads = " + std::to_string(config.hidden / config.heads) +
              " (headroom builds c_attn as hidden -> 3 x hidden), got " + std::to_string(kv_channels));
  r.check(intermediate % 2 == 0, "intermediate_size",
          "an even count (w1 and w2 take half each), got " + std::to_string(intermediate));
  r.check(r.boolean_or("no_bias", true), "no_bias",
          "true, as every published Qwen config sets it (biases on c_proj, w1 and w2 are not built)");
  r.check(embedding_dropout == config.dropout, "emb_dropout_prob",
          "the same probability as attn_dropout_prob (headroom applies one)");
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_qwen(config, options);
  graph.family = type;
  set_token_sequence(graph, max_position);
  graph.lora_targets = {"c_attn", "c_proj", "w1", "w2"};
  return graph;
}

// GPT-2 (GPT2Config: n_layer 12, n_embd 768, n_head 12, vocab_size 50257,
// n_positions 1024, n_inner null (4 x n_embd), *_pdrop 0.1; embeddings tied).
Result<graph::LayerGraph> hf_gpt2_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options) {
  HfReader r(c);
  GptConfig config;
  config.layers = r.layers_or("n_layer", 12);
  config.hidden = r.positive_or("n_embd", 768);
  config.heads = r.positive_or("n_head", 12);
  config.vocab = r.positive_or("vocab_size", 50257);
  config.positions = r.positive_or("n_positions", 1024);
  config.embedding_dropout = r.probability_or("embd_pdrop", 0.1);
  config.attention_dropout = r.probability_or("attn_pdrop", 0.1);
  config.residual_dropout = r.probability_or("resid_pdrop", 0.1);
  // n_inner: null in the published GPT-2 configs (4 x n_embd); found by the exporter's
  // cross-check, which traces a config that sets it.
  if (c.has("n_inner")) config.inner = r.positive("n_inner");
  r.divides("n_head", config.hidden, config.heads, "n_embd");
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_gpt2_from(config, options);
  graph.family = type;
  set_token_sequence(graph, config.positions);
  graph.lora_targets = {"c_attn", "c_proj", "c_fc"};
  return graph;
}

// BERT / RoBERTa with a sequence-classification head (BertConfig, RobertaConfig:
// 768 hidden, 12 layers, 12 heads, 3072 intermediate, vocab_size 30522 (BERT)
// / 50265 (RoBERTa), 512 positions (RoBERTa's checkpoints say 514: 2 for the
// padding offset), type_vocab_size 2, dropouts 0.1; num_labels =
// len(id2label), 2 by default).
Result<BertConfig> read_hf_bert(const HfFields& c, const std::string& type) {
  HfReader r(c);
  BertConfig config;
  const bool roberta = type == "roberta" || type == "xlm-roberta";
  config.hidden = r.positive_or("hidden_size", 768);
  config.layers = r.layers_or("num_hidden_layers", 12);
  config.heads = r.positive_or("num_attention_heads", 12);
  config.intermediate = r.positive_or("intermediate_size", 3072);
  config.vocab = r.positive_or("vocab_size", roberta ? 50265 : 30522);
  config.positions = r.positive_or("max_position_embeddings", 512);
  config.token_types = r.positive_or("type_vocab_size", 2);
  config.hidden_dropout = r.probability_or("hidden_dropout_prob", 0.1);
  config.attention_dropout = r.probability_or("attention_probs_dropout_prob", 0.1);
  // BertForSequenceClassification and RobertaClassificationHead: classifier_dropout
  // if not None else hidden_dropout_prob.
  config.classifier_dropout = r.probability_or("classifier_dropout", config.hidden_dropout);
  r.divides("num_attention_heads", config.hidden, config.heads, "hidden_size");
  config.labels = 2;
  if (c.has("id2label")) {
    if (!c.json.at("id2label").is_object() || c.json.at("id2label").empty()) {
      r.fail(field_error(c.origin, c.name("id2label"), "an object of labels"));
    } else {
      config.labels = static_cast<int64_t>(c.json.at("id2label").size());
    }
  }
  // BertConfig: layer_norm_eps 1e-12, hidden_act "gelu", position_embedding_type
  // "absolute", pad_token_id 0 (RobertaConfig: pad_token_id 1).
  config.layer_norm_eps = r.positive_number_or("layer_norm_eps", 1e-12, 1.0);
  config.exact_gelu = r.string_or("hidden_act", "gelu") == "gelu";
  config.absolute_positions = r.string_or("position_embedding_type", "absolute") == "absolute";
  config.pad_token = roberta ? 1 : 0;
  if (c.has("pad_token_id") && !c.json.at("pad_token_id").is_null()) {
    const nlohmann::json& pad = c.json.at("pad_token_id");
    const bool valid = pad.is_number_integer() && pad.get<int64_t>() >= 0 && pad.get<int64_t>() < config.vocab;
    r.check(valid, "pad_token_id", "a token id below vocab_size");
    if (valid) config.pad_token = pad.get<int64_t>();
  }
  if (!r.status().is_ok()) return r.status();
  if (roberta) {
    config.prefix = "roberta";
    config.roberta_head = true;
  }
  return config;
}

Result<graph::LayerGraph> hf_bert_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options) {
  Result<BertConfig> read = read_hf_bert(c, type);
  if (!read.is_ok()) return read.status();
  const BertConfig& config = read.value();
  const bool roberta = config.roberta_head;
  graph::LayerGraph graph = build_bert_from(config, options);
  graph.family = type;
  // RoBERTa's positions start after padding_idx + 1 = 2: two rows are never used.
  set_token_sequence(graph, roberta ? config.positions - 2 : config.positions);
  graph.sequence.default_seq = graph.sequence.max_seq;
  graph.lora_targets = {"query", "key", "value", "dense"};
  return graph;
}

// GPT-NeoX / Pythia (GPTNeoXConfig: vocab_size 50432, hidden_size 6144, 44
// layers, 64 heads, intermediate_size 24576, rotary_pct 0.25,
// max_position_embeddings 2048, use_parallel_residual true, attention_bias
// true, attention_dropout 0, hidden_dropout 0, tie_word_embeddings false).
Result<graph::LayerGraph> hf_neox_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options) {
  HfReader r(c);
  NeoxConfig config;
  config.hidden = r.positive("hidden_size");
  config.layers = r.layers("num_hidden_layers");
  config.heads = r.positive("num_attention_heads");
  config.intermediate = r.positive_or("intermediate_size", 4 * config.hidden);
  config.vocab = r.positive("vocab_size");
  config.max_position = r.positive_or("max_position_embeddings", 2048);
  config.rotary_pct = r.fraction_or("rotary_pct", 0.25);
  config.parallel_residual = r.boolean_or("use_parallel_residual", true);
  config.bias = r.boolean_or("attention_bias", true);
  config.tie_embeddings = r.boolean_or("tie_word_embeddings", false);
  config.attention_dropout = r.probability_or("attention_dropout", 0.0);
  config.hidden_dropout = r.probability_or("hidden_dropout", 0.0);
  r.divides("num_attention_heads", config.hidden, config.heads, "hidden_size");
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_neox_from(config, options);
  graph.family = type;
  set_token_sequence(graph, config.max_position);
  graph.lora_targets = {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"};
  return graph;
}

// OPT (OPTConfig: vocab_size 50272, hidden_size 768, 12 layers, ffn_dim 3072,
// 12 heads, max_position_embeddings 2048, do_layer_norm_before true,
// word_embed_proj_dim = hidden_size, dropout 0.1, attention_dropout 0,
// activation_function relu, enable_bias true, tie_word_embeddings true).
Result<graph::LayerGraph> hf_opt_family(const HfFields& c, const std::string& type,
                                        const ZooOptions& options) {
  HfReader r(c);
  OptConfig config;
  config.hidden = r.positive_or("hidden_size", 768);
  config.layers = r.layers_or("num_hidden_layers", 12);
  config.heads = r.positive_or("num_attention_heads", 12);
  config.ffn = r.positive_or("ffn_dim", 3072);
  config.vocab = r.positive_or("vocab_size", 50272);
  config.max_position = r.positive_or("max_position_embeddings", 2048);
  config.embed_dim = r.positive_or("word_embed_proj_dim", config.hidden);
  config.pre_norm = r.boolean_or("do_layer_norm_before", true);
  config.bias = r.boolean_or("enable_bias", true);
  config.dropout = r.probability_or("dropout", 0.1);
  config.attention_dropout = r.probability_or("attention_dropout", 0.0);
  config.tie_embeddings = r.boolean_or("tie_word_embeddings", true);
  const std::string act = r.string_or("activation_function", "relu");
  if (act != "relu" && act != "gelu") {
    r.fail(field_error(c.origin, c.name("activation_function"),
                       "\"relu\" or \"gelu\", got \"" + act + "\""));
  }
  config.activation = act == "gelu" ? "gelu" : "relu";
  r.divides("num_attention_heads", config.hidden, config.heads, "hidden_size");
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_opt_from(config, options);
  graph.family = type;
  set_token_sequence(graph, config.max_position);
  graph.lora_targets = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};
  return graph;
}

}  // namespace headroom::models
