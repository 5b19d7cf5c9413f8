// config.json reader of t5 (T5Config, configuration_t5.py 5.23.0): d_model, d_kv, d_ff,
// num_heads, num_layers, num_decoder_layers (default num_layers), feed_forward_proj
// ("relu", or "gated-ACT": T5 v1.1 and Flan-T5's "gated-gelu" runs gelu_new),
// relative_attention_num_buckets, dropout_rate, tie_word_embeddings.
#include <string>

#include "models/hf_fields.h"
#include "models/t5.h"

namespace headroom::models {

Result<graph::LayerGraph> hf_t5_family(const HfFields& c, const std::string& type, const ZooOptions& options) {
  HfReader r(c);
  T5Config config;
  config.vocab = r.positive_or("vocab_size", 32128);
  config.hidden = r.positive_or("d_model", 512);
  config.head_dim = r.positive_or("d_kv", 64);
  config.ffn = r.positive_or("d_ff", 2048);
  config.heads = r.positive_or("num_heads", 8);
  config.encoder_layers = r.layers_or("num_layers", 6);
  config.decoder_layers = r.layers_or("num_decoder_layers", config.encoder_layers);
  config.buckets = r.positive_or("relative_attention_num_buckets", 32);
  config.dropout = r.probability_or("dropout_rate", 0.1);
  const std::string proj = r.string_or("feed_forward_proj", "relu");
  config.gated = proj.rfind("gated-", 0) == 0;
  const std::string act = config.gated ? proj.substr(6) : proj;
  // T5Config.__post_init__: "gated-gelu" means gelu_new.
  config.activation = config.gated && act == "gelu" ? "gelu_new" : act;
  r.check(config.activation == "relu" || config.activation == "gelu_new" || config.activation == "gelu",
          "feed_forward_proj", "\"relu\", \"gated-gelu\", \"gelu\" or \"gated-relu\", got \"" + proj + "\"");
  const bool tie = r.boolean_or("tie_word_embeddings", true);
  config.scale_decoder_outputs = tie;
  config.tie_lm_head = tie || !options.t5_tie_as_configured;
  r.at_most("num_heads", config.heads * config.head_dim, kMaxHfSize, "num_heads x d_kv");
  r.check(r.boolean_or("is_encoder_decoder", true), "is_encoder_decoder",
          "true (T5ForConditionalGeneration; the encoder alone is not read)");
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_t5(config, options);
  set_t5_metadata(graph);
  graph.family = type;
  return graph;
}

}  // namespace headroom::models
