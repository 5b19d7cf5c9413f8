// config.json readers of Gemma 2 (model_type gemma2), Gemma 3 text (gemma3_text) and
// Gemma 3's text_config (gemma3). Field names and defaults as in transformers 5.23.0
// configuration_gemma2.py (Gemma2Config) and configuration_gemma3.py (Gemma3TextConfig).
#include <string>

#include "models/gemma.h"
#include "models/hf_fields.h"

namespace headroom::models {
namespace {

// Gemma2Config's and Gemma3TextConfig's defaults, used inside a gemma3 config's
// text_config (written without its defaults); a top-level config states its sizes.
struct GemmaDefaults {
  int64_t vocab, max_position, sliding_window, pattern;
  std::optional<double> attn_softcap, final_softcap;
};
GemmaDefaults defaults_of(const std::string& type) {
  if (type == "gemma2") return {256000, 8192, 4096, 2, 50.0, 30.0};
  return {262208, 131072, 4096, 6, std::nullopt, std::nullopt};
}

int64_t size_field(HfReader& r, const char* key, int64_t nested_default) {
  return r.fields().path.empty() ? r.positive(key) : r.positive_or(key, nested_default);
}

// A soft-capping value: null turns it off, absent takes the default.
std::optional<double> softcap_field(HfReader& r, const char* key, std::optional<double> fallback) {
  const HfFields& c = r.fields();
  if (c.json.contains(key) && c.json.at(key).is_null()) return std::nullopt;
  if (!c.json.contains(key)) return fallback;
  return r.positive_number_or(key, 1.0, 1e6);
}

// layer_types, or the pattern transformers derives without it: layer i slides
// unless (i + 1) is a multiple of the pattern (2 in Gemma 2, sliding_window_pattern in 3).
std::vector<bool> read_layer_types(HfReader& r, int64_t layers, int64_t pattern) {
  const HfFields& c = r.fields();
  std::vector<bool> sliding;
  if (!c.has("layer_types")) {
    for (int64_t i = 0; i < layers; ++i) sliding.push_back((i + 1) % pattern != 0);
    return sliding;
  }
  const nlohmann::json& types = c.json.at("layer_types");
  const std::string expected = "a list of " + std::to_string(layers) +
                               " \"sliding_attention\" or \"full_attention\" (one per layer)";
  r.check(types.is_array() && static_cast<int64_t>(types.size()) == layers, "layer_types", expected);
  if (!types.is_array()) return sliding;
  for (const nlohmann::json& t : types) {
    const bool known = t == "sliding_attention" || t == "full_attention";
    r.check(known, "layer_types", expected + ", got " + t.dump());
    sliding.push_back(t == "sliding_attention");
  }
  return sliding;
}

// The Llama-style part: sizes, head_dim 256, GeGLU (hidden_activation
// gelu_pytorch_tanh), tied embeddings, GemmaRMSNorm, the scaled embeddings.
LlamaConfig read_gemma_base(HfReader& r, const std::string& type, const GemmaDefaults& d) {
  LlamaConfig base;
  base.hidden = size_field(r, "hidden_size", 2304);
  base.intermediate = size_field(r, "intermediate_size", 9216);
  base.layers = r.fields().path.empty() ? r.layers("num_hidden_layers") : r.layers_or("num_hidden_layers", 26);
  base.heads = size_field(r, "num_attention_heads", 8);
  base.kv_heads = r.positive_or("num_key_value_heads", r.fields().path.empty() ? base.heads : 4);
  base.vocab = size_field(r, "vocab_size", d.vocab);
  base.head_dim = r.positive_or("head_dim", 256);
  base.max_position = r.positive_or("max_position_embeddings", d.max_position);
  base.qkv_bias = r.boolean_or("attention_bias", false);
  base.tie_embeddings = r.boolean_or("tie_word_embeddings", true);
  base.attention_dropout = r.probability_or("attention_dropout", 0.0);
  base.qk_norm = type != "gemma2";
  const std::string act = r.string_or("hidden_activation", "gelu_pytorch_tanh");
  r.check(act == "gelu_pytorch_tanh", "hidden_activation", "gelu_pytorch_tanh (GeGLU), got \"" + act + "\"");
  base.mlp_activation = "gelu_tanh";
  base.scale_embeddings = true;
  base.rms_norm = RmsNormStyle::kTransformersF32;
  r.divides("num_key_value_heads", base.heads, base.kv_heads, "num_attention_heads");
  r.at_most("head_dim", base.heads * base.head_dim, kMaxHfSize, "num_attention_heads x head_dim");
  return base;
}

Result<GemmaConfig> read_text_config(const HfFields& c, const std::string& type) {
  HfReader r(c);
  const GemmaDefaults d = defaults_of(type);
  GemmaConfig config;
  config.base = read_gemma_base(r, type, d);
  config.sliding_window = r.positive_or("sliding_window", d.sliding_window);
  config.query_pre_attn_scalar = r.positive_number_or("query_pre_attn_scalar", 256, 1e9);
  config.attn_softcap = softcap_field(r, "attn_logit_softcapping", d.attn_softcap);
  config.final_softcap = softcap_field(r, "final_logit_softcapping", d.final_softcap);
  const int64_t pattern = type == "gemma2" ? 2 : r.positive_or("sliding_window_pattern", d.pattern);
  config.sliding = read_layer_types(r, config.base.layers, pattern);
  config.local_rope = type != "gemma2";
  // EmbeddingGemma's bidirectional attention is an encoder: not a causal LM.
  r.check(!r.boolean_or("use_bidirectional_attention", false), "use_bidirectional_attention",
          "false or absent (bidirectional Gemma, EmbeddingGemma, is not built)");
  if (!r.status().is_ok()) return r.status();
  return config;
}

}  // namespace

Result<GemmaConfig> read_gemma_config(const HfFields& c, const std::string& type) {
  if (type != "gemma3") return read_text_config(c, type);
  Result<HfFields> text = sub_config(c, "text_config", true);
  if (!text.is_ok()) return text.status();
  Result<GemmaConfig> config = read_text_config(text.value(), "gemma3_text");
  if (!config.is_ok()) return config;
  if (c.has("vision_config")) {
    return unsupported_field(
        c.origin, "vision_config",
        "no vision tower: Gemma3ForConditionalGeneration's SigLIP vision tower and projector are not built; "
        "for the language model alone, give its text_config as a config.json with model_type \"gemma3_text\" "
        "(Gemma3ForCausalLM)");
  }
  return config;
}

Result<graph::LayerGraph> hf_gemma_family(const HfFields& c, const std::string& type,
                                          const ZooOptions& options) {
  Result<GemmaConfig> config = read_gemma_config(c, type);
  if (!config.is_ok()) return config.status();
  graph::LayerGraph graph = build_gemma(config.value(), options);
  graph.family = type;
  set_token_sequence(graph, config->base.max_position);
  graph.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return graph;
}

}  // namespace headroom::models
