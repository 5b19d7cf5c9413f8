// config.json readers of the image families: vit, clip / clip_vision_model,
// siglip / siglip_vision_model, llava, resnet, and diffusers' FluxTransformer2DModel.
// Field names and defaults as in transformers' ViTConfig, CLIPVisionConfig,
// CLIPTextConfig, SiglipVisionConfig, SiglipTextConfig, LlavaConfig, ResNetConfig
// and diffusers' FluxTransformer2DModel.__init__.
#include <string>
#include <vector>

#include "models/flux.h"
#include "models/hf_fields.h"
#include "models/layers.h"
#include "models/resnet.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

struct VisionFields {
  int64_t hidden, layers, heads, mlp, image, patch;
};

// The sizes every vision config has; defaults of `d` (transformers' class defaults).
VisionFields read_vision(HfReader& r, const VisionFields& d) {
  VisionFields v;
  v.hidden = r.positive_or("hidden_size", d.hidden);
  v.layers = r.layers_or("num_hidden_layers", d.layers);
  v.heads = r.positive_or("num_attention_heads", d.heads);
  v.mlp = r.positive_or("intermediate_size", d.mlp);
  v.image = r.positive_or("image_size", d.image);
  v.patch = r.positive_or("patch_size", d.patch);
  r.divides("num_attention_heads", v.hidden, v.heads, "hidden_size");
  r.divides("patch_size", v.image, v.patch, "image_size");
  r.at_most("image_size", v.image / v.patch, kMaxHfPatchesPerSide, "image_size / patch_size");
  if (r.positive_or("num_channels", 3) != 3) {
    r.fail(field_error(r.fields().origin, r.fields().name("num_channels"), "3 (RGB)"));
  }
  return v;
}

VisionSpec spec_of(const VisionFields& v, VisionStyle style, const std::string& prefix,
                   int64_t extra_tokens) {
  VisionSpec s;
  s.style = style;
  s.prefix = prefix;
  s.hidden = v.hidden;
  s.layers = s.layers_to_run = v.layers;
  s.heads = v.heads;
  s.mlp = v.mlp;
  s.patch = v.patch;
  s.positions = (v.image / v.patch) * (v.image / v.patch) + extra_tokens;
  s.rows = tokens();
  s.patch_rows = tokens();
  s.scores_per_head = square_tokens();
  s.post_layernorm = style != VisionStyle::kVit;
  s.fp32_pixels = true;  // the image processor's float32 batch (VisionSpec::fp32_pixels)
  return s;
}

// The classifier's classes: len(id2label), 2 when the config has none
// (PretrainedConfig's default).
int64_t read_labels(HfReader& r, const HfFields& c) {
  if (!c.has("id2label")) return 2;
  if (!c.json.at("id2label").is_object() || c.json.at("id2label").empty()) {
    r.fail(field_error(c.origin, c.name("id2label"), "an object of labels"));
    return 2;
  }
  return static_cast<int64_t>(c.json.at("id2label").size());
}

// ViTConfig's and Dinov2Config's hidden_dropout_prob and attention_probs_dropout_prob (0).
void read_vit_dropouts(HfReader& r, VisionSpec& s) {
  s.dropout = r.probability_or("hidden_dropout_prob", 0.0);
  s.attention_dropout = r.probability_or("attention_probs_dropout_prob", 0.0);
}

// ViTForImageClassification or Dinov2ForImageClassification (by s.style): the
// image sequence with its class token, LoRA on the attention and dense layers.
graph::LayerGraph vit_classifier_graph(const VisionSpec& s, const VisionFields& v, int64_t labels,
                                       const std::string& type, const ZooOptions& options) {
  graph::LayerGraph graph = build_vit_from(s, labels, options);
  graph.family = type;
  set_image_sequence(graph, v.patch, v.image, 1);
  graph.lora_targets = {"query", "key", "value", "dense"};
  return graph;
}

// A list of `count` positive integers of at most `max` (ResNetConfig's
// hidden_sizes and depths), or `fallback` when missing.
std::vector<int64_t> positive_list_or(HfReader& r, const char* key, std::vector<int64_t> fallback, int64_t max) {
  const HfFields& c = r.fields();
  if (!c.has(key)) return fallback;
  const nlohmann::json& list = c.json.at(key);
  std::vector<int64_t> out;
  if (list.is_array() && list.size() == fallback.size()) {
    for (const nlohmann::json& value : list) {
      if (!value.is_number_integer() || value.get<int64_t>() <= 0 || value.get<int64_t>() > max) break;
      out.push_back(value.get<int64_t>());
    }
  }
  if (out.size() == fallback.size()) return out;
  r.fail(field_error(c.origin, c.name(key),
                     "a list of " + std::to_string(fallback.size()) + " positive integers of at most " +
                         std::to_string(max) + " (one per stage)"));
  return fallback;
}

