// SD3Transformer2DModel read from config.json (models/hf_sd3.cc) and built
// (models/sd3.cc): the published transformers' parameter counts, the blocks'
// structure (context_pre_only, dual attention, qk norm), the joint sequence and
// the refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "models/hf_import.h"
#include "models/zoo.h"
#include "tests/models/hf_test_model.h"

namespace headroom::models {
namespace {

using testing::load_test_model;

const graph::Param* find_param(const graph::LayerGraph& g, const std::string& node, const std::string& name) {
  const graph::Node* n = g.find_node(node);
  if (n == nullptr) return nullptr;
  for (const graph::Param& p : n->params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string refuse(const nlohmann::json& config) {
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "sd3/config.json", ZooOptions{});
  REQUIRE_FALSE(g.is_ok());
  return g.message();
}

nlohmann::json tiny_sd3() {
  return {{"_class_name", "SD3Transformer2DModel"}, {"num_layers", 2}, {"num_attention_heads", 2},
          {"attention_head_dim", 16}, {"caption_projection_dim", 32}, {"joint_attention_dim", 48},
          {"pooled_projection_dim", 24}, {"pos_embed_max_size", 8}};
}

}  // namespace

TEST_CASE("sd3 parameter counts are diffusers' and the published totals") {
  // sum(p.numel() for p in SD3Transformer2DModel(**config).parameters()) at
  // diffusers 0.39.0 (built on the meta device; docs/models.md, "SD3").
  CHECK(load_test_model("sd3-medium").parameter_count() == 2'028'328'000);
  CHECK(load_test_model("sd3.5-medium").parameter_count() == 2'243'171'520);
  CHECK(load_test_model("sd3.5-large").parameter_count() == 8'056'627'520);
  // Stability AI's model cards: SD3 Medium 2B, SD3.5 Large 8.1B parameters.
  CHECK(std::abs(load_test_model("sd3-medium").parameter_count() / 2.0e9 - 1) < 0.02);
  CHECK(std::abs(load_test_model("sd3.5-large").parameter_count() / 8.1e9 - 1) < 0.01);
  // The zoo entries are the same transformers.
  for (const char* name : {"sd3-medium", "sd3.5-medium", "sd3.5-large"}) {
    Result<graph::LayerGraph> zoo = build_zoo_model(name, ZooOptions{});
    REQUIRE_MESSAGE(zoo.is_ok(), zoo.message());
    CHECK_MESSAGE(zoo->parameter_count() == load_test_model(name).parameter_count(), name);
  }
}

TEST_CASE("sd3 pos_embed is a persistent buffer of pos_embed_max_size^2 rows, not a parameter") {
  const graph::LayerGraph g = load_test_model("sd3.5-medium");
  const graph::Param* table = find_param(g, "pos_embed.add", "pos_embed.pos_embed");
  REQUIRE(table != nullptr);
  CHECK(table->buffer);
  CHECK(table->persistent);
  CHECK_FALSE(table->trainable);
  CHECK(table->elements() == 384 * 384 * 1536);
  CHECK(g.sequence.max_seq == 384 * 384);
  CHECK(g.sequence.patch_px == 16);
  CHECK(g.sequence.default_seq == 64 * 64);
}

TEST_CASE("sd3 last block is context_pre_only: AdaLayerNormContinuous, no to_add_out, no ff_context") {
  const graph::LayerGraph g = load_test_model("sd3-medium");
  CHECK(g.find_node("transformer_blocks.22.attn.to_add_out") != nullptr);
  CHECK(g.find_node("transformer_blocks.22.ff_context.net.2") != nullptr);
  CHECK(g.find_node("transformer_blocks.23.attn.to_add_out") == nullptr);
  CHECK(g.find_node("transformer_blocks.23.ff_context.net.2") == nullptr);
  CHECK(g.find_node("transformer_blocks.23.attn.add_q_proj") != nullptr);
  const graph::Param* last = find_param(g, "transformer_blocks.23.norm1_context.linear",
                                        "transformer_blocks.23.norm1_context.linear.weight");
  REQUIRE(last != nullptr);
  CHECK(last->shape == std::vector<int64_t>{2 * 1536, 1536});
  const graph::Param* zero = find_param(g, "transformer_blocks.0.norm1_context.linear",
                                        "transformer_blocks.0.norm1_context.linear.weight");
  REQUIRE(zero != nullptr);
  CHECK(zero->shape == std::vector<int64_t>{6 * 1536, 1536});
}

TEST_CASE("sd3.5 medium dual-attention blocks have attn2 and a 9-chunk AdaLN, the others do not") {
  const graph::LayerGraph g = load_test_model("sd3.5-medium");
  CHECK(g.find_node("transformer_blocks.12.attn2.to_out.0") != nullptr);
  CHECK(g.find_node("transformer_blocks.13.attn2.to_out.0") == nullptr);
  CHECK(find_param(g, "transformer_blocks.12.norm1.linear", "transformer_blocks.12.norm1.linear.weight")->shape ==
        std::vector<int64_t>{9 * 1536, 1536});
  CHECK(find_param(g, "transformer_blocks.13.norm1.linear", "transformer_blocks.13.norm1.linear.weight")->shape ==
        std::vector<int64_t>{6 * 1536, 1536});
  // qk_norm "rms_norm": diffusers' RMSNorm as Python ops on q, k, and the added q, k.
  CHECK(g.find_node("transformer_blocks.0.attn.norm_added_k") != nullptr);
  CHECK(g.find_node("transformer_blocks.0.attn2.norm_q") != nullptr);
  CHECK(load_test_model("sd3-medium").find_node("transformer_blocks.0.attn.norm_q") == nullptr);
}

TEST_CASE("sd3 joint attention output is copied by its reshape under SDPA, attn2's is not") {
  // JointAttnProcessor2_0 cats q in [B, H, N, D]: the flash output follows that layout.
  const graph::LayerGraph g = load_test_model("sd3.5-medium");
  const graph::Node* merge = g.find_node("transformer_blocks.0.attn.merge_heads");
  REQUIRE(merge != nullptr);
  CHECK(merge->inputs.front() == "transformer_blocks.0.attn.sdpa");
  CHECK(g.find_node("transformer_blocks.0.attn.to_out.0")->inputs.back() == "transformer_blocks.0.attn.merge_heads");
  CHECK(g.find_node("transformer_blocks.0.attn2.merge_heads") == nullptr);
}

TEST_CASE("sd3 qk RMSNorm keeps its 16-bit input beside the f32 copy, as diffusers' RMSNorm multiplies x") {
  const graph::LayerGraph g = load_test_model("sd3.5-large");
  const graph::Node* norm = g.find_node("transformer_blocks.0.attn.norm_q");
  REQUIRE(norm != nullptr);
  bool keeps_input = false;
  bool keeps_f32_copy = false;
  for (const graph::SavedRef& saved : norm->saves) {
    keeps_input = keeps_input || (saved.tensor == "transformer_blocks.0.attn.to_q" && saved.when == graph::SaveWhen::kInputGrad);
    keeps_f32_copy = keeps_f32_copy || saved.tensor == "transformer_blocks.0.attn.norm_q:x32";
  }
  CHECK(keeps_input);
  CHECK(keeps_f32_copy);
  CHECK(g.find_tensor("transformer_blocks.0.attn.norm_q:normalized")->dtype == std::nullopt);
}

TEST_CASE("sd3 joint attention runs over S image + 77 CLIP + 77 T5 tokens, image first") {
  ZooOptions options;
  options.attention = AttentionImpl::kEager;
  const graph::LayerGraph g = load_test_model("sd3-medium", options);
  const int64_t t = 154;
  CHECK(g.find_tensor("transformer_blocks.0.attn.qk")->elements == graph::SizeExpr{0, 24 * t * t, 0, 24 * 2 * t, 0, 24});
  CHECK(g.find_tensor("encoder_hidden_states")->elements == graph::SizeExpr{0, t * 4096, 0, 0, 0, 0});
  CHECK(g.find_node("transformer_blocks.0.attn.cat_q")->inputs.front() == "transformer_blocks.0.attn.to_q");
  options.text_tokens = 256;  // --max_sequence_length 256: 77 + 256
  const graph::LayerGraph longer = load_test_model("sd3-medium", options);
  CHECK(longer.find_tensor("encoder_hidden_states")->elements == graph::SizeExpr{0, 333 * 4096, 0, 0, 0, 0});
  CHECK(longer.parameter_count() == g.parameter_count());
}

TEST_CASE("sd3 configs with keys or values headroom does not model are refused by name") {
  Result<graph::LayerGraph> tiny = graph_from_hf_config(tiny_sd3(), "sd3/config.json", ZooOptions{});
  REQUIRE_MESSAGE(tiny.is_ok(), tiny.message());
  CHECK(tiny->family == "sd3");
  nlohmann::json unknown = tiny_sd3();
  unknown["enable_end_timestep"] = true;
  CHECK(refuse(unknown).find("enable_end_timestep") != std::string::npos);
  nlohmann::json caption = tiny_sd3();
  caption["caption_projection_dim"] = 40;
  CHECK(refuse(caption).find("caption_projection_dim") != std::string::npos);
  nlohmann::json norm = tiny_sd3();
  norm["qk_norm"] = "layer_norm";
  CHECK(refuse(norm).find("qk_norm") != std::string::npos);
  nlohmann::json dual = tiny_sd3();
  dual["dual_attention_layers"] = {0, 2};
  CHECK(refuse(dual).find("dual_attention_layers") != std::string::npos);
}

}  // namespace headroom::models
