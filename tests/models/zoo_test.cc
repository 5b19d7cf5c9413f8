// Every zoo model builds, validates, and has the published parameter count.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "graph/validate.h"
#include "models/zoo.h"
#include "models/zoo_builders.h"
#include "saved_bytes.h"

namespace headroom::models {
namespace {

graph::LayerGraph build(const std::string& name, const ZooOptions& options = {}) {
  Result<graph::LayerGraph> g = build_zoo_model(name, options);
  REQUIRE_MESSAGE(g.is_ok(), g.message());
  return g.value();
}

void check_count(const std::string& name, double published, const ZooOptions& options = {}) {
  const graph::LayerGraph g = build(name, options);
  const double count = static_cast<double>(g.parameter_count());
  INFO(name << ": " << g.parameter_count() << " parameters, published " << published);
  CHECK(std::abs(count - published) / published < 0.01);
}

TEST_CASE("every zoo model builds and validates, eager, SDPA, flex and flash-attn's Triton kernel") {
  for (const ZooEntry& entry : zoo_models()) {
    for (AttentionImpl impl :
         {AttentionImpl::kSdpa, AttentionImpl::kEager, AttentionImpl::kFlex, AttentionImpl::kTritonFlash}) {
      ZooOptions options;
      options.attention = impl;
      const graph::LayerGraph g = build(entry.name, options);
      const Status status = graph::validate_graph(g, entry.name);
      INFO(entry.name);
      CHECK_MESSAGE(status.is_ok(), status.message());
      CHECK(g.name == entry.name);
      CHECK(!g.source.empty());
      CHECK(!g.lora_targets.empty());
      CHECK(g.blocks.front().checkpointable == false);
      CHECK(g.blocks.back().checkpointable == false);
    }
  }
}

TEST_CASE("flux with on-the-fly text encoders validates and counts them frozen") {
  ZooOptions options;
  options.precomputed_text_embeddings = false;
  const graph::LayerGraph g = build("flux-kontext-dev", options);
  const Status status = graph::validate_graph(g, "flux");
  CHECK_MESSAGE(status.is_ok(), status.message());
  const graph::LayerGraph pre = build("flux-kontext-dev");
  const int64_t frozen = g.parameter_count() - g.trainable_parameter_count();
  CHECK(g.trainable_parameter_count() == pre.parameter_count());
  // T5-XXL encoder 4.76B (google/t5-v1_1-xxl) + CLIP-L text 123.1M.
  CHECK(std::abs(static_cast<double>(frozen) - 4.885e9) / 4.885e9 < 0.01);
}

TEST_CASE("unknown model names list the zoo") {
  const Result<graph::LayerGraph> g = build_zoo_model("llama-9", {});
  REQUIRE(!g.is_ok());
  CHECK(g.message().find("llama-3-8b") != std::string::npos);
  CHECK(g.message().find("llama-9") != std::string::npos);
}

// Published totals: model cards / papers.
TEST_CASE("parameter counts match the published totals within 1%") {
  check_count("llama-3-8b", 8.03e9);     // Meta Llama 3 model card: 8B (8,030,261,248)
  check_count("llama-3.1-8b", 8.03e9);
  check_count("mistral-7b", 7.24e9);     // Mistral 7B: 7.24B
  check_count("qwen-7b", 7.72e9);        // Qwen-7B card: 7.72B (7,721,324,544)
  check_count("gpt2", 124.44e6);         // GPT-2 small: 124,439,808
  check_count("bert-large-uncased", 335.14e6);  // BERT-large 335M + 2-way classifier
  check_count("vit-b-16", 86.57e6);      // google/vit-base-patch16-224: 86.6M
  check_count("flux-kontext-dev", 11.9e9);  // FLUX.1: 12B (11.9B) transformer
  // EVA ViT-g/14 in BLIP-2: 39 of EVA-CLIP's 40 blocks; "~1B" in the paper,
  // 0.986B by this architecture (Blip2VisionModel with post_layernorm).
  check_count("eva-vit-g", 0.986e9);
  // LLaVA: Llama-3-8B 8.03B + CLIP ViT-L/14-336 303.5M + projector 21.0M.
  check_count("llava-llama-3-8b", 8.355e9);
}

TEST_CASE("exact counts of the architectures as built") {
  CHECK(build("llama-3-8b").parameter_count() == 8030261248);
  CHECK(build("mistral-7b").parameter_count() == 7241732096);
  CHECK(build("qwen-7b").parameter_count() == 7721324544);
  CHECK(build("gpt2").parameter_count() == 124439808);
  CHECK(build("vit-b-16").parameter_count() == 86567656);
}

TEST_CASE("CLIP ViT-L/14-336 vision tower: ~303M") {
  const graph::LayerGraph g = build_clip_vit_l14_336_vision({});
  CHECK(graph::validate_graph(g, "clip").is_ok());
  CHECK(std::abs(static_cast<double>(g.parameter_count()) - 303.5e6) / 303.5e6 < 0.01);
}

TEST_CASE("gpt2 ties lm_head to wte") {
  const graph::LayerGraph g = build("gpt2");
  const graph::Node* head = g.find_node("lm_head");
  REQUIRE(head != nullptr);
  CHECK(head->params[0].tied_to == "transformer.wte.weight");
}

TEST_CASE("module names follow the HF checkpoints") {
  CHECK(build("llama-3-8b").find_node("model.layers.3.self_attn.q_proj") != nullptr);
  CHECK(build("qwen-7b").find_node("transformer.h.31.attn.c_attn") != nullptr);
  CHECK(build("llava-llama-3-8b").find_node("language_model.model.layers.0.mlp.down_proj") != nullptr);
  const graph::LayerGraph flux = build("flux-kontext-dev");
  CHECK(flux.find_node("transformer_blocks.18.attn.to_out.0") != nullptr);
  CHECK(flux.find_node("single_transformer_blocks.37.proj_out") != nullptr);
  const graph::Node* q = flux.find_node("transformer_blocks.0.attn.to_q");
  REQUIRE(q != nullptr);
  REQUIRE(q->linear.has_value());
  CHECK(q->linear->in_features == 3072);
}

TEST_CASE("eager Llama keeps the f32 softmax and its bf16 copy: 6 bytes per score") {
  ZooOptions options;
  options.attention = AttentionImpl::kEager;
  const graph::LayerGraph g = build("llama-3-8b", options);
  const graph::SizeExpr e = testing::saved_elements(g, testing::block_index(g, "model.layers.0"));
  CHECK(e.bss == 2 * 32);  // f32 probs + bf16 copy, elements; bytes checked below
  const int64_t b = 1, s = 1024;
  ZooOptions sdpa;
  const graph::LayerGraph f = build("llama-3-8b", sdpa);
  const int64_t eager_bytes = testing::saved_bytes(g, testing::block_index(g, "model.layers.0"), b, s);
  const int64_t flash_bytes = testing::saved_bytes(f, testing::block_index(f, "model.layers.0"), b, s);
  CHECK(testing::saved_elements(f, testing::block_index(f, "model.layers.0")).bss == 0);
  CHECK(eager_bytes > flash_bytes + 6 * 32 * s * s * b - 1);
}

TEST_CASE("flux joint attention scores expand (S+512)^2") {
  ZooOptions options;
  options.attention = AttentionImpl::kEager;
  const graph::LayerGraph g = build("flux-kontext-dev", options);
  const graph::Tensor* scores = g.find_tensor("transformer_blocks.0.attn.qk");
  REQUIRE(scores != nullptr);
  CHECK(scores->elements == graph::SizeExpr{0, 24 * 512 * 512, 0, 24 * 1024, 0, 24});
}

TEST_CASE("flux with a shorter T5 length (diffusers' max_sequence_length 77): (S+77)^2 scores, 77 text rows") {
  ZooOptions options;
  options.attention = AttentionImpl::kEager;
  options.text_tokens = 77;
  const graph::LayerGraph g = build("flux-kontext-dev", options);
  CHECK(g.find_tensor("transformer_blocks.0.attn.qk")->elements == graph::SizeExpr{0, 24 * 77 * 77, 0, 24 * 154, 0, 24});
  CHECK(g.find_tensor("encoder_hidden_states")->elements == graph::SizeExpr{0, 77 * 4096, 0, 0, 0, 0});
  // The parameters do not depend on the text length.
  CHECK(g.parameter_count() == build("flux-kontext-dev", ZooOptions{}).parameter_count());
}

}  // namespace
}  // namespace headroom::models
