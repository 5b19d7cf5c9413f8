// transformers' sliding-window SDPA mask: Phi-3 and Mistral layers, and Gemma 3's
// sliding layers, keep a converted [B, 1, S, S] mask once S reaches the window
// (models/graph_builder.cc).
#include <doctest/doctest.h>

#include <string>

#include "graph/graph_analysis.h"
#include "models/hf_import.h"
#include "models/hf_fields.h"
#include "models/llama.h"
#include "models/zoo_builders.h"
#include "hf_test_model.h"

namespace headroom::models {
namespace {

using testing::load_test_model;

graph::LayerGraph load(const std::string& name, AttentionImpl impl) {
  ZooOptions options;
  options.attention = impl;
  return load_test_model(name, options);
}

int64_t mask_bytes(const graph::LayerGraph& g, const std::string& layer, int64_t batch, int64_t seq) {
  const graph::Tensor* mask = g.find_tensor(layer + ".self_attn.sdpa_mask");
  if (mask == nullptr) return -1;
  return graph::tensor_bytes(*mask, graph::DType::kBF16, batch, seq);
}

bool sdpa_saves_mask(const graph::LayerGraph& g, const std::string& layer) {
  const graph::Node* sdpa = g.find_node(layer + ".self_attn.sdpa");
  REQUIRE(sdpa != nullptr);
  for (const graph::SavedRef& saved : sdpa->saves) {
    if (saved.tensor == layer + ".self_attn.sdpa_mask") return true;
  }
  return false;
}

}  // namespace

TEST_CASE("Phi-3 SDPA keeps a bf16 mask per layer from S = sliding_window (2047) on") {
  const graph::LayerGraph g = load("phi-3-mini-4k", AttentionImpl::kSdpa);
  for (const char* layer : {"model.layers.0", "model.layers.31"}) {
    CHECK(sdpa_saves_mask(g, layer));
    CHECK(mask_bytes(g, layer, 2, 2048) == 2 * 2048 * 2048 * 2);
    CHECK(mask_bytes(g, layer, 2, 2047) == 2 * 2047 * 2047 * 2);
    CHECK(mask_bytes(g, layer, 2, 2046) == 0);
    CHECK(mask_bytes(g, layer, 1, 512) == 0);
  }
}

TEST_CASE("Gemma 3's sliding layers keep the SDPA mask from S = 512 on, its global layers none") {
  // gemma-3-1b: sliding_window 512, five sliding layers in every six (the sixth global).
  const graph::LayerGraph g = load("gemma-3-1b", AttentionImpl::kSdpa);
  CHECK(sdpa_saves_mask(g, "model.layers.0"));
  CHECK(mask_bytes(g, "model.layers.4", 2, 2048) == 2 * 2048 * 2048 * 2);
  CHECK(mask_bytes(g, "model.layers.4", 2, 511) == 0);
  CHECK(mask_bytes(g, "model.layers.5", 2, 2048) == -1);
  CHECK_FALSE(sdpa_saves_mask(g, "model.layers.5"));
}

TEST_CASE("eager attention and models without a window make no SDPA mask") {
  CHECK(mask_bytes(load("phi-3-mini-4k", AttentionImpl::kEager), "model.layers.0", 2, 2048) == -1);
  CHECK(mask_bytes(load("llama-3-8b", AttentionImpl::kSdpa), "model.layers.0", 2, 2048) == -1);
}

TEST_CASE("Mistral's sliding_window: 4096 when absent, off when null") {
  nlohmann::json config = {{"hidden_size", 64},     {"intermediate_size", 128}, {"num_hidden_layers", 1},
                           {"num_attention_heads", 4}, {"vocab_size", 100}};
  const auto window = [](const nlohmann::json& j) {
    Result<LlamaConfig> c = read_llama_config(HfFields{j, "config.json", ""}, "mistral");
    REQUIRE_MESSAGE(c.is_ok(), c.message());
    return c->sliding_window;
  };
  CHECK(window(config) == 4096);
  config["sliding_window"] = 8;
  CHECK(window(config) == 8);
  config["sliding_window"] = nullptr;
  CHECK(window(config) == 0);
}

}  // namespace headroom::models
