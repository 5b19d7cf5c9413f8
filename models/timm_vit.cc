// timm's VisionTransformer from a timm Hub config.json: {"architecture":
// "vit_giant_patch14_dinov2", "num_classes": N, "global_pool": "token",
// "pretrained_cfg": {"input_size": [3, 518, 518], ...}, "model_args": {...}}.
// The config names a registered model; its sizes are those of the model's
// definition in timm/models/vision_transformer.py (the table below), and
// model_args holds what the run passed to timm.create_model.
#include <array>
#include <string>
#include <string_view>

#include "models/hf_fields.h"
#include "models/layers.h"
#include "models/vision.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

struct TimmVit {
  std::string_view name;
  int64_t patch, hidden, depth, heads, mlp, image;
  bool layer_scale;  // init_values=1e-5: LayerScale ls1 / ls2
  bool swiglu;       // mlp_layer=SwiGLUPacked: fc1 to 2 x mlp, silu(x1) * x2, fc2
};

// timm/models/vision_transformer.py model definitions (mlp = int(embed_dim * mlp_ratio),
// halved for SwiGLUPacked's GluMlp: vit_giant's mlp_ratio 2.66667 * 2 gives fc1 8192, fc2 4096).
constexpr std::array<TimmVit, 7> kTimmVits = {{
    {"vit_base_patch16_224", 16, 768, 12, 12, 3072, 224, false, false},
    {"vit_large_patch16_224", 16, 1024, 24, 16, 4096, 224, false, false},
    {"vit_huge_patch14_224", 14, 1280, 32, 16, 5120, 224, false, false},
    {"vit_small_patch14_dinov2", 14, 384, 12, 6, 1536, 518, true, false},
    {"vit_base_patch14_dinov2", 14, 768, 12, 12, 3072, 518, true, false},
    {"vit_large_patch14_dinov2", 14, 1024, 24, 16, 4096, 518, true, false},
    {"vit_giant_patch14_dinov2", 14, 1536, 40, 24, 4096, 518, true, true},
}};

std::string known_architectures() {
  std::string out;
  for (const TimmVit& v : kTimmVits) out += (out.empty() ? "" : ", ") + std::string(v.name);
  return out;
}

// "vit_giant_patch14_dinov2.lvd142m" names the weights' tag after the dot.
const TimmVit* find_architecture(const std::string& name) {
  const std::string_view base = std::string_view(name).substr(0, name.find('.'));
  for (const TimmVit& v : kTimmVits) {
    if (v.name == base) return &v;
  }
  return nullptr;
}

// The image side: model_args.img_size (what create_model was given), else
// pretrained_cfg.input_size [3, H, W], else the definition's.
int64_t read_image_size(HfReader& r, const HfFields& c, const HfFields& args, int64_t fallback) {
  if (args.has("img_size")) {
    HfReader a(args);
    const int64_t side = a.positive_or("img_size", fallback);
    r.fail(a.status());
    return side;
  }
  if (!c.has("pretrained_cfg") || !c.json.at("pretrained_cfg").is_object()) return fallback;
  const nlohmann::json& cfg = c.json.at("pretrained_cfg");
  if (!cfg.contains("input_size")) return fallback;
  const nlohmann::json& size = cfg.at("input_size");
  if (!size.is_array() || size.size() != 3 || !size[1].is_number_integer() || size[1] != size[2] ||
      size[1].get<int64_t>() <= 0) {
    r.fail(field_error(c.origin, "pretrained_cfg.input_size", "[3, H, H] with a positive square side"));
    return fallback;
  }
  return size[1].get<int64_t>();
}

}  // namespace

Result<graph::LayerGraph> hf_timm_family(const HfFields& c, const std::string& /*type*/,
                                         const ZooOptions& options) {
  HfReader r(c);
  const std::string name = r.string_or("architecture", "");
  const TimmVit* arch = find_architecture(name);
  if (arch == nullptr) {
    return unsupported_field(c.origin, "architecture",
                             "a timm VisionTransformer headroom builds (" + known_architectures() +
                                 "), got \"" + name + "\"");
  }
  Result<HfFields> args = sub_config(c, "model_args", true);
  if (!args.is_ok()) return args.status();
  for (const auto& [key, value] : args->json.items()) {
    if (key != "img_size" && key != "num_classes" && key != "global_pool" && key != "drop_path_rate" &&
        key != "dynamic_img_size") {
      return field_error(c.origin, "model_args." + key,
                         "only img_size, num_classes, global_pool, drop_path_rate (0) and dynamic_img_size: other "
                         "create_model arguments change the model and are not built");
    }
  }
  HfReader a(args.value());
  const HfFields& where = args->has("num_classes") ? args.value() : c;
  // 0 (the Hub's headless feature extractor) gets its own message; anything else
  // must be a positive count.
  const bool headless = !where.has("num_classes") || where.json.at("num_classes") == nlohmann::json(0);
  HfReader classes_reader(where);
  const int64_t classes = headless ? 0 : classes_reader.positive("num_classes");
  r.fail(classes_reader.status());
  if (r.status().is_ok() && classes == 0) {
    return field_error(c.origin, where.name("num_classes"),
                       "the classifier's class count, as the run passes timm.create_model(..., num_classes=N) (a "
                       "Hub config's 0 is the headless feature extractor; headroom prices a classifier fine-tune)");
  }
  const HfFields& pool_where = args->has("global_pool") ? args.value() : c;
  HfReader pool_reader(pool_where);
  r.check(pool_reader.string_or("global_pool", "token") == "token", "global_pool",
          "\"token\" (the class token into the head; avg pooling and its fc_norm are not built)");
  r.fail(pool_reader.status());
  a.check(a.probability_or("drop_path_rate", 0.0) == 0, "drop_path_rate", "0 (stochastic depth is not built)");
  a.boolean_or("dynamic_img_size", false);  // the positional table is resampled per forward: no bytes to speak of
  r.fail(a.status());
  const int64_t image = read_image_size(r, c, args.value(), arch->image);
  r.check(image % arch->patch == 0, "img_size", "a multiple of the patch size " + std::to_string(arch->patch));
  r.at_most("img_size", image / arch->patch, kMaxHfPatchesPerSide, "img_size / patch_size");
  if (!r.status().is_ok()) return r.status();

  VisionSpec s;
  s.style = VisionStyle::kTimm;
  s.hidden = arch->hidden;
  s.layers = s.layers_to_run = arch->depth;
  s.heads = arch->heads;
  s.mlp = arch->mlp;
  s.patch = arch->patch;
  s.positions = (image / arch->patch) * (image / arch->patch) + 1;
  s.rows = tokens();
  s.patch_rows = tokens();
  s.scores_per_head = square_tokens();
  s.post_layernorm = true;  // VisionTransformer.norm (global_pool 'token' uses no fc_norm)
  s.layer_scale = arch->layer_scale;
  s.swiglu = arch->swiglu;
  graph::LayerGraph graph = build_vit_from(s, classes, options);
  graph.family = "vit";
  set_image_sequence(graph, arch->patch, image, 1);
  // PEFT on timm's ViT: the fused qkv, the attention projection and the MLP.
  graph.lora_targets = {"qkv", "proj", "fc1", "fc2"};
  return graph;
}

}  // namespace headroom::models
