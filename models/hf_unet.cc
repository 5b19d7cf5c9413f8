// config.json reader of diffusers' UNet2DConditionModel as Stable Diffusion XL
// configures it (stabilityai/stable-diffusion-xl-base-1.0 unet/config.json).
// Every key of UNet2DConditionModel.__init__ (diffusers 0.39.0
// models/unets/unet_2d_condition.py) is read, checked against the values headroom
// builds, or refused by name; any other key is refused too, since from_config would
// drop it silently.
#include <set>
#include <string>
#include <vector>

#include "models/hf_fields.h"
#include "models/flux_text.h"
#include "models/sdxl_unet.h"

namespace headroom::models {
namespace {

// Keys headroom reads (models/sdxl_unet.h UnetConfig).
const std::set<std::string>& read_keys() {
  static const std::set<std::string> kKeys = {
      "in_channels",         "out_channels",       "block_out_channels",
      "layers_per_block",    "norm_num_groups",    "cross_attention_dim",
      "transformer_layers_per_block", "attention_head_dim", "num_attention_heads",
      "down_block_types",    "up_block_types",     "mid_block_type",
      "addition_embed_type", "addition_time_embed_dim", "projection_class_embeddings_input_dim",
      "time_embedding_dim",  "use_linear_projection"};
  return kKeys;
}

// Keys whose values change no tensor's size: scalars of the forward (time
// projection phase, scale factors, eps), the inference resolution, and the
// head count of an add embedding SDXL does not build.
const std::set<std::string>& free_keys() {
  static const std::set<std::string> kKeys = {
      "sample_size",  "center_input_sample", "flip_sin_to_cos", "freq_shift", "mid_block_scale_factor",
      "norm_eps",     "resnet_out_scale_factor", "addition_embed_type_num_heads", "upcast_attention"};
  return kKeys;
}

// Keys held to the one value headroom builds (null, where listed, is the default).
struct FixedKey {
  const char* key;
  std::vector<nlohmann::json> accepted;
  const char* why;  // what another value would build
};

const std::vector<FixedKey>& fixed_keys() {
  static const std::vector<FixedKey> kKeys = {
      {"only_cross_attention", {false, nullptr}, "attn1 over encoder_hidden_states"},
      {"downsample_padding", {1, nullptr}, "an F.pad copy before each downsampler"},
      {"dropout", {0.0, 0, nullptr}, "dropout masks in every resnet"},
      {"act_fn", {"silu", nullptr}, "another activation"},
      {"reverse_transformer_layers_per_block", {nullptr}, "up blocks of their own depths"},
      {"encoder_hid_dim", {nullptr}, "an encoder_hid_proj over encoder_hidden_states"},
      {"encoder_hid_dim_type", {nullptr}, "an encoder_hid_proj over encoder_hidden_states"},
      {"dual_cross_attention", {false, nullptr}, "DualTransformer2DModel"},
      {"class_embed_type", {nullptr}, "a class embedding"},
      {"num_class_embeds", {nullptr}, "a class embedding"},
      {"resnet_time_scale_shift", {"default", nullptr}, "scale-shift time conditioning"},
      {"resnet_skip_time_act", {false, nullptr}, "resnets without SiLU on temb"},
      {"time_embedding_type", {"positional", nullptr}, "Fourier time features"},
      {"time_embedding_act_fn", {nullptr}, "an activation after the time embedding"},
      {"timestep_post_act", {nullptr}, "an activation inside the time embedding"},
      {"time_cond_proj_dim", {nullptr}, "a timestep_cond projection (LCM)"},
      {"conv_in_kernel", {3, nullptr}, "another conv_in"},
      {"conv_out_kernel", {3, nullptr}, "another conv_out"},
      {"attention_type", {"default", nullptr}, "gated (GLIGEN) attention"},
      {"class_embeddings_concat", {false, nullptr}, "a class embedding"},
      {"mid_block_only_cross_attention", {false, nullptr}, "a cross-attention-only mid block"},
      {"cross_attention_norm", {nullptr}, "a norm over encoder_hidden_states"},
  };
  return kKeys;
}

bool accepts(const FixedKey& fixed, const nlohmann::json& value) {
  for (const nlohmann::json& ok : fixed.accepted) {
    if (value == ok) return true;
  }
  return false;
}

void check_keys(HfReader& r, const HfFields& c) {
  std::set<std::string> fixed_names;
  for (const FixedKey& fixed : fixed_keys()) {
    fixed_names.insert(fixed.key);
    if (!c.json.contains(fixed.key) || accepts(fixed, c.json.at(fixed.key))) continue;
    nlohmann::json accepted = nlohmann::json::array();
    for (const nlohmann::json& ok : fixed.accepted) accepted.push_back(ok);
    r.fail(unsupported_field(c.origin, fixed.key,
                             "one of " + accepted.dump() + " (as SDXL's UNet), got " + c.json.at(fixed.key).dump() +
                                 "; another value builds " + fixed.why + ", which headroom does not model"));
  }
  for (const auto& [key, value] : c.json.items()) {
    if (key.rfind('_', 0) == 0 || read_keys().count(key) || free_keys().count(key) || fixed_names.count(key)) {
      continue;  // "_class_name", "_diffusers_version"
    }
    r.fail(unsupported_field(c.origin, key,
                             "only UNet2DConditionModel's own keys (diffusers 0.39.0); a key headroom does not "
                             "know may change the model's memory"));
  }
}

// A positive integer, or a list of one per level (an integer is repeated).
std::vector<int64_t> per_level(HfReader& r, const HfFields& c, const char* key, int64_t fallback, size_t levels) {
  const std::string expected = "a positive integer or a list of " + std::to_string(levels) + " of them (one per block)";
  if (!c.has(key)) return std::vector<int64_t>(levels, fallback);
  const nlohmann::json& value = c.json.at(key);
  const auto valid = [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= kMaxHfSize;
  };
  if (valid(value)) return std::vector<int64_t>(levels, value.get<int64_t>());
  std::vector<int64_t> out;
  if (value.is_array() && value.size() == levels) {
    for (const nlohmann::json& v : value) {
      if (valid(v)) out.push_back(v.get<int64_t>());
    }
  }
  r.check(out.size() == levels, key, expected + ", got " + value.dump());
  return out.size() == levels ? out : std::vector<int64_t>(levels, 1);
}

std::vector<int64_t> read_channels(HfReader& r, const HfFields& c) {
  std::vector<int64_t> out;
  const nlohmann::json value = c.has("block_out_channels") ? c.json.at("block_out_channels")
                                                           : nlohmann::json{320, 640, 1280, 1280};
  if (value.is_array() && !value.empty() && value.size() <= 8) {
    for (const nlohmann::json& v : value) {
      if (v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= kMaxHfSize) out.push_back(v.get<int64_t>());
    }
  }
  r.check(!value.empty() && out.size() == value.size(), "block_out_channels",
          "a list of 1 to 8 positive channel counts, got " + value.dump());
  return out.size() == value.size() && !out.empty() ? out : std::vector<int64_t>{1};
}

// down_block_types / up_block_types: each `plain` or `cross`.
std::vector<bool> block_types(HfReader& r, const HfFields& c, const char* key, const char* plain, const char* cross,
                              const nlohmann::json& fallback, size_t levels) {
  const nlohmann::json value = c.has(key) ? c.json.at(key) : fallback;
  std::vector<bool> out;
  if (value.is_array() && value.size() == levels) {
    for (const nlohmann::json& v : value) {
      if (v == plain || v == cross) out.push_back(v == cross);
    }
  }
  if (out.size() != levels) {
    r.fail(unsupported_field(c.origin, key,
                             "a list of " + std::to_string(levels) + " block types, each \"" + plain + "\" or \"" +
                                 cross + "\" (what SDXL's UNet uses), got " + value.dump()));
  }
  return out.size() == levels ? out : std::vector<bool>(levels, false);
}

void read_sizes(HfReader& r, const HfFields& c, UnetConfig& f) {
  f.in_channels = r.positive_or("in_channels", 4);
  f.out_channels = r.positive_or("out_channels", 4);
  f.channels = read_channels(r, c);
  const size_t levels = f.channels.size();
  f.layers_per_block = r.layers_or("layers_per_block", 2);
  f.groups = r.positive_or("norm_num_groups", 32);
  for (int64_t width : f.channels) r.divides("norm_num_groups", width, f.groups, "every block_out_channels");
  f.cross_dim = r.positive_or("cross_attention_dim", 1280);
  f.transformer_layers = per_level(r, c, "transformer_layers_per_block", 1, levels);
  for (int64_t n : f.transformer_layers) r.at_most("transformer_layers_per_block", n, kMaxHfLayers, "a layer count");
  // UNet2DConditionModel.__init__ raises on num_attention_heads, then sets
  // `num_attention_heads = num_attention_heads or attention_head_dim`: the
  // config's attention_head_dim is the head count (diffusers issue 2011).
  r.check(!c.has("num_attention_heads"), "num_attention_heads",
          "null (UNet2DConditionModel raises on it; attention_head_dim holds the head counts)");
  f.heads = per_level(r, c, "attention_head_dim", 8, levels);
  for (size_t l = 0; l < levels; ++l) r.divides("attention_head_dim", f.channels[l], f.heads[l], "block_out_channels");
  f.cross_attention_down = block_types(r, c, "down_block_types", "DownBlock2D", "CrossAttnDownBlock2D",
                                       {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                        "DownBlock2D"},
                                       levels);
  f.cross_attention_up = block_types(r, c, "up_block_types", "UpBlock2D", "CrossAttnUpBlock2D",
                                     {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"},
                                     levels);
}

// The "text_time" add embedding: addition_time_embed_dim per time id, and the
// pooled text embedding's width = projection_class_embeddings_input_dim - 6 x that.
void read_addition(HfReader& r, const HfFields& c, UnetConfig& f) {
  const std::string type = r.string_or("addition_embed_type", "");
  if (type != "text_time") {
    r.fail(unsupported_field(c.origin, "addition_embed_type",
                             "\"text_time\" (SDXL's pooled text + time ids), got \"" + type + "\""));
    return;
  }
  f.addition_time_dim = r.positive_or("addition_time_embed_dim", 256);
  r.check(c.has("addition_time_embed_dim"), "addition_time_embed_dim", "an integer for \"text_time\"");
  f.addition_input_dim = r.positive_or("projection_class_embeddings_input_dim", 2816);
  r.check(c.has("projection_class_embeddings_input_dim"), "projection_class_embeddings_input_dim",
          "an integer for \"text_time\"");
  r.check(f.addition_input_dim > kSdxlTimeIds * f.addition_time_dim, "projection_class_embeddings_input_dim",
          "more than 6 x addition_time_embed_dim (" + std::to_string(kSdxlTimeIds * f.addition_time_dim) +
              "): the pooled text embedding's width and the six time ids'");
}

void read_structure(HfReader& r, const HfFields& c, const UnetConfig& f) {
  const std::string mid = r.string_or("mid_block_type", "UNetMidBlock2DCrossAttn");
  if (mid != "UNetMidBlock2DCrossAttn") {
    r.fail(unsupported_field(c.origin, "mid_block_type", "\"UNetMidBlock2DCrossAttn\", got \"" + mid + "\""));
  }
  // use_linear_projection false builds 1x1 Conv2d proj_in / proj_out.
  if (!r.boolean_or("use_linear_projection", false)) {
    r.fail(unsupported_field(c.origin, "use_linear_projection", "true (SDXL's linear proj_in / proj_out)"));
  }
  const int64_t temb = r.positive_or("time_embedding_dim", 4 * f.channels.front());
  r.check(temb == 4 * f.channels.front(), "time_embedding_dim",
          "null or 4 x block_out_channels[0] (" + std::to_string(4 * f.channels.front()) + ")");
}

// The resident encoders are SDXL base's (models/sdxl_encoders.h): their outputs must
// be the widths the UNet reads.
Status check_resident_encoders(const HfFields& c, const UnetConfig& f, const ZooOptions& options) {
  if (options.precomputed_text_embeddings) return Status::ok();
  const int64_t prompt = kClipL.hidden + kClipBigG.hidden;
  if (f.cross_dim != prompt) {
    return unsupported_field(c.origin, "cross_attention_dim",
                             std::to_string(prompt) + " (SDXL's CLIP-L and CLIP-bigG states, the resident text "
                             "encoders precomputed_text_embeddings false builds), got " + std::to_string(f.cross_dim));
  }
  const int64_t text = f.addition_input_dim - kSdxlTimeIds * f.addition_time_dim;
  if (text != kClipBigG.projection) {
    return unsupported_field(c.origin, "projection_class_embeddings_input_dim",
                             std::to_string(kClipBigG.projection + kSdxlTimeIds * f.addition_time_dim) +
                                 " (CLIP-bigG's pooled 1280 and six time ids, for the resident text encoders), got " +
                                 std::to_string(f.addition_input_dim));
  }
  return Status::ok();
}

}  // namespace

// Defaults: UNet2DConditionModel.__init__ (diffusers 0.39.0).
Result<graph::LayerGraph> hf_unet_family(const HfFields& c, const std::string& type, const ZooOptions& options) {
  HfReader r(c);
  check_keys(r, c);
  UnetConfig f;
  read_sizes(r, c, f);
  read_addition(r, c, f);
  read_structure(r, c, f);
  if (!r.status().is_ok()) return r.status();
  if (Status encoders = check_resident_encoders(c, f, options); !encoders.is_ok()) return encoders;
  graph::LayerGraph graph = build_unet(f, options);
  graph.family = "sdxl";
  graph.sequence.unit = "image";
  // 8x VAE downsampling, then 2x per downsampler: S is the deepest map.
  graph.sequence.patch_px = 8 << (f.channels.size() - 1);
  graph.sequence.images = 1;
  graph.sequence.default_resolution = 1024;
  const int64_t side = graph.sequence.default_resolution / graph.sequence.patch_px;
  graph.sequence.default_seq = side * side;
  // No position table bounds the UNet; 4096 px keeps the builder's sizes small.
  graph.sequence.max_seq = (4096 / graph.sequence.patch_px) * (4096 / graph.sequence.patch_px);
  graph.lora_targets = sdxl_lora_targets();
  (void)type;
  return graph;
}

}  // namespace headroom::models
