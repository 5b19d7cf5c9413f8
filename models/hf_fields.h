// Reading fields of a Hugging Face config.json with transformers' defaults, and
// the per-family readers that turn one into a LayerGraph (models/hf_*.cc).
// Every error names the file (`origin`), the field and what was expected.
// Internal to models/; the public entry points are in models/hf_import.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "models/llama.h"
#include "models/vision.h"
#include "models/zoo_builders.h"
#include "models/zoo.h"

namespace headroom::models {

// A config object and the file it came from; `path` prefixes field names of
// nested configs ("text_config.hidden_size").
struct HfFields {
  const nlohmann::json& json;
  std::string_view origin;
  std::string path;

  std::string name(const char* key) const { return path.empty() ? key : path + "." + key; }
  bool has(const char* key) const { return json.contains(key) && !json.at(key).is_null(); }
};

// Bounds that keep every product the builders form (widths, squares of token
// counts, FLOPs) inside int64 and graph building quick: published models stay far
// below them (the largest vocabularies are ~256k, the deepest models ~200 layers).
inline constexpr int64_t kMaxHfSize = int64_t{1} << 24;
inline constexpr int64_t kMaxHfLayers = 4096;
inline constexpr int64_t kMaxHfPatchesPerSide = 4096;

// "ORIGIN: FIELD: expected EXPECTED": a value the config gets wrong (kInvalidInput).
Status field_error(std::string_view origin, const std::string& field, const std::string& expected);
// The same message for an architecture headroom does not build (kUnsupported).
Status unsupported_field(std::string_view origin, const std::string& field,
                         const std::string& expected);

// A required positive integer (at most kMaxHfSize).
Result<int64_t> positive(const HfFields& c, const char* key);
// The same, or `fallback` (transformers' default) when missing or null.
Result<int64_t> positive_or(const HfFields& c, const char* key, int64_t fallback);
Result<bool> boolean_or(const HfFields& c, const char* key, bool fallback);
// A probability in [0, 1).
Result<double> probability_or(const HfFields& c, const char* key, double fallback);
// A fraction in (0, 1].
Result<double> fraction_or(const HfFields& c, const char* key, double fallback);
// A number in (0, max].
Result<double> positive_number_or(const HfFields& c, const char* key, double fallback, double max);
Result<std::string> string_or(const HfFields& c, const char* key, const std::string& fallback);
// A nested config object ("text_config"); an empty object when missing and `optional`.
Result<HfFields> sub_config(const HfFields& c, const char* key, bool optional);
// `b` divides `a`, else an error on `field`.
Status divides(const HfFields& c, const char* field, int64_t a, int64_t b, const char* what);

// Reads many fields and keeps the first error: each getter returns the value,
// or a harmless stand-in (1, the fallback) after an error, so that a reader
// can read everything and then check status() once.
class HfReader {
 public:
  explicit HfReader(const HfFields& c) : c_(c) {}
  int64_t positive(const char* key) { return keep<int64_t>(models::positive(c_, key), 1); }
  int64_t positive_or(const char* key, int64_t fallback) {
    return keep<int64_t>(models::positive_or(c_, key, fallback), 1);
  }
  bool boolean_or(const char* key, bool fallback) {
    return keep(models::boolean_or(c_, key, fallback), fallback);
  }
  double probability_or(const char* key, double fallback) {
    return keep(models::probability_or(c_, key, fallback), fallback);
  }
  double fraction_or(const char* key, double fallback) {
    return keep(models::fraction_or(c_, key, fallback), fallback);
  }
  double positive_number_or(const char* key, double fallback, double max) {
    return keep(models::positive_number_or(c_, key, fallback, max), fallback);
  }
  std::string string_or(const char* key, const std::string& fallback) {
    return keep(models::string_or(c_, key, fallback), fallback);
  }
  // A layer count: positive and at most kMaxHfLayers.
  int64_t layers(const char* key) { return bounded(positive(key), key, kMaxHfLayers); }
  int64_t layers_or(const char* key, int64_t fallback) {
    return bounded(positive_or(key, fallback), key, kMaxHfLayers);
  }
  // Fails with `field` named when a derived `value` (e.g. heads x head_dim) exceeds `max`.
  void at_most(const char* field, int64_t value, int64_t max, const char* what) {
    if (value > max) {
      fail(field_error(c_.origin, c_.name(field),
                       std::string(what) + " at most " + std::to_string(max) + ", got " +
                           std::to_string(value)));
    }
  }
  void divides(const char* field, int64_t a, int64_t b, const char* what) {
    if (status_.is_ok() && b > 0) status_ = models::divides(c_, field, a, b, what);
  }
  void fail(Status status) {
    if (status_.is_ok()) status_ = std::move(status);
  }
  // Fails on `field` with `expected` unless `holds`; only the first failure is kept.
  void check(bool holds, const char* field, const std::string& expected) {
    if (!holds) fail(field_error(c_.origin, c_.name(field), expected));
  }
  const HfFields& fields() const { return c_; }
  const Status& status() const { return status_; }