// CLIPVisionConfig: 768 hidden, 12 layers, 12 heads, 3072 intermediate, 224 px, patch 32.
constexpr VisionFields kClipVisionDefaults{768, 12, 12, 3072, 224, 32};
// SiglipVisionConfig: as CLIP's with patch 16.
constexpr VisionFields kSiglipVisionDefaults{768, 12, 12, 3072, 224, 16};

}  // namespace

// ViTForImageClassification (ViTConfig: 768 hidden, 12 layers, 12 heads, 3072
// intermediate, 224 px, patch 16, dropouts 0, qkv_bias true; labels = len(id2label), 2 by default).
Result<HfVitClassifier> read_hf_vit_classifier(const HfFields& c) {
  HfReader r(c);
  const VisionFields v = read_vision(r, VisionFields{768, 12, 12, 3072, 224, 16});
  HfVitClassifier out;
  out.spec = spec_of(v, VisionStyle::kVit, "vit", 1);
  read_vit_dropouts(r, out.spec);
  r.check(r.boolean_or("qkv_bias", true), "qkv_bias", "true (the only ViT built)");
  out.classes = read_labels(r, c);
  out.image = v.image;
  if (!r.status().is_ok()) return r.status();
  return out;
}

Result<graph::LayerGraph> hf_vit_family(const HfFields& c, const std::string& type,
                                        const ZooOptions& options) {
  Result<HfVitClassifier> vit = read_hf_vit_classifier(c);
  if (!vit.is_ok()) return vit.status();
  const VisionSpec& s = vit->spec;
  const VisionFields v{s.hidden, s.layers, s.heads, s.mlp, vit->image, s.patch};
  return vit_classifier_graph(s, v, vit->classes, type, options);
}

// Dinov2ForImageClassification (Dinov2Config: 768 hidden, 12 layers, 12 heads,
// mlp_ratio 4, image 224, patch 14, qkv_bias true, layerscale_value 1.0,
// use_swiglu_ffn false, dropouts 0; labels = len(id2label), 2 by default). The
// SwiGLU width is int(hidden * mlp_ratio) * 2/3 rounded up to a multiple of 8
// (Dinov2SwiGLUFFN), the plain MLP's int(hidden * mlp_ratio).
Result<graph::LayerGraph> hf_dinov2_family(const HfFields& c, const std::string& type,
                                           const ZooOptions& options) {
  HfReader r(c);
  VisionFields v = read_vision(r, VisionFields{768, 12, 12, 3072, 224, 14});
  const double ratio = r.positive_number_or("mlp_ratio", 4.0, 64.0);
  const bool swiglu = r.boolean_or("use_swiglu_ffn", false);
  const int64_t plain = static_cast<int64_t>(static_cast<double>(v.hidden) * ratio);
  v.mlp = swiglu ? (plain * 2 / 3 + 7) / 8 * 8 : plain;
  VisionSpec s = spec_of(v, VisionStyle::kDinov2, "dinov2", 1);
  s.layer_scale = true;
  s.swiglu = swiglu;
  read_vit_dropouts(r, s);
  r.check(r.boolean_or("qkv_bias", true), "qkv_bias", "true (the only DINOv2 built)");
  r.check(r.probability_or("drop_path_rate", 0.0) == 0, "drop_path_rate", "0 (stochastic depth is not built)");
  const int64_t labels = read_labels(r, c);
  if (!r.status().is_ok()) return r.status();
  return vit_classifier_graph(s, v, labels, type, options);
}

