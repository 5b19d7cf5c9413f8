// Qwen2.5-VL: the published parameter counts from the Hub's config.json files, the
// processor's image-token rule, the vision tower's windows, and what a vision block
// keeps (the oracle's count at transformers 5.23.0, bench/oracle).
#include "models/qwen2_5_vl.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "graph/atomic_file.h"
#include "models/hf_import.h"
#include "hf_test_model.h"
#include "saved_bytes.h"

namespace headroom::models {
namespace {

using testing::load_test_model;

const std::string kData = testing::hf_data_dir();


nlohmann::json config_json(const std::string& name) {
  Result<std::string> text = graph::read_file(kData + name + "/config.json", 1 << 20);
  REQUIRE(text.is_ok());
  return nlohmann::json::parse(text.value());
}

}  // namespace

TEST_CASE("Qwen2.5-VL-7B and 3B config.json give the published parameter counts") {
  // safetensors index metadata total_size / 2 (bf16) of Qwen/Qwen2.5-VL-7B-Instruct and -3B-Instruct.
  CHECK(load_test_model("qwen2.5-vl-7b").parameter_count() == 8'292'166'656);
  CHECK(load_test_model("qwen2.5-vl-3b").parameter_count() == 3'754'622'976);  // embeddings tied
  Result<graph::LayerGraph> zoo = build_zoo_model("qwen2.5-vl-7b", {});
  REQUIRE(zoo.is_ok());
  CHECK(zoo->parameter_count() == 8'292'166'656);
  const graph::LayerGraph g = load_test_model("qwen2.5-vl-7b");
  CHECK(g.family == "qwen2_5_vl");
  CHECK(g.find_node("model.visual.blocks.31.attn.qkv") != nullptr);
  CHECK(g.find_node("model.visual.merger.mlp.2") != nullptr);
  CHECK(g.find_node("model.language_model.layers.27.mlp.down_proj") != nullptr);
  CHECK(g.find_node("model.visual.blocks.0.mlp.gate_proj")->params.size() == 2);  // the vision MLP's biases
}

TEST_CASE("the text fields read alike at the top level and under text_config") {
  nlohmann::json flat = config_json("qwen2.5-vl-3b");
  nlohmann::json nested = {{"model_type", "qwen2_5_vl"}, {"vision_config", flat.at("vision_config")},
                           {"tie_word_embeddings", true}, {"text_config", nlohmann::json::object()}};
  for (auto& [key, value] : flat.items()) {
    if (key != "vision_config" && key != "model_type" && key != "architectures") nested["text_config"][key] = value;
  }
  nested["text_config"].erase("tie_word_embeddings");  // 5.x keeps it at the top level
  Result<graph::LayerGraph> a = graph_from_hf_config(flat, "a/config.json", {});
  Result<graph::LayerGraph> b = graph_from_hf_config(nested, "b/config.json", {});
  REQUIRE_MESSAGE(a.is_ok(), a.message());
  REQUIRE_MESSAGE(b.is_ok(), b.message());
  CHECK(a->parameter_count() == b->parameter_count());
  CHECK(b->parameter_count() == 3'754'622'976);
}

TEST_CASE("a Qwen2.5-VL config whose merger does not reach the text width is refused by field") {
  nlohmann::json config = config_json("qwen2.5-vl-7b");
  config["vision_config"]["out_hidden_size"] = 2048;
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "x/config.json", {});
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.message().find("x/config.json: vision_config.out_hidden_size") != std::string::npos);
  config = config_json("qwen2.5-vl-7b");
  config["vision_config"]["fullatt_block_indexes"] = {7, 40};
  g = graph_from_hf_config(config, "x/config.json", {});
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.message().find("vision_config.fullatt_block_indexes") != std::string::npos);
}

TEST_CASE("image tokens follow the processor's smart_resize and the 2x2 merge") {
  // Expected values from transformers 5.23.0's smart_resize (factor 28, min_pixels
  // 3136, max_pixels 12845056) and get_vision_window_index (window_size 112).
  const Qwen25VlVision v;
  struct Case {
    int64_t h, w, rh, rw, tokens, scores;
  };
  for (const Case& c : {Case{448, 448, 448, 448, 256, 65536}, Case{1000, 1000, 1008, 1008, 1296, 331776},
                        Case{500, 700, 504, 700, 450, 105536}, Case{5000, 5000, 3556, 3556, 16129, 4080400},
                        Case{10, 30, 56, 112, 8, 1024}, Case{1080, 1920, 1092, 1932, 2691, 668304}}) {
    CAPTURE(c.h);
    CAPTURE(c.w);
    Qwen25VlConfig config;
    config.image = qwen25vl_image(c.h, c.w, v);
    CHECK(config.image.height == c.rh);
    CHECK(config.image.width == c.rw);
    CHECK(qwen25vl_image_tokens(config) == c.tokens);
    CHECK(qwen25vl_window_scores(v, config.image) == c.scores);
  }
}

TEST_CASE("--resolution sizes the image: S's image share and the tower's rows") {
  ZooOptions options;
  options.image_side = 896;
  const graph::LayerGraph g = load_test_model("qwen2.5-vl-7b", options);
  CHECK(g.sequence.extra_tokens == 1024);  // (896 / 14)^2 / 4
  CHECK(g.sequence.patch_px == 28);
  CHECK(g.find_tensor("pixel_values")->elements.at(2, 2048) == 2 * 4096 * 1176);
  CHECK(load_test_model("qwen2.5-vl-7b").sequence.extra_tokens == 256);  // 448 px by default
}

TEST_CASE("a vision block keeps what transformers 5.23.0 keeps under SDPA") {
  // The oracle's saved tensors of one block at 448 px (1024 patches, bench/oracle row
  // qwen2.5-vl-7b-2l/full/none/448/1): the norms' f32 input, rstd, normalized and
  // weighted outputs; qkv's whole output (v is a view of it); rotated q and k; the
  // kernel's output and f32 logsumexp; the windows' cat; gate, up, silu and the product.
  const graph::LayerGraph g = load_test_model("qwen2.5-vl-7b-2l");
  const int64_t r = 1024, h = 1280, m = 3420, heads = 16, head_dim = 80;
  const int64_t norms = 2 * (r * h * 4 + r * 4 + r * h * 2 + r * h * 2);
  const int64_t attention = r * 3 * h * 2 + 2 * r * h * 2 + r * h * 2 + heads * r * 4 + r * h * 2;
  const int64_t mlp = 4 * r * m * 2;
  const int64_t rope = 2 * r * head_dim * 4;  // cos and sin (shared by the blocks)
  const int block = testing::block_index(g, "model.visual.blocks.0");
  REQUIRE(block >= 0);
  CHECK(testing::saved_bytes(g, block, 1, 2048) == norms + attention + mlp + rope);
}

}  // namespace headroom::models
