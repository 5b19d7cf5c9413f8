// RoPE's cos/sin caches as buffers (models/rope_caches.h; docs/models.md, "Rotary
// caches"): which library keeps what, per family, with the sizes the meta-device
// oracle records (docs/results/oracle.md: transformers 4.44.2 as env hf4,
// torchtune 0.6.1 as env tt).
#include "models/rope_caches.h"
#include "hf_test_model.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "models/hf_import.h"
#include "models/torchtune_models.h"

namespace headroom::models {
namespace {

using testing::load_test_model;

graph::LayerGraph load(const std::string& name, RopeModules modules) {
  ZooOptions options;
  options.rope_modules = modules;
  return load_test_model(name, options);
}

graph::LayerGraph torchtune(const std::string& component, RopeModules modules) {
  ZooOptions options;
  options.rope_modules = modules;
  Result<graph::LayerGraph> graph = build_torchtune_model(component, options);
  REQUIRE_MESSAGE(graph.is_ok(), graph.message());
  return graph.value();
}

struct Caches {
  int count = 0;
  int64_t bytes = 0;  // as declared: the planner casts a buffer without upcast_fp32 with the model
  std::vector<std::string> names;
};

Caches caches_of(const graph::LayerGraph& graph) {
  Caches out;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& p : node.params) {
      if (!p.buffer) continue;
      CHECK_FALSE(p.persistent);  // register_buffer(..., persistent=False): in no checkpoint
      CHECK_FALSE(p.trainable);
      ++out.count;
      out.bytes += graph::dtype_bytes(p.dtype, p.elements());
      out.names.push_back(p.name);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("transformers before 4.45 caches cos and sin in every Qwen2 layer") {
  // Qwen2.5-0.5B: 24 layers, head_dim 64, max_position_embeddings 32768. The oracle
  // (hf4) holds `_to_copy (32768, 64) bfloat16 x48`: 201,326,592 bytes.
  const graph::LayerGraph old = load("qwen2.5-0.5b", RopeModules::kTransformersCached);
  const Caches caches = caches_of(old);
  CHECK(caches.count == 48);
  CHECK(caches.bytes == 201'326'592);
  CHECK(caches.names.front() == "model.layers.0.self_attn.rotary_emb.cos_cached");
  CHECK(holds_transformers_rope_caches(old));
  // Buffers are not parameters: the published 494M is unchanged.
  CHECK(old.parameter_count() == load("qwen2.5-0.5b", RopeModules::kPerForward).parameter_count());
  CHECK(caches_of(load("qwen2.5-0.5b", RopeModules::kPerForward)).count == 0);
  // Llama's 4.44 rotary module caches nothing (LlamaRotaryEmbedding: inv_freq only).
  CHECK(caches_of(load("llama-3.2-1b", RopeModules::kTransformersCached)).count == 0);
  CHECK(caches_of(load("mistral-7b", RopeModules::kTransformersCached)).count == 0);
}

TEST_CASE("Mixtral before 4.45 caches cos and sin in every layer, Mistral does not") {
  // MixtralRotaryEmbedding (4.44.2): [32768, 128] in the model's bf16, 8 MiB each. The
  // oracle (hf4bnb43, tf4-experts rows) holds `_to_copy (32768, 128) bfloat16 x4` at 2 layers.
  const Caches caches = caches_of(load("mixtral-2l", RopeModules::kTransformersCached));
  CHECK(caches.count == 4);
  CHECK(caches.bytes == 4 * 32768 * 128 * 2);
  CHECK(caches_of(load("mixtral-2l", RopeModules::kPerForward)).count == 0);
}

TEST_CASE("GPT-NeoX's caches before 4.45 are fp32 over the rotary dims") {
  // Pythia-160m: 12 layers, head_dim 64, rotary_pct 0.25 -> 16 dims, 2048 positions.
  // The oracle (hf4, bf16): `cos (2048, 16) float32 x12` and `sin` alike.
  const Caches caches = caches_of(load("pythia-160m", RopeModules::kTransformersCached));
  CHECK(caches.count == 24);
  CHECK(caches.bytes == 3'145'728);
  CHECK(caches.names.front() == "gpt_neox.layers.0.attention.rotary_emb.cos_cached");
  CHECK(caches_of(load("pythia-160m", RopeModules::kTorchtuneLora)).count == 0);  // no torchtune GPT-NeoX
}

TEST_CASE("torchtune's lora_qwen2 keeps an fp32 cache in every layer") {
  // Qwen2RotaryPositionalEmbeddings: [32768, 2 * 64] fp32 = 16 MiB. The oracle (tt,
  // LoRA) holds `cat (32768, 128) float32 x24`: 402,653,184 bytes.
  const Caches lora = caches_of(load("qwen2.5-0.5b", RopeModules::kTorchtuneLora));
  CHECK(lora.count == 24);
  CHECK(lora.bytes == 402'653'184);
  CHECK(lora.names.front() == "model.layers.0.self_attn.rotary_emb.cache");
  CHECK_FALSE(holds_transformers_rope_caches(load("qwen2.5-0.5b", RopeModules::kTorchtuneLora)));
}

TEST_CASE("torchtune's full builders keep one cache the layers share") {
  // qwen2() builds one Qwen2RotaryPositionalEmbeddings for every layer: [32768, 128]
  // fp32 = 16 MiB, held by the first layer's attention, named as the model's.
  const graph::LayerGraph qwen = load("qwen2.5-0.5b", RopeModules::kTorchtune);
  const Caches full = caches_of(qwen);
  CHECK(full.count == 1);
  CHECK(full.bytes == 16'777'216);
  CHECK(full.names.front() == "model.rotary_emb.cache");
  // llama3() likewise: RotaryPositionalEmbeddings [8192, 64, 2] fp32 = 4 MiB, the
  // view its mul saves being of the whole buffer: kept, and shared.
  const graph::LayerGraph llama = load("llama-3-8b", RopeModules::kTorchtune);
  const Caches one = caches_of(llama);
  CHECK(one.count == 1);
  CHECK(one.bytes == 4'194'304);
  for (const graph::Node& node : llama.nodes) {
    for (const graph::Param& p : node.params) {
      if (!p.buffer) continue;
      CHECK(rope_cache_kept_for_backward(p));
      CHECK(rope_cache_shared(p, llama.blocks[node.block]));
      CHECK(llama.blocks[node.block].name == "model.layers.0");
    }
  }
  // No torchtune builder for GPT-NeoX: nothing, shared or not.
  CHECK(caches_of(load("pythia-160m", RopeModules::kTorchtune)).count == 0);
}

TEST_CASE("torchtune's lora_llama3 makes a cache per layer, lora_llama3_1 and lora_llama3_2 share one") {
  // RotaryPositionalEmbeddings [8192, 64, 2] fp32 = 4 MiB in each of 32 layers.
  const Caches llama3 = caches_of(torchtune("torchtune.models.llama3.lora_llama3_8b", RopeModules::kTorchtuneLora));
  CHECK(llama3.count == 32);
  CHECK(llama3.bytes == 134'217'728);
  // Llama3ScaledRoPE: one for the model, in the lora_ builder too: [131072, 32, 2] fp32
  // = 32 MiB for Llama 3.2 1B (head_dim 64), [131072, 64, 2] = 64 MiB for Llama 3.1 8B.
  const Caches llama3_2 = caches_of(torchtune("torchtune.models.llama3_2.lora_llama3_2_1b", RopeModules::kTorchtuneLora));
  CHECK(llama3_2.count == 1);
  CHECK(llama3_2.bytes == 33'554'432);
  const Caches llama3_1 = caches_of(torchtune("torchtune.models.llama3_1.lora_llama3_1_8b", RopeModules::kTorchtuneLora));
  CHECK(llama3_1.count == 1);
  CHECK(llama3_1.bytes == 67'108'864);
  // The same from a config.json: rope_scaling's rope_type "llama3" is what llama3_2 builds.
  CHECK(caches_of(load("llama-3.2-1b", RopeModules::kTorchtuneLora)).count == 1);
  CHECK(caches_of(load("llama-3-8b", RopeModules::kTorchtuneLora)).count == 32);
}

TEST_CASE("torchtune's caches stay fp32, transformers' Qwen2 caches follow the model") {
  const graph::LayerGraph tune = load("qwen2.5-0.5b", RopeModules::kTorchtuneLora);
  const graph::LayerGraph old = load("qwen2.5-0.5b", RopeModules::kTransformersCached);
  for (const graph::LayerGraph* graph : {&tune, &old}) {
    for (const graph::Node& node : graph->nodes) {
      for (const graph::Param& p : node.params) {
        if (!p.buffer) continue;
        CHECK(p.upcast_fp32 == (graph == &tune));
      }
    }
  }
}

TEST_CASE("a checkpoint is not expected to hold a non-persistent buffer") {
  graph::LayerGraph graph = load("qwen2.5-0.5b", RopeModules::kTransformersCached);
  const std::vector<std::string> mismatches = check_graph_against_safetensors(graph, {});
  for (const std::string& line : mismatches) CHECK(line.find("rotary_emb") == std::string::npos);
  CHECK_FALSE(mismatches.empty());  // the weights are still looked for
}

}  // namespace headroom::models