// CLIPModel / SiglipModel (text_config + vision_config), or the vision model
// alone (clip_vision_model / siglip_vision_model, fields at the top level).
// CLIPTextConfig: vocab_size 49408, hidden 512, intermediate 2048, 12 layers, 8
// heads, 77 positions; CLIPConfig projection_dim 512. SiglipTextConfig:
// vocab_size 32000, hidden 768, intermediate 3072, 12 layers, 12 heads, 64 positions.
Result<HfClip> read_hf_clip(const HfFields& c, const std::string& type) {
  const bool siglip = type.rfind("siglip", 0) == 0;
  const bool vision_only = type.find("vision_model") != std::string::npos;
  Result<HfFields> vision_fields =
      vision_only ? Result<HfFields>(c) : sub_config(c, "vision_config", true);
  if (!vision_fields.is_ok()) return vision_fields.status();
  HfReader vr(vision_fields.value());
  const VisionFields v = read_vision(vr, siglip ? kSiglipVisionDefaults : kClipVisionDefaults);
  HfClip out;
  out.image = v.image;
  ClipConfig& config = out.config;
  config.vision = spec_of(v, siglip ? VisionStyle::kSiglip : VisionStyle::kClip, "vision_model",
                          siglip ? 0 : 1);
  config.vision.attention_dropout = vr.probability_or("attention_dropout", 0.0);
  config.vision_head = siglip && vr.boolean_or("vision_use_head", true);
  // CLIPVisionConfig / CLIPTextConfig: hidden_act "quick_gelu", layer_norm_eps 1e-5.
  out.quick_gelu = vr.string_or("hidden_act", "quick_gelu") == "quick_gelu";
  out.layer_norm_eps = vr.positive_number_or("layer_norm_eps", 1e-5, 1.0);
  if (!vr.status().is_ok()) return vr.status();
  if (!vision_only) {
    Result<HfFields> text_fields = sub_config(c, "text_config", true);
    if (!text_fields.is_ok()) return text_fields.status();
    HfReader tr(text_fields.value());
    config.text_hidden = tr.positive_or("hidden_size", siglip ? 768 : 512);
    config.text_layers = tr.layers_or("num_hidden_layers", 12);
    config.text_heads = tr.positive_or("num_attention_heads", siglip ? 12 : 8);
    config.text_mlp = tr.positive_or("intermediate_size", siglip ? 3072 : 2048);
    config.text_vocab = tr.positive_or("vocab_size", siglip ? 32000 : 49408);
    config.text_tokens = tr.positive_or("max_position_embeddings", siglip ? 64 : 77);
    tr.divides("num_attention_heads", config.text_hidden, config.text_heads, "hidden_size");
    // CLIPTextConfig: eos_token_id 49407 (2 in configs before transformers#24773:
    // the pooled token is then the highest id's), attention_dropout 0.
    out.eos_token = tr.positive_or("eos_token_id", 49407);
    out.text_attention_dropout = tr.probability_or("attention_dropout", 0.0);
    out.quick_gelu = out.quick_gelu && tr.string_or("hidden_act", "quick_gelu") == "quick_gelu";
    out.text_layer_norm_eps = tr.positive_number_or("layer_norm_eps", 1e-5, 1.0);
    if (!tr.status().is_ok()) return tr.status();
    HfReader r(c);
    config.projection_dim = siglip ? 0 : r.positive_or("projection_dim", 512);
    // CLIPConfig: logit_scale_init_value 2.6592 (log(1 / 0.07)).
    out.logit_scale_init = r.positive_number_or("logit_scale_init_value", 2.6592, 100.0);
    if (siglip && config.text_hidden != v.hidden) {
      r.fail(field_error(c.origin, "text_config.hidden_size",
                         "vision_config.hidden_size (" + std::to_string(v.hidden) +
                             "): SigLIP compares them directly"));
    }
    if (!r.status().is_ok()) return r.status();
  }
  return out;
}

Result<graph::LayerGraph> hf_clip_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options) {
  Result<HfClip> clip = read_hf_clip(c, type);
  if (!clip.is_ok()) return clip.status();
  const ClipConfig& config = clip->config;
  const bool siglip = config.vision.style == VisionStyle::kSiglip;
  graph::LayerGraph graph = build_clip_from(config, options);
  graph.family = type;
  set_image_sequence(graph, config.vision.patch, clip->image, siglip ? 0 : 1);
  graph.lora_targets = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};
  return graph;
}

