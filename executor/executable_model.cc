#include "executor/executable_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "models/hf_import.h"

namespace headroom::executor {
namespace {

// "tiny-llama, ..., resnet-50, or a Hugging Face llama/mistral/qwen2, vit or
// llava model directory": every family's zoo names and model types.
std::string supported() {
  std::string zoo;
  std::vector<std::string> types;
  for (const ModelFamilyInfo& family : model_families()) {
    for (const auto& [name, model] : family.zoo) zoo += name + ", ";
    std::string joined;
    for (const std::string& type : family.hf_model_types) joined += (joined.empty() ? "" : "/") + type;
    if (!joined.empty()) types.push_back(joined);
  }
  std::string hf;
  for (size_t i = 0; i < types.size(); ++i) {
    hf += (i == 0 ? "" : i + 1 == types.size() ? " or " : ", ") + types[i];
  }
  return zoo + "or a Hugging Face " + hf + " model directory";
}

Status unsupported(std::string_view origin, const std::string& model, const std::string& why) {
  return Status::unsupported(std::string(origin) + ": model: \"" + model + "\" " + why +
                             "; the executor trains " + supported() +
                             " (the planner answers for every model, the executor only for these)");
}

// A model of `family`, its config in `field`.
template <typename Config>
ExecutableModel of(ModelFamily family, Config ExecutableModel::*field, const Config& config) {
  ExecutableModel out;
  out.family = family;
  out.*field = config;
  return out;
}

// A Hugging Face llama-family config the LibTorch decoder reproduces exactly:
// features it lacks (Qwen3's q/k norm, Gemma's GeGLU and scaled embeddings,
// Phi-3's fused projections) are refused rather than trained differently.
Result<ExecutableModel> read_hf_llama(const HfConfig& hf) {
  Result<models::LlamaConfig> llama = models::read_llama_config(hf.fields, hf.type);
  if (!llama.is_ok()) return llama.status();
  const models::LlamaConfig& c = llama.value();
  if (c.qk_norm || c.scale_embeddings || c.fused_projections || std::string_view(c.mlp_activation) != "silu") {
    return unsupported(hf.origin, hf.model,
                       "uses features the LibTorch decoder lacks (q/k norm, GeGLU, fused projections)");
  }
  return of(ModelFamily::kLlama, &ExecutableModel::llama, c);
}

Result<ExecutableModel> read_hf_vit(const HfConfig& hf) {
  Result<models::HfVitClassifier> vit = models::read_hf_vit_classifier(hf.fields);
  if (!vit.is_ok()) return vit.status();
  if (vit->spec.dropout > 0 || vit->spec.attention_dropout > 0) {
    return unsupported(hf.origin, hf.model, "has dropout in its encoder, which the LibTorch ViT does not run");
  }
  ExecutableModel out = of(ModelFamily::kVit, &ExecutableModel::vit, vit->spec);
  out.classes = vit->classes;
  out.image = vit->image;
  return out;
}

Result<ExecutableModel> read_hf_llava(const HfConfig& hf) {
  Result<models::HfLlava> llava = models::read_hf_llava(hf.fields);
  if (!llava.is_ok()) return llava.status();
  const models::LlamaConfig& text = llava->config.text;
  if (text.qk_norm || text.scale_embeddings || text.fused_projections ||
      std::string_view(text.mlp_activation) != "silu" || std::string_view(llava->config.projector_act) != "gelu") {
    return unsupported(hf.origin, hf.model,
                       "uses features the LibTorch LLaVA lacks (a text model other than Llama's, or a "
                       "projector activation other than gelu)");
  }
  if (llava->image_token >= text.vocab) {
    return Status::invalid_input(
        hf.path + ": image_token_index: " + std::to_string(llava->image_token) +
        " is outside the text vocabulary of " + std::to_string(text.vocab) +
        " (expected the id of the image placeholder token)");
  }
  ExecutableModel out = of(ModelFamily::kLlava, &ExecutableModel::llava, llava->config);
  out.image = llava->image;
  out.image_token = llava->image_token;
  return out;
}

// BertForSequenceClassification / RobertaForSequenceClassification: the
// LibTorch module runs exact GELU and absolute positions (BertConfig's defaults).
Result<ExecutableModel> read_hf_bert(const HfConfig& hf) {
  Result<models::BertConfig> bert = models::read_hf_bert(hf.fields, hf.type);
  if (!bert.is_ok()) return bert.status();
  if (!bert->exact_gelu || !bert->absolute_positions) {
    return unsupported(hf.origin, hf.model,
                       "uses features the LibTorch BERT lacks (hidden_act other than gelu, or relative "
                       "position embeddings)");
  }
  return of(ModelFamily::kBert, &ExecutableModel::bert, bert.value());
}

// CLIPModel (model_type clip: both towers and the contrastive loss); the
// vision model alone and SigLIP are priced only.
Result<ExecutableModel> read_hf_clip(const HfConfig& hf) {
  Result<models::HfClip> clip = models::read_hf_clip(hf.fields, hf.type);
  if (!clip.is_ok()) return clip.status();
  if (!clip->quick_gelu || clip->config.vision.attention_dropout > 0 || clip->text_attention_dropout > 0) {
    return unsupported(hf.origin, hf.model,
                       "uses features the LibTorch CLIP lacks (hidden_act other than quick_gelu, or attention "
                       "dropout)");
  }
  if (clip->eos_token >= clip->config.text_vocab) {
    return Status::invalid_input(
        hf.path + ": text_config.eos_token_id: " + std::to_string(clip->eos_token) +
        " is outside the text vocabulary of " + std::to_string(clip->config.text_vocab) +
        " (expected the id of the token the text tower pools)");
  }
  ExecutableModel out = of(ModelFamily::kClip, &ExecutableModel::clip, clip.value());
  out.image = clip->image;
  return out;
}

// T5 (models/t5.h): priced by the planner, no LibTorch module (docs/models.md, "T5").
constexpr const char* kEncoderDecoderRefusal =
    "is an encoder-decoder (T5 / Flan-T5), which the planner prices but the executor does not train: its LibTorch "
    "modules are decoder-only LMs, encoders, Flux and ResNet; expected one of those for headroom run";

// Reads a Hugging Face config.json through the row of the family that has its model_type.
Result<ExecutableModel> from_hf_config(const std::string& model, std::string_view origin) {
  const std::string path = models::is_hf_model_path(model) && model.size() >= 11 &&
                                   model.compare(model.size() - 11, 11, "config.json") == 0
                               ? model
                               : model + "/config.json";
  Result<std::string> text = graph::read_file(path, int64_t{16} << 20);
  if (!text.is_ok()) return text.status();
  // The shared parse (depth limit, duplicate keys, numbers a double holds), as the planner reads this file.
  Result<nlohmann::json> parsed = graph::parse_json_text(text.value(), path);
  if (!parsed.is_ok()) return parsed.status();
  const nlohmann::json& config = parsed.value();
  if (!config.is_object())
    return Status::invalid_input(path + ": expected a JSON object (a Hugging Face config.json)");
  const std::string type = config.contains("model_type") && config.at("model_type").is_string()
                               ? config.at("model_type").get<std::string>()
                               : std::string();
  if (models::is_moe_model_type(type)) {
    return unsupported(origin, model,
                       "is a mixture of experts (model_type \"" + type + "\"), which the planner prices but the "
                       "executor trains only as the zoo's tiny-moe (Mixtral's structure at toy size)");
  }
  if (type == "t5") return unsupported(origin, model, kEncoderDecoderRefusal);
  const models::HfFields fields{config, path, ""};
  for (const ModelFamilyInfo& family : model_families()) {
    const auto& types = family.hf_model_types;
    if (std::find(types.begin(), types.end(), type) == types.end()) continue;
    return family.read_hf(HfConfig{fields, type, path, model, origin});
  }
  return unsupported(origin, model, "has model_type \"" + type + "\"");
}

std::vector<ModelFamilyInfo> make_families() {
  // clang-format off
  constexpr ModelFamily kLlama = ModelFamily::kLlama, kFlux = ModelFamily::kFlux, kResNet = ModelFamily::kResNet;
  auto llama = [&](const models::LlamaConfig& c) { return of(kLlama, &ExecutableModel::llama, c); };
  auto flux = [&](const models::FluxConfig& c) { return of(kFlux, &ExecutableModel::flux, c); };
  auto resnet = [&](const models::ResNetConfig& c) { return of(kResNet, &ExecutableModel::resnet, c); };
  // EVA ViT-g (VisionStyle::kBlip2): images of patch x sqrt(patches) pixels a side.
  auto eva = [&](const models::VisionSpec& v) {
    ExecutableModel out = of(ModelFamily::kVit, &ExecutableModel::vit, v);
    out.image = v.patch * static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(v.positions - 1))));
    return out;
  };
  std::vector<ModelFamilyInfo> families = {
      {kLlama, "Llama",
       {{"tiny-llama", llama(models::kTinyLlama)}, {"llama-3-8b", llama(models::kLlama3_8b)},
        {"llama-3.1-8b", llama(models::kLlama31_8b)}, {"mistral-7b", llama(models::kMistral7b)},
        // Mixtral's structure: the decoder with its MoE block (models/torch/moe_module.h).
        {"tiny-moe", llama(models::kTinyMoe)}},
       {"llama", "mistral", "qwen2"}, read_hf_llama, nullptr, false, true, true},
      {kFlux, "Flux", {{"tiny-flux", flux(models::kTinyFlux)}, {"flux-kontext-dev", flux(models::kFluxKontextDev)}},
       {}, nullptr, "latents", false, false, true},
      {ModelFamily::kVit, "ViT",
       {{"tiny-eva-vit", eva(models::tiny_eva_vit_spec())}, {"eva-vit-g", eva(models::eva_vit_g_spec())}},
       {"vit"}, read_hf_vit, "images", false, false, true},
      // A causal LM too, whose batches check the stronger bound: text after the image tokens.
      {ModelFamily::kLlava, "LLaVA", {}, {"llava"}, read_hf_llava, "images and tokens", false, false, false},
      {kResNet, "ResNet", {{"tiny-resnet", resnet(models::kTinyResNet)}, {"resnet-50", resnet(models::kResNet50)}},
       {}, nullptr, "images", true, false, false},
      {ModelFamily::kBert, "BERT",
       {{"bert-large-uncased", of(ModelFamily::kBert, &ExecutableModel::bert, models::kBertLargeUncased)}},
       {"bert", "roberta"}, read_hf_bert, "token ids and labels", false, false, true},
      {ModelFamily::kClip, "CLIP", {}, {"clip"}, read_hf_clip, "image-text pairs", false, false, true},
  };
  // clang-format on
  assert(families.size() == kModelFamilyCount);
  for (size_t i = 0; i < families.size(); ++i) assert(families[i].family == static_cast<ModelFamily>(i));
  return families;
}

}  // namespace

