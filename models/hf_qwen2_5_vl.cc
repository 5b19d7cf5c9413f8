// config.json reader of qwen2_5_vl (Qwen2_5_VLConfig, configuration_qwen2_5_vl.py
// 5.23.0): the text fields at the top level (the Hub's configs, written by
// transformers 4.x; Qwen2_5_VLConfig.__post_init__ pops them into text_config) or
// under text_config (transformers 5.x saves), and vision_config with
// Qwen2_5_VLVisionConfig's defaults.
#include <string>
#include <vector>

#include "models/hf_fields.h"
#include "models/qwen2_5_vl.h"

namespace headroom::models {
namespace {

// fullatt_block_indexes: block indexes in [0, depth), or the class default.
std::vector<int64_t> read_full_blocks(HfReader& r, int64_t depth) {
  const HfFields& c = r.fields();
  if (!c.has("fullatt_block_indexes")) return {7, 15, 23, 31};
  const nlohmann::json& list = c.json.at("fullatt_block_indexes");
  std::vector<int64_t> out;
  bool ok = list.is_array();
  for (const nlohmann::json& value : ok ? list : nlohmann::json::array()) {
    ok = ok && value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < depth;
    if (ok) out.push_back(value.get<int64_t>());
  }
  r.check(ok, "fullatt_block_indexes", "a list of block indexes in [0, depth = " + std::to_string(depth) + ")");
  return out;
}

// Qwen2_5_VLVisionConfig: depth 32, hidden_size 3584 (1280 in every published
// config), intermediate_size 3420, num_heads 16, in_channels 3, patch_size 14,
// spatial_merge_size 2, temporal_patch_size 2, window_size 112, out_hidden_size
// 3584, fullatt_block_indexes (7, 15, 23, 31), hidden_act silu.
Result<Qwen25VlVision> read_vision(const HfFields& c) {
  HfReader r(c);
  Qwen25VlVision v;
  v.layers = r.layers_or("depth", 32);
  v.hidden = r.positive_or("hidden_size", 3584);
  v.mlp = r.positive_or("intermediate_size", 3420);
  v.heads = r.positive_or("num_heads", 16);
  v.patch = r.positive_or("patch_size", 14);
  v.temporal_patch = r.positive_or("temporal_patch_size", 2);
  v.merge = r.positive_or("spatial_merge_size", 2);
  v.window = r.positive_or("window_size", 112);
  v.out_hidden = r.positive_or("out_hidden_size", 3584);
  v.full_attention_blocks = read_full_blocks(r, v.layers);
  r.divides("num_heads", v.hidden, v.heads, "hidden_size");
  r.check(r.positive_or("in_channels", 3) == 3, "in_channels", "3 (RGB)");
  r.check(r.string_or("hidden_act", "silu") == "silu", "hidden_act", "\"silu\" (the only vision MLP built)");
  r.at_most("patch_size", v.patch * v.merge, 4096, "patch_size x spatial_merge_size");
  if (!r.status().is_ok()) return r.status();
  return v;
}

}  // namespace

Result<graph::LayerGraph> hf_qwen25vl_family(const HfFields& c, const std::string& type, const ZooOptions& options) {
  Result<HfFields> vision_fields = sub_config(c, "vision_config", true);
  if (!vision_fields.is_ok()) return vision_fields.status();
  Result<Qwen25VlVision> vision = read_vision(vision_fields.value());
  if (!vision.is_ok()) return vision.status();
  // Hub configs are flat (Qwen2_5_VLConfig.__post_init__: "Hub configs are saved as
  // flat dicts"); transformers 5.x writes text_config.
  Result<HfFields> text_fields = c.has("text_config") ? sub_config(c, "text_config", false) : Result<HfFields>(c);
  if (!text_fields.is_ok()) return text_fields.status();
  Result<LlamaConfig> text = read_llama_config(text_fields.value(), "qwen2");
  if (!text.is_ok()) return text.status();
  HfReader r(c);
  Qwen25VlConfig config;
  config.vision = vision.value();
  config.text = text.value();
  config.text.rope_cache = RopeCacheStyle{};  // Qwen2_5_VLRotaryEmbedding computes cos/sin per forward
  // Pre-5 saves put tie_word_embeddings in text_config; 5.23.0 reads the outer one
  // and forwards a true inner one (Qwen2_5_VLConfig.__post_init__).
  config.text.tie_embeddings = config.text.tie_embeddings || r.boolean_or("tie_word_embeddings", false);
  if (config.vision.out_hidden != config.text.hidden) {
    r.fail(field_error(c.origin, "vision_config.out_hidden_size",
                       "the text hidden_size (" + std::to_string(config.text.hidden) +
                           "): the merger's output replaces token embeddings"));
  }
  if (!r.status().is_ok()) return r.status();
  const int64_t side = options.image_side.value_or(kQwen25VlDefaultSide);
  config.image = qwen25vl_image(side, side, config.vision);
  graph::LayerGraph graph = build_qwen25vl(config, options);
  set_qwen25vl_metadata(graph, config);
  graph.family = type;
  return graph;
}

}  // namespace headroom::models