 private:
  int64_t bounded(int64_t value, const char* key, int64_t max) {
    at_most(key, value, max, "a count");
    return value > max ? 1 : value;
  }
  template <typename T>
  T keep(Result<T> r, std::type_identity_t<T> stand_in) {
    if (r.is_ok()) return r.value();
    fail(r.status());
    return stand_in;
  }
  const HfFields& c_;
  Status status_ = Status::ok();
};

// Sequence metadata of a token model: S up to max_position, default min(2048, max).
void set_token_sequence(graph::LayerGraph& graph, int64_t max_position);

// Sequence metadata of an image model: S = (image / patch)^2 + extra_tokens, one image.
void set_image_sequence(graph::LayerGraph& graph, int64_t patch, int64_t image, int64_t extra_tokens);

// A Llama-style decoder config (llama, mistral, qwen2, qwen3, gemma, phi3);
// also LLaVA's text_config, where missing sizes take LlamaConfig's defaults.
Result<LlamaConfig> read_llama_config(const HfFields& c, const std::string& type);

// One reader per family; `type` is the model_type (or "flux" / "sd3" for diffusers').
using HfFamilyReader = Result<graph::LayerGraph> (*)(const HfFields&, const std::string& type,
                                                     const ZooOptions&);
Result<graph::LayerGraph> hf_llama_family(const HfFields& c, const std::string& type,
                                          const ZooOptions& options);
// mixtral, qwen2_moe, qwen3_moe, olmoe (models/hf_moe_families.cc).
Result<graph::LayerGraph> hf_moe_family(const HfFields& c, const std::string& type, const ZooOptions& options);
Result<graph::LayerGraph> hf_qwen_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options);
Result<graph::LayerGraph> hf_gpt2_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options);
// BertForSequenceClassification / RobertaForSequenceClassification as
// hf_bert_family reads it; the executor builds its module from the same reading.
Result<BertConfig> read_hf_bert(const HfFields& c, const std::string& type);
Result<graph::LayerGraph> hf_bert_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options);
Result<graph::LayerGraph> hf_neox_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options);
Result<graph::LayerGraph> hf_mpt_family(const HfFields& c, const std::string& type,
                                        const ZooOptions& options);
Result<graph::LayerGraph> hf_opt_family(const HfFields& c, const std::string& type,
                                        const ZooOptions& options);
Result<graph::LayerGraph> hf_vit_family(const HfFields& c, const std::string& type,
                                        const ZooOptions& options);
// ViTForImageClassification as hf_vit_family reads it: the encoder (style
// kVit, prefix "vit"), the classes (len(id2label)) and the image size; the
// executor builds its module from the same reading (models/torch/vit_module.h).
struct HfVitClassifier {
  VisionSpec spec;
  int64_t classes = 2;
  int64_t image = 224;
};
Result<HfVitClassifier> read_hf_vit_classifier(const HfFields& c);
Result<graph::LayerGraph> hf_dinov2_family(const HfFields& c, const std::string& type,
                                           const ZooOptions& options);
// CLIPModel / SiglipModel (or a vision model alone) as hf_clip_family reads
// it, with what the executor's CLIP module needs beyond the graph's shapes.
struct HfClip {
  ClipConfig config;
  int64_t image = 224;             // vision_config.image_size
  int64_t eos_token = 49407;       // text_config.eos_token_id: the pooled token
  double logit_scale_init = 2.6592;  // logit_scale_init_value
  double text_attention_dropout = 0;  // text_config.attention_dropout
  double layer_norm_eps = 1e-5;       // vision_config.layer_norm_eps
  double text_layer_norm_eps = 1e-5;  // text_config.layer_norm_eps
  bool quick_gelu = true;          // both towers' hidden_act is "quick_gelu"
};
Result<HfClip> read_hf_clip(const HfFields& c, const std::string& type);
Result<graph::LayerGraph> hf_clip_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options);
Result<graph::LayerGraph> hf_llava_family(const HfFields& c, const std::string& type,
                                          const ZooOptions& options);
// LlavaForConditionalGeneration as hf_llava_family reads it, with the image
// size and the placeholder token id (image_token_index, 32000 by default);
// the executor builds its module from the same reading.
struct HfLlava {
  LlavaConfig config;
  int64_t image = 336;
  int64_t image_token = 32000;
};
Result<HfLlava> read_hf_llava(const HfFields& c);
// Qwen2_5_VLForConditionalGeneration (models/hf_qwen2_5_vl.cc), at the image side
// ZooOptions::image_side.
Result<graph::LayerGraph> hf_qwen25vl_family(const HfFields& c, const std::string& type, const ZooOptions& options);
Result<graph::LayerGraph> hf_t5_family(const HfFields& c, const std::string& type, const ZooOptions& options);
Result<graph::LayerGraph> hf_resnet_family(const HfFields& c, const std::string& type,
                                           const ZooOptions& options);
Result<graph::LayerGraph> hf_flux_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options);
// diffusers' SD3Transformer2DModel (models/hf_sd3.cc).
Result<graph::LayerGraph> hf_sd3_family(const HfFields& c, const std::string& type, const ZooOptions& options);
// diffusers' UNet2DConditionModel as SDXL configures it (models/hf_unet.cc).
Result<graph::LayerGraph> hf_unet_family(const HfFields& c, const std::string& type, const ZooOptions& options);
// A timm Hub config.json ({"architecture": "vit_giant_patch14_dinov2", "num_classes": ...}).
Result<graph::LayerGraph> hf_timm_family(const HfFields& c, const std::string& type,
                                         const ZooOptions& options);

}  // namespace headroom::models
