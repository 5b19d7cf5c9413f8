// config.json reader of diffusers' SD3Transformer2DModel (Stable Diffusion 3
// Medium, 3.5 Medium, 3.5 Large): every key of SD3Transformer2DModel.__init__
// (diffusers 0.39.0 transformer_sd3.py) is read or checked; any other key is
// refused by name, since from_config would drop it silently.
#include <set>
#include <string>

#include "models/hf_fields.h"
#include "models/sd3.h"

namespace headroom::models {
namespace {

// SD3Transformer2DModel.__init__'s parameters.
const std::set<std::string>& sd3_keys() {
  static const std::set<std::string> kKeys = {
      "sample_size",          "patch_size",          "in_channels",         "num_layers",
      "attention_head_dim",   "num_attention_heads", "joint_attention_dim", "caption_projection_dim",
      "pooled_projection_dim", "out_channels",       "pos_embed_max_size",  "dual_attention_layers",
      "qk_norm"};
  return kKeys;
}

void refuse_unknown_keys(HfReader& r, const HfFields& c) {
  for (const auto& [key, value] : c.json.items()) {
    if (key.rfind('_', 0) == 0 || sd3_keys().count(key)) continue;  // "_class_name", "_diffusers_version"
    r.fail(unsupported_field(c.origin, key,
                             "only SD3Transformer2DModel's own keys (diffusers 0.39.0: sample_size, patch_size, "
                             "in_channels, num_layers, attention_head_dim, num_attention_heads, "
                             "joint_attention_dim, caption_projection_dim, pooled_projection_dim, out_channels, "
                             "pos_embed_max_size, dual_attention_layers, qk_norm); a key headroom does not know "
                             "may change the model's memory"));
  }
}

// dual_attention_layers: block indices in [0, num_layers).
void read_dual_layers(HfReader& r, const HfFields& c, Sd3Config& f) {
  if (!c.has("dual_attention_layers")) return;
  const nlohmann::json& list = c.json.at("dual_attention_layers");
  const std::string expected = "a list of block indices in [0, num_layers = " + std::to_string(f.layers) + ")";
  if (!list.is_array()) return r.check(false, "dual_attention_layers", expected);
  for (const nlohmann::json& index : list) {
    const bool valid = index.is_number_integer() && index.get<int64_t>() >= 0 && index.get<int64_t>() < f.layers;
    r.check(valid, "dual_attention_layers", expected + ", got " + index.dump());
    if (valid) f.dual_attention_layers.push_back(index.get<int64_t>());
  }
}

void read_qk_norm(HfReader& r, const HfFields& c, Sd3Config& f) {
  if (!c.has("qk_norm")) return;
  const std::string norm = r.string_or("qk_norm", "");
  // Attention(qk_norm="rms_norm") builds diffusers' RMSNorm, written as Python ops.
  if (norm == "rms_norm") {
    f.qk_norm = QkNorm::kDiffusers;
  } else {
    r.fail(unsupported_field(c.origin, "qk_norm",
                             "null or \"rms_norm\" (what the published SD3 and SD3.5 configs use), got \"" +
                                 norm + "\""));
  }
}

}  // namespace

// Defaults: SD3Transformer2DModel.__init__ (sample_size 128, patch_size 2,
// in_channels 16, num_layers 18, attention_head_dim 64, num_attention_heads 18,
// joint_attention_dim 4096, caption_projection_dim 1152, pooled_projection_dim
// 2048, out_channels 16, pos_embed_max_size 96, dual_attention_layers (), qk_norm None).
Result<graph::LayerGraph> hf_sd3_family(const HfFields& c, const std::string& type, const ZooOptions& options) {
  HfReader r(c);
  refuse_unknown_keys(r, c);
  Sd3Config f = sd3_default_config();
  f.patch = r.positive_or("patch_size", 2);
  f.in_channels = r.positive_or("in_channels", 16);
  f.out_channels = r.positive_or("out_channels", f.in_channels);
  f.layers = r.layers_or("num_layers", 18);
  f.head_dim = r.positive_or("attention_head_dim", 64);
  f.heads = r.positive_or("num_attention_heads", 18);
  f.joint_dim = r.positive_or("joint_attention_dim", 4096);
  f.pooled_dim = r.positive_or("pooled_projection_dim", 2048);
  f.pos_embed_max = r.positive_or("pos_embed_max_size", 96);
  r.positive_or("sample_size", 128);  // only the pos_embed table's size when pos_embed_max_size is null
  f.hidden = f.heads * f.head_dim;
  r.at_most("attention_head_dim", f.hidden, kMaxHfSize, "num_attention_heads x attention_head_dim");
  r.at_most("pos_embed_max_size", f.pos_embed_max, kMaxHfPatchesPerSide, "a latent side in patches");
  // The blocks read the context embedder's output at inner_dim: any other width fails in diffusers.
  r.check(r.positive_or("caption_projection_dim", 1152) == f.hidden, "caption_projection_dim",
          "num_attention_heads x attention_head_dim (" + std::to_string(f.hidden) + ")");
  f.mlp = 4 * f.hidden;  // FeedForward(dim, activation_fn="gelu-approximate"): mult 4
  read_dual_layers(r, c, f);
  read_qk_norm(r, c, f);
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_sd3(f, options);
  graph.family = "sd3";
  graph.sequence.unit = "image";
  graph.sequence.patch_px = 8 * f.patch;  // 8x VAE downsampling, then patch x patch
  graph.sequence.images = 1;
  graph.sequence.default_resolution = 1024;
  graph.sequence.default_seq = (1024 / graph.sequence.patch_px) * (1024 / graph.sequence.patch_px);
  graph.sequence.max_seq = f.pos_embed_max * f.pos_embed_max;  // cropped_pos_embed refuses larger latents
  // train_dreambooth_lora_sd3.py's default --lora_layers: the joint attention's projections.
  graph.lora_targets = {"attn.to_q",       "attn.to_k",       "attn.to_v",       "attn.to_out.0",
                        "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"};
  (void)type;
  return graph;
}

}  // namespace headroom::models
