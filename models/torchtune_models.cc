#include "models/torchtune_models.h"

#include <array>

#include "models/hf_fields.h"
#include "models/llama.h"

namespace headroom::models {
namespace {

constexpr std::string_view kPrefix = "torchtune.models.";

struct Builder {
  std::string_view module;  // torchtune.models.<module>
  std::string_view name;
  LlamaConfig config;
};

// hidden, intermediate, layers, heads, kv_heads, vocab, max_seq_len; Llama 3.2 ties
// the output to the embeddings (tie_word_embeddings=True by default).
constexpr LlamaConfig llama(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                            int64_t kv_heads, int64_t vocab, int64_t max_seq, bool tied) {
  LlamaConfig c{hidden, intermediate, layers, heads, kv_heads, vocab, max_seq, 0.0};
  c.tie_embeddings = tied;
  c.rms_norm = RmsNormStyle::kTransformers;
  return c;
}

// torchtune/models/{llama2,llama3,llama3_1,llama3_2}/_model_builders.py at bd2a0fc (the
// same sizes at 1814feb); llama2_7b's intermediate is scale_hidden_dim_for_mlp(4096) = 11008.
constexpr std::array<Builder, 10> kBuilders = {{
    {"llama2", "llama2_7b", llama(4096, 11008, 32, 32, 32, 32000, 4096, false)},
    {"llama2", "llama2_13b", llama(5120, 13824, 40, 40, 40, 32000, 4096, false)},
    {"llama2", "llama2_70b", llama(8192, 28672, 80, 64, 8, 32000, 4096, false)},
    {"llama3", "llama3_8b", llama(4096, 14336, 32, 32, 8, 128256, 8192, false)},
    {"llama3", "llama3_70b", llama(8192, 28672, 80, 64, 8, 128256, 8192, false)},
    {"llama3_1", "llama3_1_8b", llama(4096, 14336, 32, 32, 8, 128256, 131072, false)},
    {"llama3_1", "llama3_1_70b", llama(8192, 28672, 80, 64, 8, 128256, 131072, false)},
    {"llama3_1", "llama3_1_405b", llama(16384, 53248, 126, 128, 8, 128256, 131072, false)},
    {"llama3_2", "llama3_2_1b", llama(2048, 8192, 16, 32, 8, 128256, 131072, true)},
    {"llama3_2", "llama3_2_3b", llama(3072, 8192, 28, 24, 8, 128256, 131072, true)},
}};

const Builder* find_builder(std::string_view name) {
  for (const Builder& b : kBuilders) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

}  // namespace

bool torchtune_builder_ties_embeddings(std::string_view builder) {
  const Builder* b = find_builder(builder);
  return b != nullptr && b->config.tie_embeddings;
}

bool is_torchtune_component(std::string_view name) { return name.starts_with(kPrefix); }

std::optional<TorchtuneComponent> parse_torchtune_component(std::string_view component) {
  if (!is_torchtune_component(component)) return std::nullopt;
  const std::string_view rest = component.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view module = rest.substr(0, dot);
  std::string_view name = rest.substr(dot + 1);
  TorchtuneComponent out;
  if (name.starts_with("qlora_")) {
    out.variant = TorchtuneComponent::Variant::kQlora;
    name.remove_prefix(6);
  } else if (name.starts_with("lora_")) {
    out.variant = TorchtuneComponent::Variant::kLora;
    name.remove_prefix(5);
  }
  const Builder* builder = find_builder(name);
  if (builder == nullptr || builder->module != module) return std::nullopt;
  out.builder = std::string(name);
  return out;
}

std::string torchtune_builder_names() {
  std::string out;
  for (const Builder& b : kBuilders) out += (out.empty() ? "" : ", ") + std::string(b.module) + "." + std::string(b.name);
  return out;
}

Result<graph::LayerGraph> build_torchtune_model(std::string_view component, const ZooOptions& options) {
  const std::optional<TorchtuneComponent> parsed = parse_torchtune_component(component);
  if (!parsed) {
    return Status::unsupported(
        "model: \"" + std::string(component) +
        "\" is not a torchtune builder headroom knows; expected torchtune.models.<one of: " +
        torchtune_builder_names() + ">, optionally with a lora_ or qlora_ prefix");
  }
  const Builder& b = *find_builder(parsed->builder);
  LlamaConfig config = b.config;
  // llama3_1 and llama3_2 build Llama3ScaledRoPE, which their lora_ builders share
  // across layers (_component_builders.py, 0.6.1); llama2 and llama3 make one per layer.
  config.rope_cache = b.module == "llama3_1" || b.module == "llama3_2" ? kLlama3ScaledRope : kLlamaRope;
  graph::LayerGraph graph = build_llama(config, options);
  graph.name = std::string(kPrefix) + std::string(b.module) + "." + std::string(b.name);
  graph.family = "llama";
  graph.description = "torchtune " + std::string(b.name) + " (torchtune's Python-op RMSNorm)";
  graph.source = "torchtune/models/" + std::string(b.module) + "/_model_builders.py";
  set_token_sequence(graph, b.config.max_position);
  graph.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return graph;
}

}  // namespace headroom::models
