#include "executor/executable_model.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "models/hf_fields.h"
#include "models/hf_import.h"

namespace headroom::executor {
namespace {

constexpr const char* kSupported =
    "tiny-llama, llama-3-8b, llama-3.1-8b, mistral-7b, tiny-flux, flux-kontext-dev, tiny-resnet, resnet-50, or a "
    "Hugging Face "
    "llama/mistral/qwen2, vit or llava model directory";

Status unsupported(std::string_view origin, const std::string& model, const std::string& why) {
  return Status::error(std::string(origin) + ": model: \"" + model + "\" " + why +
                       "; the executor trains " + kSupported +
                       " (the planner answers for every model, the executor only for these)");
}

// A Hugging Face llama-family config the LibTorch decoder reproduces exactly:
// features it lacks (Qwen3's q/k norm, Gemma's GeGLU and scaled embeddings,
// Phi-3's fused projections) are refused rather than trained differently.
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
  if (!config.is_object()) return Status::error(path + ": expected a JSON object (a Hugging Face config.json)");
  const std::string type = config.contains("model_type") && config.at("model_type").is_string()
                               ? config.at("model_type").get<std::string>()
                               : std::string();
  const models::HfFields fields{config, path, ""};
  if (type == "vit") {
    Result<models::HfVitClassifier> vit = models::read_hf_vit_classifier(fields);
    if (!vit.is_ok()) return vit.status();
    if (vit->spec.dropout > 0 || vit->spec.attention_dropout > 0) {
      return unsupported(origin, model, "has dropout in its encoder, which the LibTorch ViT does not run");
    }
    ExecutableModel out;
    out.family = ModelFamily::kVit;
    out.vit = vit->spec;
    out.classes = vit->classes;
    out.image = vit->image;
    return out;
  }
  if (type == "llava") {
    Result<models::HfLlava> llava = models::read_hf_llava(fields);
    if (!llava.is_ok()) return llava.status();
    const models::LlamaConfig& text = llava->config.text;
    if (text.qk_norm || text.scale_embeddings || text.fused_projections ||
        std::string_view(text.mlp_activation) != "silu" || std::string_view(llava->config.projector_act) != "gelu") {
      return unsupported(origin, model, "uses features the LibTorch LLaVA lacks (a text model other than Llama's, or a "
                                        "projector activation other than gelu)");
    }
    if (llava->image_token >= text.vocab) {
      return Status::error(path + ": image_token_index: " + std::to_string(llava->image_token) +
                           " is outside the text vocabulary of " + std::to_string(text.vocab) +
                           " (expected the id of the image placeholder token)");
    }
    ExecutableModel out;
    out.family = ModelFamily::kLlava;
    out.llava = llava->config;
    out.image = llava->image;
    out.image_token = llava->image_token;
    return out;
  }
  if (type != "llama" && type != "mistral" && type != "qwen2") {
    return unsupported(origin, model, "has model_type \"" + type + "\"");
  }
  Result<models::LlamaConfig> llama = models::read_llama_config(fields, type);
  if (!llama.is_ok()) return llama.status();
  const models::LlamaConfig& c = llama.value();
  if (c.qk_norm || c.scale_embeddings || c.fused_projections || std::string_view(c.mlp_activation) != "silu") {
    return unsupported(origin, model, "uses features the LibTorch decoder lacks (q/k norm, GeGLU, fused projections)");
  }
  ExecutableModel out;
  out.family = ModelFamily::kLlama;
  out.llama = c;
  return out;
}

}  // namespace

Result<ExecutableModel> executable_model(const std::string& model, std::string_view origin) {
  ExecutableModel out;
  const struct {
    const char* name;
    const models::LlamaConfig* llama;
    const models::FluxConfig* flux;
  } zoo[] = {
      {"tiny-llama", &models::kTinyLlama, nullptr},  {"llama-3-8b", &models::kLlama3_8b, nullptr},
      {"llama-3.1-8b", &models::kLlama31_8b, nullptr}, {"mistral-7b", &models::kMistral7b, nullptr},
      {"tiny-flux", nullptr, &models::kTinyFlux},    {"flux-kontext-dev", nullptr, &models::kFluxKontextDev},
  };
  for (const auto& [name, config] : {std::pair{"tiny-resnet", &models::kTinyResNet}, std::pair{"resnet-50", &models::kResNet50}}) {
    if (model != name) continue;
    out.family = ModelFamily::kResNet;
    out.resnet = *config;
    return out;
  }
  for (const auto& entry : zoo) {
    if (model != entry.name) continue;
    if (entry.llama) {
      out.family = ModelFamily::kLlama;
      out.llama = *entry.llama;
    } else {
      out.family = ModelFamily::kFlux;
      out.flux = *entry.flux;
    }
    return out;
  }
  if (models::is_hf_model_path(model)) return from_hf_config(model, origin);
  // A path, as the planner reads MODEL: a layer graph, or nothing at all.
  const bool is_path = model.find('/') != std::string::npos ||
                       (model.size() > 5 && model.compare(model.size() - 5, 5, ".json") == 0);
  struct stat info {};
  if (is_path && ::stat(model.c_str(), &info) != 0) {
    return Status::error(std::string(origin) + ": model: " + model + ": no such file or directory");
  }
  return unsupported(origin, model, is_path ? "is a layer-graph file, which has no LibTorch module" : "has no LibTorch module");
}

}  // namespace headroom::executor
