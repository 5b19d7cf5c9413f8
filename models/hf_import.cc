#include "models/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/graph_json.h"
#include "graph/safetensors_header.h"
#include "graph/validate.h"
#include "models/llama.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxConfigBytes = 4 << 20;
constexpr int kMaxMismatchesListed = 20;

Status field_error(std::string_view origin, const std::string& field, const std::string& expected) {
  return Status::error(std::string(origin) + ": " + field + ": expected " + expected);
}

// A required positive integer field of the config.
Result<int64_t> positive(const nlohmann::json& c, std::string_view origin, const char* key) {
  if (!c.contains(key)) return field_error(origin, key, "a positive integer (the field is missing)");
  const auto& value = c.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0 || value.get<int64_t>() > (int64_t{1} << 32)) {
    return field_error(origin, key, "a positive integer, got " + value.dump());
  }
  return value.get<int64_t>();
}

// An optional field with the default transformers' config class gives it.
Result<int64_t> positive_or(const nlohmann::json& c, std::string_view origin, const char* key, int64_t fallback) {
  if (!c.contains(key) || c.at(key).is_null()) return fallback;
  return positive(c, origin, key);
}

Result<bool> boolean_or(const nlohmann::json& c, std::string_view origin, const char* key, bool fallback) {
  if (!c.contains(key) || c.at(key).is_null()) return fallback;
  if (!c.at(key).is_boolean()) return field_error(origin, key, "true or false, got " + c.at(key).dump());
  return c.at(key).get<bool>();
}

Result<double> probability_or(const nlohmann::json& c, std::string_view origin, const char* key, double fallback) {
  if (!c.contains(key) || c.at(key).is_null()) return fallback;
  if (!c.at(key).is_number() || c.at(key).get<double>() < 0 || c.at(key).get<double>() >= 1) {
    return field_error(origin, key, "a probability in [0, 1), got " + c.at(key).dump());
  }
  return c.at(key).get<double>();
}

// Llama-family decoders: llama, mistral, qwen2, qwen3 (transformers'
// LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config field names).
Result<graph::LayerGraph> llama_family(const nlohmann::json& c, std::string_view origin, const std::string& type,
                                       const ZooOptions& options) {
  LlamaConfig config;
  const Result<int64_t> hidden = positive(c, origin, "hidden_size");
  const Result<int64_t> intermediate = positive(c, origin, "intermediate_size");
  const Result<int64_t> layers = positive(c, origin, "num_hidden_layers");
  const Result<int64_t> heads = positive(c, origin, "num_attention_heads");
  const Result<int64_t> vocab = positive(c, origin, "vocab_size");
  for (const auto* r : {&hidden, &intermediate, &layers, &heads, &vocab}) {
    if (!r->is_ok()) return r->status();
  }
  config.hidden = hidden.value();
  config.intermediate = intermediate.value();
  config.layers = layers.value();
  config.heads = heads.value();
  config.vocab = vocab.value();
  // Defaults as in transformers: num_key_value_heads = num_attention_heads;
  // max_position_embeddings 2048 (Llama), 32768 (Mistral, Qwen2, Qwen3);
  // head_dim = hidden / heads except Qwen3 (128); attention_bias false except
  // Qwen2, whose q/k/v projections always have a bias; tie_word_embeddings false.
  const Result<int64_t> kv = positive_or(c, origin, "num_key_value_heads", config.heads);
  const Result<int64_t> max_position =
      positive_or(c, origin, "max_position_embeddings", type == "llama" ? 2048 : 32768);
  const Result<int64_t> head_dim =
      positive_or(c, origin, "head_dim", type == "qwen3" ? 128 : config.hidden / config.heads);
  const Result<bool> bias = boolean_or(c, origin, "attention_bias", false);
  const Result<bool> tie = boolean_or(c, origin, "tie_word_embeddings", false);
  const Result<double> dropout = probability_or(c, origin, "attention_dropout", 0.0);
  if (!kv.is_ok()) return kv.status();
  if (!max_position.is_ok()) return max_position.status();
  if (!head_dim.is_ok()) return head_dim.status();
  if (!bias.is_ok()) return bias.status();
  if (!tie.is_ok()) return tie.status();
  if (!dropout.is_ok()) return dropout.status();
  config.kv_heads = kv.value();
  if (config.heads % config.kv_heads != 0) {
    return field_error(origin, "num_key_value_heads", "a divisor of num_attention_heads (" +
                                                          std::to_string(config.heads) + "), got " +
                                                          std::to_string(config.kv_heads));
  }
  config.max_position = max_position.value();
  config.head_dim = head_dim.value();
  config.qkv_bias = type == "qwen2" || bias.value();
  config.qk_norm = type == "qwen3";
  config.tie_embeddings = tie.value();
  config.attention_dropout = dropout.value();
  graph::LayerGraph graph = build_llama(config, options);
  graph.family = type;
  graph.sequence.unit = "tokens";
  graph.sequence.max_seq = config.max_position;
  graph.sequence.default_seq = std::min<int64_t>(2048, config.max_position);
  graph.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return graph;
}