// LlavaForConditionalGeneration (LlavaConfig: vision_config CLIPVisionConfig
// defaults, text_config LlamaConfig defaults, projector_hidden_act gelu,
// vision_feature_layer -2, vision_feature_select_strategy "default" (drops the
// class token), image_seq_length 576).
Result<HfLlava> read_hf_llava(const HfFields& c) {
  Result<HfFields> vision_fields = sub_config(c, "vision_config", false);
  if (!vision_fields.is_ok()) return vision_fields.status();
  Result<HfFields> text_fields = sub_config(c, "text_config", false);
  if (!text_fields.is_ok()) return text_fields.status();
  HfReader vr(vision_fields.value());
  const std::string vision_type = vr.string_or("model_type", "clip_vision_model");
  if (vision_type != "clip_vision_model") {
    vr.fail(unsupported_field(c.origin, "vision_config.model_type",
                              "\"clip_vision_model\", got \"" + vision_type + "\""));
  }
  const VisionFields v = read_vision(vr, kClipVisionDefaults);
  if (!vr.status().is_ok()) return vr.status();
  HfReader tr(text_fields.value());
  const std::string text_type = tr.string_or("model_type", "llama");
  if (text_type != "llama" && text_type != "mistral" && text_type != "qwen2") {
    return unsupported_field(c.origin, "text_config.model_type",
                             "llama, mistral or qwen2, got \"" + text_type + "\"");
  }
  Result<LlamaConfig> text = read_llama_config(text_fields.value(), text_type);
  if (!text.is_ok()) return text.status();

  HfReader r(c);
  const int64_t patches = (v.image / v.patch) * (v.image / v.patch);
  const std::string strategy = r.string_or("vision_feature_select_strategy", "default");
  if (strategy != "default" && strategy != "full") {
    r.fail(field_error(c.origin, "vision_feature_select_strategy",
                       "\"default\" or \"full\", got \"" + strategy + "\""));
  }
  const int64_t image_tokens =
      r.positive_or("image_seq_length", strategy == "full" ? patches + 1 : patches);
  if (image_tokens != (strategy == "full" ? patches + 1 : patches)) {
    r.fail(field_error(c.origin, "image_seq_length",
                       "the vision tower's " + std::to_string(patches) +
                           " patches (+1 with the \"full\" strategy)"));
  }
  // vision_feature_layer: hidden_states index; -2 = the output of the
  // penultimate layer (layers - 1 layers run usefully), k >= 0: k layers.
  int64_t feature_layer = -2;
  if (c.has("vision_feature_layer")) {
    const nlohmann::json& f = c.json.at("vision_feature_layer");
    if (!f.is_number_integer() || f.get<int64_t>() < -v.layers || f.get<int64_t>() > v.layers ||
        f.get<int64_t>() == 0) {
      r.fail(field_error(c.origin, "vision_feature_layer",
                         "an integer layer index in [-" + std::to_string(v.layers) + ", " +
                             std::to_string(v.layers) + "], not 0"));
    } else {
      feature_layer = f.get<int64_t>();
    }
  }
  const std::string act = r.string_or("projector_hidden_act", "gelu");
  const int64_t image_token = r.positive_or("image_token_index", 32000);
  if (!r.status().is_ok()) return r.status();
  HfLlava out;
  out.image = v.image;
  out.image_token = image_token;
  LlavaConfig& config = out.config;
  config.vision = spec_of(v, VisionStyle::kClip, "vision_tower.vision_model", 1);
  config.vision.rows = fixed_tokens(patches + 1);
  config.vision.patch_rows = fixed_tokens(patches);
  config.vision.scores_per_head = fixed_square(patches + 1);
  config.vision.layers_to_run = feature_layer < 0 ? v.layers + 1 + feature_layer : feature_layer;
  config.vision.fp32_pixels = false;  // priced in the model's dtype, as before the oracle ran LLaVA
  config.text = text.value();
  config.image_tokens = image_tokens;
  config.projector_act = act == "gelu" ? "gelu" : act == "silu" ? "silu" : "gelu_tanh";
  return out;
}

Result<graph::LayerGraph> hf_llava_family(const HfFields& c, const std::string& type,
                                          const ZooOptions& options) {
  Result<HfLlava> llava = read_hf_llava(c);
  if (!llava.is_ok()) return llava.status();
  const LlavaConfig& config = llava->config;
  graph::LayerGraph graph = build_llava_from(config, options);
  graph.family = type;
  set_token_sequence(graph, config.text.max_position);
  graph.lora_targets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                        "gate_proj", "up_proj", "down_proj"};
  return graph;
}

