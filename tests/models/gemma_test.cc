// Gemma 2 and Gemma 3 text from config.json and the zoo: the published parameter
// counts, what soft-capping keeps, the layer types, and bad fields named.
#include "models/gemma.h"

#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/validate.h"
#include "models/hf_import.h"
#include "tests/models/saved_bytes.h"

namespace headroom::models {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";

nlohmann::json config_of(const std::string& name) {
  std::ifstream in(kData + name + "/config.json");
  return nlohmann::json::parse(in);
}

graph::LayerGraph from_config(const nlohmann::json& config, AttentionImpl attention = AttentionImpl::kSdpa) {
  ZooOptions options;
  options.attention = attention;
  Result<graph::LayerGraph> graph = graph_from_hf_config(config, "g/config.json", options);
  REQUIRE_MESSAGE(graph.is_ok(), graph.message());
  return graph.value();
}

std::string refusal(const nlohmann::json& config) {
  Result<graph::LayerGraph> graph = graph_from_hf_config(config, "g/config.json", ZooOptions{});
  REQUIRE_FALSE(graph.is_ok());
  CHECK(graph.message().rfind("g/config.json: ", 0) == 0);
  return graph.message();
}

const graph::Node* node_named(const graph::LayerGraph& g, const std::string& name) {
  for (const graph::Node& node : g.nodes) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("Gemma 2 9B and Gemma 3 give the parameter counts of their technical reports") {
  // Gemma 2 report (arXiv 2408.00118) Table 2, 9B: 917,504,000 embedding parameters,
  // 8,324,201,984 non-embedding; the lm_head is tied.
  CHECK(from_config(config_of("gemma-2-9b")).parameter_count() == 917'504'000 + 8'324'201'984);
  CHECK(build_gemma(gemma2_9b_config(), ZooOptions{}).parameter_count() == 917'504'000 + 8'324'201'984);
  // Gemma 3 report (arXiv 2503.19786) Table 1, 1B: 302M embedding, 698M non-embedding
  // (262,144 x 1,152 = 301,989,888 and 697,896,064 with the q/k norms).
  const int64_t embedding_1b = 262'144 * 1'152;
  CHECK(from_config(config_of("gemma-3-1b")).parameter_count() == embedding_1b + 697'896'064);
  // 12B: 10,759M non-embedding (the language model of gemma-3-12b; its 417M vision
  // encoder is not built).
  const int64_t non_embedding_12b = build_gemma(gemma3_12b_text_config(), ZooOptions{}).parameter_count() -
                                    262'208 * 3'840;
  CHECK(non_embedding_12b / 1'000'000 == 10'759);
}

TEST_CASE("Gemma 2 soft-capping: eager keeps the tanh of every layer's scores, the head the tanh of the logits") {
  const nlohmann::json capped = config_of("gemma-2-9b-2layers");
  nlohmann::json uncapped = capped;
  uncapped["attn_logit_softcapping"] = nullptr;
  uncapped["final_logit_softcapping"] = nullptr;
  const graph::LayerGraph with_cap = from_config(capped, AttentionImpl::kEager);
  const graph::LayerGraph without_cap = from_config(uncapped, AttentionImpl::kEager);
  const int64_t batch = 2, seq = 2048, heads = 16, vocab = 256'000;
  for (const char* block : {"model.layers.0", "model.layers.1"}) {
    const int b = testing::block_index(with_cap, block);
    REQUIRE(b >= 0);
    // modeling_gemma2.py eager_attention_forward: torch.tanh(attn_weights / softcap), bf16 [B, H, S, S].
    CHECK(testing::saved_bytes(with_cap, b, batch, seq) - testing::saved_bytes(without_cap, b, batch, seq) ==
          batch * heads * seq * seq * 2);
  }
  const int head = testing::block_index(with_cap, "head");
  // Gemma2ForCausalLM.forward: torch.tanh(logits / final_logit_softcapping), bf16 [B*S, vocab].
  CHECK(testing::saved_bytes(with_cap, head, batch, seq) - testing::saved_bytes(without_cap, head, batch, seq) ==
        batch * seq * vocab * 2);
  // transformers' SDPA refuses a softcap and a Gemma 2 loaded without attn_implementation
  // runs eager: sdpa is priced as eager. flex_attention caps inside its kernel.
  const graph::LayerGraph sdpa = from_config(capped, AttentionImpl::kSdpa);
  CHECK(node_named(sdpa, "model.layers.0.self_attn.softcap.tanh") != nullptr);
  CHECK(node_named(sdpa, "model.layers.0.self_attn.sdpa") == nullptr);
  const graph::LayerGraph flex = from_config(capped, AttentionImpl::kFlex);
  CHECK(node_named(flex, "model.layers.0.self_attn.softcap.tanh") == nullptr);
  CHECK(node_named(flex, "model.layers.0.self_attn.flex") != nullptr);
  CHECK(node_named(flex, "lm_head.softcap.tanh") != nullptr);
  // Without attn_logit_softcapping, SDPA runs as asked.
  CHECK(node_named(from_config(uncapped, AttentionImpl::kSdpa), "model.layers.0.self_attn.sdpa") != nullptr);
}

TEST_CASE("Gemma 3: five sliding layers to one global, each reading its own RoPE table, and q/k norms") {
  const graph::LayerGraph g = from_config(config_of("gemma-3-1b"));
  CHECK(graph::validate_graph(g, "gemma-3-1b").is_ok());
  // sliding_window_pattern 6: layers 5, 11, 17, 23 are global (rope_theta 1e6),
  // the others sliding (rope_local_base_freq 1e4).
  for (int layer : {0, 4, 5, 6, 11, 25}) {
    const graph::Node* cos = node_named(g, "model.layers." + std::to_string(layer) + ".self_attn.q.cos");
    REQUIRE(cos != nullptr);
    const bool global = (layer + 1) % 6 == 0;
    CHECK(cos->inputs.back() == (global ? "model.rotary_emb.cos" : "model.local.rotary_emb.cos"));
  }
  CHECK(node_named(g, "model.layers.0.self_attn.q_norm") != nullptr);
  CHECK(node_named(g, "model.layers.0.pre_feedforward_layernorm") != nullptr);
  CHECK(node_named(g, "model.layers.0.post_feedforward_layernorm") != nullptr);
  // No soft-capping in Gemma 3 (Gemma3TextConfig: both null).
  CHECK(node_named(g, "lm_head.softcap.tanh") == nullptr);
}

TEST_CASE("bad Gemma fields are refused naming the field") {
  nlohmann::json types = config_of("gemma-3-1b");
  types["layer_types"] = {"sliding_attention", "full_attention"};
  CHECK(refusal(types).find("layer_types: expected a list of 26") != std::string::npos);
  types["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 26; ++i) types["layer_types"].push_back(i == 3 ? "chunked_attention" : "full_attention");
  CHECK(refusal(types).find("chunked_attention") != std::string::npos);
  nlohmann::json act = config_of("gemma-2-9b");
  act["hidden_activation"] = "relu";
  CHECK(refusal(act).find("hidden_activation: expected gelu_pytorch_tanh") != std::string::npos);
  nlohmann::json cap = config_of("gemma-2-9b");
  cap["attn_logit_softcapping"] = -50;
  CHECK(refusal(cap).find("attn_logit_softcapping") != std::string::npos);
  nlohmann::json bidirectional = config_of("gemma-3-1b");
  bidirectional["use_bidirectional_attention"] = true;
  CHECK(refusal(bidirectional).find("use_bidirectional_attention") != std::string::npos);
  nlohmann::json missing = config_of("gemma-2-9b");
  missing.erase("hidden_size");
  CHECK(refusal(missing).find("hidden_size") != std::string::npos);
}

TEST_CASE("gemma3 reads its text_config, then refuses the vision tower by name") {
  nlohmann::json multimodal = config_of("gemma-3-12b");
  const std::string message = refusal(multimodal);
  CHECK(message.find("vision_config") != std::string::npos);
  CHECK(message.find("gemma3_text") != std::string::npos);
  multimodal["text_config"]["num_key_value_heads"] = 7;
  CHECK(refusal(multimodal).find("text_config.num_key_value_heads") != std::string::npos);
}

}  // namespace headroom::models