Result<double> dropout_field(const nlohmann::json& c, std::string_view origin, const char* key, double fallback) {
  return probability_or(c, origin, key, fallback);
}

// GPT-2 (transformers GPT2Config: defaults n_layer 12, n_embd 768, n_head 12,
// vocab_size 50257, n_positions 1024, *_pdrop 0.1; embeddings tied).
Result<graph::LayerGraph> gpt2_family(const nlohmann::json& c, std::string_view origin, const std::string& type,
                                      const ZooOptions& options) {
  GptConfig config;
  const Result<int64_t> layers = positive_or(c, origin, "n_layer", 12);
  const Result<int64_t> hidden = positive_or(c, origin, "n_embd", 768);
  const Result<int64_t> heads = positive_or(c, origin, "n_head", 12);
  const Result<int64_t> vocab = positive_or(c, origin, "vocab_size", 50257);
  const Result<int64_t> positions = positive_or(c, origin, "n_positions", 1024);
  const Result<double> embd = dropout_field(c, origin, "embd_pdrop", 0.1);
  const Result<double> attn = dropout_field(c, origin, "attn_pdrop", 0.1);
  const Result<double> resid = dropout_field(c, origin, "resid_pdrop", 0.1);
  for (const auto* r : {&layers, &hidden, &heads, &vocab, &positions}) {
    if (!r->is_ok()) return r->status();
  }
  for (const auto* r : {&embd, &attn, &resid}) {
    if (!r->is_ok()) return r->status();
  }
  if (hidden.value() % heads.value() != 0) {
    return field_error(origin, "n_head", "a divisor of n_embd (" + std::to_string(hidden.value()) + ")");
  }
  config = GptConfig{layers.value(), hidden.value(), heads.value(), vocab.value(), positions.value(),
                     embd.value(), attn.value(), resid.value()};
  graph::LayerGraph graph = build_gpt2_from(config, options);
  graph.family = type;
  graph.sequence.unit = "tokens";
  graph.sequence.max_seq = config.positions;
  graph.sequence.default_seq = config.positions;
  graph.lora_targets = {"c_attn", "c_proj", "c_fc"};
  return graph;
}

// BERT with a classification head (transformers BertConfig defaults: 768 hidden,
// 12 layers, 12 heads, 3072 intermediate, vocab 30522, 512 positions, 2 token
// types, dropouts 0.1; num_labels = len(id2label), default 2).
Result<graph::LayerGraph> bert_family(const nlohmann::json& c, std::string_view origin, const std::string& type,
                                      const ZooOptions& options) {
  BertConfig config;
  const Result<int64_t> hidden = positive_or(c, origin, "hidden_size", 768);
  const Result<int64_t> layers = positive_or(c, origin, "num_hidden_layers", 12);
  const Result<int64_t> heads = positive_or(c, origin, "num_attention_heads", 12);
  const Result<int64_t> intermediate = positive_or(c, origin, "intermediate_size", 3072);
  const Result<int64_t> vocab = positive_or(c, origin, "vocab_size", 30522);
  const Result<int64_t> positions = positive_or(c, origin, "max_position_embeddings", 512);
  const Result<int64_t> types = positive_or(c, origin, "type_vocab_size", 2);
  const Result<double> hidden_p = dropout_field(c, origin, "hidden_dropout_prob", 0.1);
  const Result<double> attention_p = dropout_field(c, origin, "attention_probs_dropout_prob", 0.1);
  for (const auto* r : {&hidden, &layers, &heads, &intermediate, &vocab, &positions, &types}) {
    if (!r->is_ok()) return r->status();
  }
  for (const auto* r : {&hidden_p, &attention_p}) {
    if (!r->is_ok()) return r->status();
  }
  if (hidden.value() % heads.value() != 0) {
    return field_error(origin, "num_attention_heads", "a divisor of hidden_size (" + std::to_string(hidden.value()) + ")");
  }
  int64_t labels = 2;
  if (c.contains("id2label")) {
    if (!c.at("id2label").is_object() || c.at("id2label").empty()) return field_error(origin, "id2label", "an object of labels");
    labels = static_cast<int64_t>(c.at("id2label").size());
  }
  config = BertConfig{hidden.value(), layers.value(), heads.value(), intermediate.value(), vocab.value(),
                      positions.value(), types.value(), hidden_p.value(), attention_p.value(), labels};
  graph::LayerGraph graph = build_bert_from(config, options);
  graph.family = type;
  graph.sequence.unit = "tokens";
  graph.sequence.max_seq = config.positions;
  graph.sequence.default_seq = config.positions;
  graph.lora_targets = {"query", "key", "value", "dense"};
  return graph;
}

using Builder = Result<graph::LayerGraph> (*)(const nlohmann::json&, std::string_view, const std::string&,
                                              const ZooOptions&);

const std::map<std::string, Builder>& builders() {
  static const std::map<std::string, Builder> kBuilders = {
      {"llama", llama_family}, {"mistral", llama_family}, {"qwen2", llama_family}, {"qwen3", llama_family},
      {"gpt2", gpt2_family},   {"bert", bert_family}};
  return kBuilders;
}

