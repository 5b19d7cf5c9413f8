// T5 / Flan-T5: parameter counts from the published config.json files (tied as
// transformers 5.x ties lm_head, and untied as 4.x reads Flan-T5's), the encoder,
// decoder and cross-attention shapes, the two lengths, and the relative position
// bias made once per stack (models/t5.h; modeling_t5.py 5.23.0).
#include "models/t5.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "models/hf_import.h"
#include "hf_test_model.h"
#include "saved_bytes.h"

namespace headroom::models {
namespace {

using testing::load_test_model;

ZooOptions as_4x() {
  ZooOptions options;
  options.t5_tie_as_configured = true;
  return options;
}

ZooOptions at_target(int64_t target) {
  ZooOptions options;
  options.target_tokens = target;
  return options;
}

}  // namespace

TEST_CASE("Flan-T5 and T5 config.json give the published parameter counts") {
  // T5ForConditionalGeneration's unique parameters on meta under transformers 4.44.2
  // (lm_head untied where tie_word_embeddings is false): the Hub's 247.6M, 783M, 2.85B, 11.1B.
  CHECK(load_test_model("flan-t5-base", as_4x()).parameter_count() == 247'577'856);
  CHECK(load_test_model("flan-t5-large", as_4x()).parameter_count() == 783'150'080);
  CHECK(load_test_model("flan-t5-xl", as_4x()).parameter_count() == 2'849'757'184);
  CHECK(load_test_model("flan-t5-xxl", as_4x()).parameter_count() == 11'135'332'352);
  CHECK(load_test_model("t5-base", as_4x()).parameter_count() == 222'903'552);
  // transformers 5.23.0: T5Config forces tie_word_embeddings, lm_head is shared.weight.
  CHECK(load_test_model("flan-t5-base").parameter_count() == 222'903'552);
  CHECK(load_test_model("flan-t5-xl").parameter_count() == 2'783'959'040);
  CHECK(load_test_model("flan-t5-xl-2l").parameter_count() == 292'317'184);
  Result<graph::LayerGraph> zoo = build_zoo_model("flan-t5-xl", as_4x());
  REQUIRE(zoo.is_ok());
  CHECK(zoo->parameter_count() == 2'849'757'184);
  CHECK(zoo->family == "t5");
}

TEST_CASE("T5 has an encoder, a decoder with cross-attention to the encoder's output, and q, v as LoRA targets") {
  const graph::LayerGraph g = load_test_model("flan-t5-base");
  CHECK(g.lora_targets == std::vector<std::string>{"q", "v"});
  CHECK(testing::block_index(g, "encoder.block.11") >= 0);
  CHECK(testing::block_index(g, "decoder.block.11") >= 0);
  CHECK(testing::block_index(g, "encoder.block.12") < 0);
  // Cross-attention: q over the decoder's B*T rows, k and v over the encoder's B*S.
  const graph::Node* q = g.find_node("decoder.block.3.layer.1.EncDecAttention.q");
  const graph::Node* k = g.find_node("decoder.block.3.layer.1.EncDecAttention.k");
  REQUIRE(q != nullptr);
  REQUIRE(k != nullptr);
  CHECK(q->linear->rows == graph::SizeExpr::per_sample(kT5DefaultTargetTokens));
  CHECK(k->linear->rows == graph::SizeExpr::per_token(1));
  CHECK(k->inputs[0] == "encoder.dropout");
  CHECK(g.find_node("encoder.block.0.layer.1.DenseReluDense.wi_1") != nullptr);  // gated-gelu
  CHECK(g.find_node("encoder.block.0.layer.2") == nullptr);                      // no cross-attention
  const graph::LayerGraph relu = load_test_model("t5-base");
  CHECK(relu.find_node("encoder.block.0.layer.1.DenseReluDense.wi") != nullptr);
  CHECK(relu.find_node("scale_decoder_outputs") != nullptr);  // tied: d_model^-0.5 before lm_head
  CHECK(g.find_node("scale_decoder_outputs") == nullptr);
}

TEST_CASE("T5's relative position bias is made by each stack's first layer only") {
  const graph::LayerGraph g = load_test_model("flan-t5-base");
  int tables = 0;
  for (const graph::Node& node : g.nodes) {
    if (node.name.ends_with("relative_attention_bias")) ++tables;
  }
  CHECK(tables == 2);
  CHECK(g.find_node("encoder.block.0.layer.0.SelfAttention.relative_attention_bias") != nullptr);
  CHECK(g.find_node("decoder.block.0.layer.0.SelfAttention.relative_attention_bias") != nullptr);
  // The cross-attention's zero bias is made once and kept by every cross-attention.
  int keepers = 0;
  for (const graph::Node& node : g.nodes) {
    for (const graph::SavedRef& saved : node.saves) {
      if (saved.tensor == "decoder.block.0.layer.1.EncDecAttention.zero_bias") ++keepers;
    }
  }
  CHECK(keepers == 12);
}

// The three differences the exporter's cross-check on CPU found (docs/exporter.md):
// each is held here at flan-t5-xl-2l's size.
TEST_CASE("T5 keeps its bucket indices in each stack's first layer, one attention output under SDPA and the causal condition") {
  ZooOptions eager = at_target(128);
  eager.attention = AttentionImpl::kEager;
  for (const graph::LayerGraph& g : {load_test_model("flan-t5-xl-2l", at_target(128)),
                                     load_test_model("flan-t5-xl-2l", eager)}) {
    // The embedding keeps the int64 [S, S] bucket indices, made in block 0's forward.
    const int first = testing::block_index(g, "encoder.block.0");
    const int second = testing::block_index(g, "encoder.block.1");
    CHECK(testing::saved_bytes(g, first, 2, 512) - testing::saved_bytes(g, second, 2, 512) == 512 * 512 * 8);
    const graph::Node* bucket = g.find_node("encoder.block.0.layer.0.SelfAttention.relative_position_bucket");
    REQUIRE(bucket != nullptr);
    CHECK(bucket->block == first);
  }
  const graph::LayerGraph sdpa = load_test_model("flan-t5-xl-2l", at_target(128));
  const graph::LayerGraph math = load_test_model("flan-t5-xl-2l", eager);
  // o reads the fused kernel's [B, S, H, D] output as it is; eager's output is copied.
  CHECK(sdpa.find_node("encoder.block.1.layer.0.SelfAttention.merge_heads") == nullptr);
  CHECK(math.find_node("encoder.block.1.layer.0.SelfAttention.merge_heads") != nullptr);
  // Under SDPA the decoder's where(causal, bias, min) keeps its bool [T, T] condition.
  const graph::Node* where = sdpa.find_node("decoder.block.1.layer.0.SelfAttention.bias_mask");
  REQUIRE(where != nullptr);
  REQUIRE(where->saves.size() == 1);
  const graph::Tensor* condition = sdpa.find_tensor(where->saves[0].tensor);
  REQUIRE(condition != nullptr);
  CHECK(condition->dtype == graph::DType::kBool);
  CHECK(condition->elements.at(2, 512) == 128 * 128);
  CHECK(math.find_node("decoder.block.1.layer.0.SelfAttention.causal_mask") == nullptr);
}

TEST_CASE("the target length moves the decoder's activations and not the encoder's") {
  const graph::LayerGraph short_target = load_test_model("flan-t5-xl-2l", at_target(128));
  const graph::LayerGraph long_target = load_test_model("flan-t5-xl-2l", at_target(512));
  for (const std::string block : {"encoder.block.0", "encoder.block.1"}) {
    CHECK(testing::saved_bytes(short_target, testing::block_index(short_target, block), 2, 512) ==
          testing::saved_bytes(long_target, testing::block_index(long_target, block), 2, 512));
  }
  const int dec = testing::block_index(short_target, "decoder.block.1");
  CHECK(testing::saved_bytes(long_target, dec, 2, 512) > 3 * testing::saved_bytes(short_target, dec, 2, 512));
  // --seq moves the decoder only through cross-attention's k and v over the encoder's output.
  CHECK(testing::saved_bytes(short_target, dec, 2, 1024) > testing::saved_bytes(short_target, dec, 2, 512));
}

TEST_CASE("T5's loss keeps its log-probabilities, not the logits, and model_output holds what the forward returns") {
  const graph::LayerGraph g = load_test_model("flan-t5-xl-2l", at_target(128));
  // _log_softmax's backward reads its result (derivatives.yaml, torch 2.11): the logits
  // are not saved, and live only as long as the returned Seq2SeqLMOutput holds them.
  const graph::Node* log_softmax = g.find_node("loss.log_softmax");
  REQUIRE(log_softmax != nullptr);
  REQUIRE(log_softmax->saves.size() == 1);
  CHECK(log_softmax->saves[0].tensor == "loss.log_softmax");
  const graph::Node* output = g.find_node("model_output");
  REQUIRE(output != nullptr);
  CHECK(output->op == "model_output");
  CHECK(output->inputs.empty());
  CHECK(output->outputs.empty());
  CHECK(output->block == testing::block_index(g, "head"));
  // loss, logits (lm_head's output) and encoder_last_hidden_state (the encoder's final dropout).
  CHECK(output->holds == std::vector<std::string>{"loss", "lm_head", "encoder.dropout"});
}

}  // namespace headroom::models