// ResNetForImageClassification (ResNetConfig: num_channels 3, embedding_size 64,
// hidden_sizes [256, 512, 1024, 2048], depths [3, 4, 6, 3], layer_type
// "bottleneck", hidden_act "relu", downsample_in_first_stage false,
// downsample_in_bottleneck false; labels = len(id2label), 2 by default). The
// defaults are microsoft/resnet-50, torchvision's resnet50 under HF's names.
// Four stages (S = (resolution / 32)^2, as every published HF ResNet); no image
// size in the config: 224 px by default, up to 1024.
Result<graph::LayerGraph> hf_resnet_family(const HfFields& c, const std::string& type,
                                           const ZooOptions& options) {
  HfReader r(c);
  ResNetConfig config;
  config.names = ResNetNames::kHuggingFace;
  config.stem_width = r.positive_or("embedding_size", 64);
  config.widths = positive_list_or(r, "hidden_sizes", {256, 512, 1024, 2048}, kMaxHfSize);
  config.depths = positive_list_or(r, "depths", {3, 4, 6, 3}, kMaxHfLayers);
  const std::string layer_type = r.string_or("layer_type", "bottleneck");
  r.check(layer_type == "bottleneck" || layer_type == "basic", "layer_type",
          "\"bottleneck\" or \"basic\", got \"" + layer_type + "\"");
  config.bottleneck = layer_type == "bottleneck";
  config.stride_in_1x1 = r.boolean_or("downsample_in_bottleneck", false);
  r.check(!r.boolean_or("downsample_in_first_stage", false), "downsample_in_first_stage",
          "false (a first stage with stride 2 ends at stride 64, which S = (resolution / 32)^2 cannot say)");
  r.check(r.string_or("hidden_act", "relu") == "relu", "hidden_act", "\"relu\" (the only activation built)");
  r.check(r.positive_or("num_channels", 3) == 3, "num_channels", "3 (RGB)");
  for (int64_t width : config.widths) {
    if (config.bottleneck) r.check(width % 4 == 0, "hidden_sizes", "multiples of 4 (a bottleneck's inner width is a quarter)");
  }
  config.classes = read_labels(r, c);
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_resnet(config, options);
  graph.family = type;
  set_image_sequence(graph, 32, 224, 0);
  graph.sequence.max_seq = (1024 / 32) * (1024 / 32);
  graph.lora_targets = {"classifier.1"};
  return graph;
}

// diffusers FluxTransformer2DModel (defaults: patch_size 1, in_channels 64,
// num_layers 19, num_single_layers 38, attention_head_dim 128,
// num_attention_heads 24, joint_attention_dim 4096, pooled_projection_dim
// 768, guidance_embeds false). The T5 length (512 for FLUX.1-dev) is the pipeline's.
Result<graph::LayerGraph> hf_flux_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options) {
  HfReader r(c);
  FluxConfig f = kFluxKontextDev;
  if (r.positive_or("patch_size", 1) != 1)
    r.fail(field_error(c.origin, "patch_size", "1 (as every FLUX.1 model)"));
  f.in_channels = r.positive_or("in_channels", 64);
  if (c.has("out_channels") && r.positive("out_channels") != f.in_channels) {
    r.fail(field_error(c.origin, "out_channels",
                       "null or in_channels (" + std::to_string(f.in_channels) + ")"));
  }
  f.double_blocks = r.layers_or("num_layers", 19);
  f.single_blocks = r.layers_or("num_single_layers", 38);
  f.head_dim = r.positive_or("attention_head_dim", 128);
  f.heads = r.positive_or("num_attention_heads", 24);
  f.joint_dim = r.positive_or("joint_attention_dim", 4096);
  f.pooled_dim = r.positive_or("pooled_projection_dim", 768);
  const bool guidance = r.boolean_or("guidance_embeds", false);
  f.hidden = f.heads * f.head_dim;
  r.at_most("attention_head_dim", f.hidden, kMaxHfSize, "num_attention_heads x attention_head_dim");
  f.mlp = 4 * f.hidden;  // FluxTransformerBlock: FeedForward mult 4; single blocks mlp_ratio 4.0
  f.python_qk_norm = true;  // what diffusers runs (the zoo entry models a fused kernel)
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_flux(f, options);
  if (!guidance) {
    // FLUX.1-schnell: CombinedTimestepTextProjEmbeddings has no guidance_embedder;
    // its [B, hidden] activations are negligible, its parameters are dropped here.
    for (graph::Node& node : graph.nodes) {
      if (node.name.rfind("time_text_embed.guidance_embedder", 0) == 0) node.params.clear();
    }
  }
  graph.family = "flux";
  graph.sequence.unit = "image";
  graph.sequence.patch_px = 16;  // 8x VAE downsampling, then 2x2 packing
  graph.sequence.images = 1;
  graph.sequence.default_resolution = 1024;
  graph.sequence.default_seq = 64 * 64;
  graph.sequence.max_seq = 128 * 128;
  graph.lora_targets = {"to_q", "to_k", "to_v", "to_out.0"};
  (void)type;
  return graph;
}

}  // namespace headroom::models