std::string dims(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Compares the graph's parameters with the checkpoint's tensors by name and shape.
std::vector<std::string> compare(const graph::LayerGraph& graph, const std::vector<graph::SafetensorsEntry>& tensors) {
  std::map<std::string, const graph::SafetensorsEntry*> by_name;
  for (const graph::SafetensorsEntry& entry : tensors) by_name[entry.name] = &entry;
  std::vector<std::string> out;
  std::map<std::string, bool> used;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (!param.tied_to.empty()) continue;
      const auto found = by_name.find(param.name);
      if (found == by_name.end()) {
        out.push_back("missing from the checkpoint: " + param.name + " " + dims(param.shape));
        continue;
      }
      used[param.name] = true;
      if (found->second->elements() != param.elements()) {
        out.push_back("shape differs: " + param.name + " is " + dims(found->second->shape) + " in the checkpoint, " +
                      dims(param.shape) + " in the graph");
      }
    }
  }
  for (const graph::SafetensorsEntry& entry : tensors) {
    if (!used.count(entry.name)) out.push_back("in the checkpoint only: " + entry.name + " " + dims(entry.shape));
  }
  return out;
}

}  // namespace

std::string_view supported_hf_model_types() { return "llama, mistral, qwen2, qwen3, gpt2, bert"; }

Result<graph::LayerGraph> graph_from_hf_config(const nlohmann::json& config, std::string_view origin,
                                               const ZooOptions& options) {
  if (!config.is_object()) return field_error(origin, "(top level)", "a JSON object (a Hugging Face config.json)");
  if (!config.contains("model_type") || !config.at("model_type").is_string()) {
    if (config.contains("_class_name")) {
      return field_error(origin, "_class_name", "a transformers config with \"model_type\"; diffusers models (" +
                                                    config.at("_class_name").dump() +
                                                    ") are not read from config.json yet: use the zoo or a layer-graph JSON");
    }
    return field_error(origin, "model_type", "a string naming the architecture");
  }
  const std::string type = config.at("model_type").get<std::string>();
  const auto builder = builders().find(type);
  if (builder == builders().end()) {
    return field_error(origin, "model_type",
                       "one of " + std::string(supported_hf_model_types()) + ", got \"" + type +
                           "\"; for other architectures write a layer-graph JSON (docs/layer-graph-format.md)");
  }
  Result<graph::LayerGraph> graph = builder->second(config, origin, type, options);
  if (!graph.is_ok()) return graph.status();
  graph->name = config.contains("_name_or_path") && config.at("_name_or_path").is_string() &&
                        !config.at("_name_or_path").get<std::string>().empty()
                    ? config.at("_name_or_path").get<std::string>()
                    : fs::path(std::string(origin)).parent_path().filename().string();
  if (graph->name.empty()) graph->name = type;
  graph->description = type + " model from " + std::string(origin);
  graph->source = std::string(origin);
  if (Status valid = graph::validate_graph(graph.value(), origin); !valid.is_ok()) return valid;
  return graph;
}

bool is_hf_model_path(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return true;
  return fs::path(path).filename() == "config.json";
}

Result<HfModel> load_hf_model(const std::string& path, const ZooOptions& options) {
  std::error_code error;
  const fs::path directory = fs::is_directory(path, error) ? fs::path(path) : fs::path(path).parent_path();
  const std::string config_path = fs::is_directory(path, error) ? (directory / "config.json").string() : path;
  Result<std::string> text = graph::read_file(config_path, kMaxConfigBytes);
  if (!text.is_ok()) return text.status();
  Result<nlohmann::json> json = graph::parse_json_text(text.value(), config_path);
  if (!json.is_ok()) return json.status();
  Result<graph::LayerGraph> graph = graph_from_hf_config(json.value(), config_path, options);
  if (!graph.is_ok()) return graph.status();
  HfModel model;
  model.graph = std::move(graph.value());
  // The checkpoint's headers, when they are there.
  Result<std::vector<graph::SafetensorsEntry>> tensors = Status::error("none");
  bool found = false;
  if (fs::exists(directory / "model.safetensors.index.json", error)) {
    tensors = graph::read_safetensors_index((directory / "model.safetensors.index.json").string());
    found = true;
  } else if (fs::exists(directory / "model.safetensors", error)) {
    tensors = graph::read_safetensors_header((directory / "model.safetensors").string());
    found = true;
  }
  if (found) {
    if (!tensors.is_ok()) return tensors.status();
    model.checkpoint_tensors = static_cast<int>(tensors->size());
    model.mismatches = compare(model.graph, tensors.value());
    if (static_cast<int>(model.mismatches.size()) > kMaxMismatchesListed) {
      const size_t more = model.mismatches.size() - kMaxMismatchesListed;
      model.mismatches.resize(kMaxMismatchesListed);
      model.mismatches.push_back("... and " + std::to_string(more) + " more");
    }
  }
  return model;
}

}  // namespace headroom::models
