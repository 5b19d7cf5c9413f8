#include "models/hf_import.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/graph_json.h"
#include "graph/safetensors_header.h"
#include "graph/validate.h"
#include "models/deepseek.h"
#include "models/gemma.h"
#include "models/hf_fields.h"
#include "models/hf_refusals.h"

namespace headroom::models {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxConfigBytes = 4 << 20;
constexpr int kMaxMismatchesListed = 20;

const std::map<std::string, HfFamilyReader>& readers() {
  static const std::map<std::string, HfFamilyReader> kReaders = {
      {"llama", hf_llama_family},  {"mistral", hf_llama_family},
      {"qwen2", hf_llama_family},  {"qwen3", hf_llama_family},
      {"gemma", hf_llama_family},  {"phi3", hf_llama_family},
      {"gpt2", hf_gpt2_family},    {"gpt_neox", hf_neox_family},
      {"opt", hf_opt_family},      {"bert", hf_bert_family},
      {"roberta", hf_bert_family}, {"vit", hf_vit_family},
      {"clip", hf_clip_family},    {"clip_vision_model", hf_clip_family},
      {"siglip", hf_clip_family},  {"siglip_vision_model", hf_clip_family},
      {"llava", hf_llava_family},  {"qwen", hf_qwen_family},
      {"dinov2", hf_dinov2_family}, {"timm", hf_timm_family},
      {"resnet", hf_resnet_family}, {"mpt", hf_mpt_family},
      {"gemma2", hf_gemma_family}, {"gemma3_text", hf_gemma_family},
      {"gemma3", hf_gemma_family},
      {"mixtral", hf_moe_family},  {"qwen2_moe", hf_moe_family},
      {"qwen3_moe", hf_moe_family}, {"olmoe", hf_moe_family},
      {"deepseek_v2", hf_deepseek_family}, {"deepseek_v3", hf_deepseek_family},
      {"qwen2_5_vl", hf_qwen25vl_family},
      {"t5", hf_t5_family}};
  return kReaders;
}

// model_type from "architectures" when a config lacks it (old exports).
std::string type_from_architectures(const nlohmann::json& config) {
  static const std::map<std::string, std::string> kPrefixes = {
      {"LlamaFor", "llama"},     {"MistralFor", "mistral"},
      {"Qwen2For", "qwen2"},     {"Qwen3For", "qwen3"},
      {"GemmaFor", "gemma"},     {"Phi3For", "phi3"},
      {"GPT2", "gpt2"},          {"GPTNeoXFor", "gpt_neox"},
      {"OPTFor", "opt"},         {"BertFor", "bert"},
      {"RobertaFor", "roberta"}, {"ViTFor", "vit"},
      {"CLIPModel", "clip"},     {"CLIPVisionModel", "clip_vision_model"},
      {"SiglipModel", "siglip"}, {"SiglipVisionModel", "siglip_vision_model"},
      {"LlavaFor", "llava"},     {"QWenLMHeadModel", "qwen"},
      {"Dinov2", "dinov2"},      {"ResNetFor", "resnet"},
      {"MPTFor", "mpt"},
      {"Gemma2For", "gemma2"},   {"Gemma3ForCausalLM", "gemma3_text"},
      {"Gemma3ForConditionalGeneration", "gemma3"},
      {"MixtralFor", "mixtral"},
      {"Qwen2MoeFor", "qwen2_moe"}, {"Qwen3MoeFor", "qwen3_moe"},
      {"OlmoeFor", "olmoe"},
      {"DeepseekV2For", "deepseek_v2"}, {"DeepseekV3For", "deepseek_v3"},
      {"Qwen2_5_VLFor", "qwen2_5_vl"},
      {"T5For", "t5"}};
  if (!config.contains("architectures") || !config.at("architectures").is_array()) return "";
  for (const nlohmann::json& arch : config.at("architectures")) {
    if (!arch.is_string()) continue;
    const std::string name = arch.get<std::string>();
    for (const auto& [prefix, type] : kPrefixes) {
      if (name.rfind(prefix, 0) == 0) return type;
    }
  }
  return "";
}

Result<std::string> model_type(const HfFields& c) {
  if (c.has("_class_name") && c.json.at("_class_name").is_string()) {
    const std::string name = c.json.at("_class_name").get<std::string>();
    if (name == "FluxTransformer2DModel") return std::string("flux");
    if (name == "SD3Transformer2DModel") return std::string("sd3");
    if (name == "UNet2DConditionModel") return std::string("sdxl");
    return unsupported_field(
        c.origin, "_class_name",
        "FluxTransformer2DModel, SD3Transformer2DModel or UNet2DConditionModel (the diffusers models read from "
        "config.json), got \"" +
            name + "\"; for other diffusers models write a layer-graph JSON");
  }
  if (c.has("model_type")) {
    if (!c.json.at("model_type").is_string()) {
      return field_error(c.origin, "model_type", "a string naming the architecture");
    }
    return c.json.at("model_type").get<std::string>();
  }
  std::string type = type_from_architectures(c.json);
  // timm's Hub configs name one registered model: {"architecture": "vit_base_patch16_224", ...}.
  if (type.empty() && c.has("architecture") && c.json.at("architecture").is_string()) return std::string("timm");
  if (type.empty())
    return field_error(c.origin, "model_type",
                       "a string naming the architecture (the field is missing)");
  return type;
}

// torch_dtype (or "dtype", its newer name): the dtype the checkpoint is published in.
Status apply_config_dtype(const HfFields& c, graph::LayerGraph& graph) {
  const char* key = c.has("torch_dtype") ? "torch_dtype" : "dtype";
  if (!c.has(key) || !c.json.at(key).is_string()) return Status::ok();
  const std::optional<graph::DType> dtype = graph::parse_dtype(c.json.at(key).get<std::string>());
  if (!dtype) {
    return field_error(
        c.origin, key,
        "one of " + std::string(graph::dtype_names_list()) + ", got " + c.json.at(key).dump());
  }
  for (graph::Node& node : graph.nodes) {
    for (graph::Param& param : node.params) {
      // A non-persistent buffer is in no checkpoint: its module makes its dtype.
      if (param.persistent) param.dtype = *dtype;
    }
  }
  return Status::ok();
}

std::string dims(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The name without its first component ("model.decoder.x" -> "decoder.x"):
// base-model checkpoints (bert-base-uncased, opt-125m) drop the task model's prefix.
std::string without_first(const std::string& name) {
  const size_t dot = name.find('.');
  return dot == std::string::npos ? "" : name.substr(dot + 1);
}

// bitsandbytes 4-bit checkpoints store a packed uint8 weight beside
// "<weight>.absmax", ".quant_map", ".nested_*" and ".quant_state.bitsandbytes__nf4|fp4".
bool is_quant_state(const std::string& name) {
  for (const char* suffix : {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return true;
  }
  return name.find(".quant_state.") != std::string::npos;
}

}  // namespace

std::string_view supported_hf_model_types() {
  return "llama, mistral, qwen2, qwen3, gemma, phi3, qwen, mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, "
         "deepseek_v3, gpt2, gpt_neox, mpt, opt, "
         "bert, roberta, vit, dinov2, resnet, clip, clip_vision_model, siglip, siglip_vision_model, llava, qwen2_5_vl, t5, "
         "gemma2, gemma3_text, gemma3 (its text_config), timm's VisionTransformer (a timm Hub "
         "config's \"architecture\"), and diffusers' FluxTransformer2DModel and SD3Transformer2DModel";
}

bool is_moe_model_type(const std::string& type) {
  const auto found = readers().find(type);
  return found != readers().end() && (found->second == hf_moe_family || found->second == hf_deepseek_family);
}

Result<graph::LayerGraph> graph_from_hf_config(const nlohmann::json& config,
                                               std::string_view origin, const ZooOptions& options) {
  if (!config.is_object())
    return field_error(origin, "(top level)", "a JSON object (a Hugging Face config.json)");
  const HfFields fields{config, origin, ""};
  Result<std::string> type = model_type(fields);
  if (!type.is_ok()) return type.status();
  const auto reader = type.value() == "flux"  ? HfFamilyReader{hf_flux_family}
                      : type.value() == "sd3" ? HfFamilyReader{hf_sd3_family}
                      : type.value() == "sdxl" ? HfFamilyReader{hf_unet_family}
                                              : nullptr;
  const auto found = readers().find(type.value());
  if (reader == nullptr && found == readers().end()) {
    if (const std::optional<std::string> why = unsupported_family_reason(type.value())) {
      return unsupported_field(origin, "model_type", "a family headroom builds, got \"" + type.value() + "\": " + *why);
    }
    return unsupported_field(
        origin, "model_type",
        "one of " + std::string(supported_hf_model_types()) + ", got \"" + type.value() +
            "\"; for other architectures write a layer-graph JSON (docs/layer-graph-format.md) "
            "or export one from PyTorch with scripts/exporter/export_graph.py (docs/exporter.md)");
  }
  Result<graph::LayerGraph> graph =
      (reader ? reader : found->second)(fields, type.value(), options);
  if (!graph.is_ok()) return graph.status();
  if (Status dtype = apply_config_dtype(fields, graph.value()); !dtype.is_ok()) return dtype;
  const bool named = config.contains("_name_or_path") && config.at("_name_or_path").is_string() &&
                     !config.at("_name_or_path").get<std::string>().empty();
  graph->name = named ? config.at("_name_or_path").get<std::string>()
                      : fs::path(std::string(origin)).parent_path().filename().string();
  if (graph->name.empty()) graph->name = type.value();
  graph->description = type.value() + " model from " + std::string(origin);
  graph->source = std::string(origin);
  Status valid = graph::validate_graph(graph.value(), origin);
  // A context past what int64 sizes hold at batch 1024 is priced up to the longest
  // length that does, and the description says so (issue 37: a 1,048,576-token
  // config.json was refused at any --seq).
  if (!valid.is_ok()) {
    if (const std::optional<int64_t> longer = graph::cap_max_seq_to_int64(graph.value())) {
      graph->description += "; priced up to " + std::to_string(graph->sequence.max_seq) + " of its " +
                            std::to_string(*longer) + " positions (int64 sizes at batch 1024)";
      valid = graph::validate_graph(graph.value(), origin);
    }
  }
  if (!valid.is_ok()) return valid;
  return graph;
}

std::vector<std::string> check_graph_against_safetensors(
    graph::LayerGraph& graph, const std::vector<graph::SafetensorsEntry>& tensors) {
  std::map<std::string, const graph::SafetensorsEntry*> by_name;
  std::map<std::string, const graph::SafetensorsEntry*> by_short_name;
  for (const graph::SafetensorsEntry& entry : tensors) {
    by_name[entry.name] = &entry;
    by_short_name[without_first(entry.name)] = &entry;
  }
  std::vector<std::string> out;
  std::map<std::string, bool> used;
  for (graph::Node& node : graph.nodes) {
    for (graph::Param& param : node.params) {
      // A tied weight is stored once; a non-persistent buffer is in no checkpoint.
      if (!param.tied_to.empty() || !param.persistent) continue;
      const graph::SafetensorsEntry* match = nullptr;
      for (const auto& [names, key] :
           {std::pair{&by_name, param.name}, std::pair{&by_name, without_first(param.name)},
            std::pair{&by_short_name, param.name}}) {
        const auto found = names->find(key);
        if (match == nullptr && !key.empty() && found != names->end()) match = found->second;
      }
      if (match == nullptr) {
        out.push_back("missing from the checkpoint: " + param.name + " " + dims(param.shape));
        continue;
      }
      const graph::SafetensorsEntry& entry = *match;
      used[entry.name] = true;
      if (by_name.count(entry.name + ".quant_state.bitsandbytes__nf4")) {
        param.dtype = graph::DType::kNF4;  // packed two per byte: the shape is not comparable
      } else if (by_name.count(entry.name + ".quant_state.bitsandbytes__fp4")) {
        param.dtype = graph::DType::kFP4;
      } else if (entry.elements() != param.elements()) {
        out.push_back("shape differs: " + param.name + " is " + dims(entry.shape) +
                      " in the checkpoint, " + dims(param.shape) + " in the graph");
      } else {
        param.dtype = entry.dtype;  // as stored
      }
    }
  }
  for (const graph::SafetensorsEntry& entry : tensors) {
    if (!used.count(entry.name) && !is_quant_state(entry.name)) {
      out.push_back("in the checkpoint only: " + entry.name + " " + dims(entry.shape));
    }
  }
  return out;
}

bool is_hf_model_path(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return true;
  return fs::path(path).filename() == "config.json";
}

Result<HfModel> load_hf_model(const std::string& path, const ZooOptions& options) {
  std::error_code error;
  const bool is_dir = fs::is_directory(path, error);
  const fs::path directory = is_dir ? fs::path(path) : fs::path(path).parent_path();
  const std::string config_path = is_dir ? (directory / "config.json").string() : path;
  Result<std::string> text = graph::read_file(config_path, kMaxConfigBytes);
  if (!text.is_ok()) return text.status();
  Result<nlohmann::json> json = graph::parse_json_text(text.value(), config_path);
  if (!json.is_ok()) return json.status();
  Result<graph::LayerGraph> graph = graph_from_hf_config(json.value(), config_path, options);
  if (!graph.is_ok()) return graph.status();
  Result<std::optional<HfQuantization>> quantization = read_hf_quantization(json.value(), config_path);
  if (!quantization.is_ok()) return quantization.status();
  HfModel model;
  model.graph = std::move(graph.value());
  model.config_path = config_path;
  model.quantization = quantization.value();
  // The checkpoint's headers, when they are there (diffusers names its file
  // diffusion_pytorch_model.safetensors).
  Result<std::vector<graph::SafetensorsEntry>> tensors =
      Status::internal("no safetensors header was read");
  bool found = false;
  for (const char* index :
       {"model.safetensors.index.json", "diffusion_pytorch_model.safetensors.index.json"}) {
    if (!found && fs::exists(directory / index, error)) {
      tensors = graph::read_safetensors_index((directory / index).string());
      found = true;
    }
  }
  for (const char* file : {"model.safetensors", "diffusion_pytorch_model.safetensors"}) {
    if (!found && fs::exists(directory / file, error)) {
      tensors = graph::read_safetensors_header((directory / file).string());
      found = true;
    }
  }
  if (found) {
    if (!tensors.is_ok()) return tensors.status();
    model.checkpoint_tensors = static_cast<int>(tensors->size());
    model.mismatches = check_graph_against_safetensors(model.graph, tensors.value());
    if (static_cast<int>(model.mismatches.size()) > kMaxMismatchesListed) {
      const size_t more = model.mismatches.size() - kMaxMismatchesListed;
      model.mismatches.resize(kMaxMismatchesListed);
      model.mismatches.push_back("... and " + std::to_string(more) + " more");
    }
  }
  return model;
}

}  // namespace headroom::models
