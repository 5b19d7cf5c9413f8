// config.json reader of MPT (model_type "mpt"): the fields and defaults of
// llm-foundry's MPTConfig (llmfoundry/models/mpt/configuration_mpt.py at b2a43a1;
// the same names in mosaicml/mpt-7b's remote code). What headroom cannot build
// exactly is refused, naming the field.
#include <string>

#include "models/hf_fields.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// attn_config: attn_type multihead_attention, attn_pdrop 0, attn_impl triton,
// qk_ln false, clip_qkv null, prefix_lm false, attn_uses_sequence_id false,
// alibi false (MPTConfig's attn_config_defaults).
void read_attn_config(HfReader& r, const HfFields& attn, MptConfig& config) {
  HfReader a(attn);
  config.attention_dropout = a.probability_or("attn_pdrop", 0.0);
  config.alibi = a.boolean_or("alibi", false);
  const std::string type = a.string_or("attn_type", "multihead_attention");
  a.check(type == "multihead_attention", "attn_type",
          "\"multihead_attention\" (headroom builds MPT's multi-head attention only), got \"" + type + "\"");
  const std::string impl = a.string_or("attn_impl", "triton");
  a.check(impl == "torch" || impl == "flash" || impl == "triton", "attn_impl",
          "\"torch\", \"flash\" or \"triton\" (the run's --attention picks the kernel: eager, sdpa or "
          "triton), got \"" + impl + "\"");
  a.check(!a.boolean_or("qk_ln", false), "qk_ln", "false (LayerNorm on q and k is not built)");
  a.check(!a.boolean_or("prefix_lm", false), "prefix_lm", "false (prefix-LM masks are not built)");
  a.check(!a.boolean_or("attn_uses_sequence_id", false), "attn_uses_sequence_id",
          "false (per-sequence attention masks are not built)");
  // clip_qkv clamps Wqkv's output: a new tensor, and clamp keeps its input.
  a.check(!attn.has("clip_qkv"), "clip_qkv", "null (the clamp of q, k, v is not built)");
  if (!a.status().is_ok()) r.fail(a.status());
}

}  // namespace

Result<graph::LayerGraph> hf_mpt_family(const HfFields& c, const std::string& type,
                                        const ZooOptions& options) {
  HfReader r(c);
  MptConfig config;
  config.hidden = r.positive_or("d_model", 2048);
  config.heads = r.positive_or("n_heads", 16);
  config.layers = r.layers_or("n_layers", 24);
  config.expansion_ratio = r.positive_or("expansion_ratio", 4);
  config.max_seq = r.positive_or("max_seq_len", 2048);
  config.vocab = r.positive_or("vocab_size", 50368);
  config.residual_dropout = r.probability_or("resid_pdrop", 0.0);
  config.embedding_dropout = r.probability_or("emb_pdrop", 0.0);
  config.learned_positions = r.boolean_or("learned_pos_emb", true);
  config.bias = !r.boolean_or("no_bias", false);
  const std::string norm = r.string_or("norm_type", "low_precision_layernorm");
  r.check(norm == "low_precision_layernorm" || norm == "layernorm", "norm_type",
          "\"low_precision_layernorm\" or \"layernorm\", got \"" + norm + "\"");
  config.low_precision_norm = norm == "low_precision_layernorm";
  r.check(r.fraction_or("embedding_fraction", 1.0) == 1.0, "embedding_fraction",
          "1.0 (the shrunk embedding gradient is not built)");
  r.check(r.string_or("fc_type", "torch") == "torch", "fc_type",
          "\"torch\" (Transformer Engine linears are not built)");
  Result<HfFields> ffn = sub_config(c, "ffn_config", true);
  if (ffn.is_ok()) {
    HfReader f(ffn.value());
    const std::string ffn_type = f.string_or("ffn_type", "mptmlp");
    f.check(ffn_type == "mptmlp", "ffn_type", "\"mptmlp\" (GELU MLP), got \"" + ffn_type + "\"");
    if (!f.status().is_ok()) r.fail(f.status());
  } else {
    r.fail(ffn.status());
  }
  Result<HfFields> attn = sub_config(c, "attn_config", true);
  if (attn.is_ok()) {
    read_attn_config(r, attn.value(), config);
  } else {
    r.fail(attn.status());
  }
  r.check(config.learned_positions || config.alibi, "learned_pos_emb",
          "true unless attn_config.alibi is (MPTConfig refuses a model without positions)");
  r.divides("n_heads", config.hidden, config.heads, "d_model");
  r.at_most("expansion_ratio", config.expansion_ratio * config.hidden, kMaxHfSize, "expansion_ratio x d_model");
  if (!r.status().is_ok()) return r.status();
  // MPTConfig.__init__: alibi turns learned positions off.
  if (config.alibi) config.learned_positions = false;
  graph::LayerGraph graph = build_mpt_from(config, options);
  graph.family = type;
  set_token_sequence(graph, config.max_seq);
  graph.lora_targets = {"Wqkv", "out_proj", "up_proj", "down_proj"};
  return graph;
}

}  // namespace headroom::models