const std::vector<ModelFamilyInfo>& model_families() {
  static const std::vector<ModelFamilyInfo> families = make_families();
  return families;
}

const ModelFamilyInfo& model_family(ModelFamily family) {
  return model_families().at(static_cast<size_t>(family));
}

Result<ExecutableModel> executable_model(const std::string& model, std::string_view origin) {
  for (const ModelFamilyInfo& family : model_families()) {
    for (const auto& [name, zoo_model] : family.zoo) {
      if (model == name) return zoo_model;
    }
  }
  if (models::is_hf_model_path(model)) return from_hf_config(model, origin);
  if (model.starts_with("flan-t5-") || model == "t5-base") return unsupported(origin, model, kEncoderDecoderRefusal);
  // A path, as the planner reads MODEL: a layer graph, or nothing at all.
  const bool is_path = model.find('/') != std::string::npos ||
                       (model.size() > 5 && model.compare(model.size() - 5, 5, ".json") == 0);
  struct stat info {};
  if (is_path && ::stat(model.c_str(), &info) != 0) {
    return Status::invalid_input(std::string(origin) + ": model: " + model +
                                 ": no such file or directory");
  }
  return unsupported(origin, model, is_path ? "is a layer-graph file, which has no LibTorch module" : "has no LibTorch module");
}

}  // namespace headroom::executor
