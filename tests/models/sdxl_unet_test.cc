// UNet2DConditionModel read from config.json (models/hf_unet.cc) and built
// (models/sdxl_unet.cc, models/unet_parts.cc): SDXL's parameter count, the
// feature-map sizes, what GroupNorm and the up blocks keep, and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/graph_analysis.h"
#include "models/hf_import.h"
#include "models/zoo.h"
#include "tests/models/hf_test_model.h"

namespace headroom::models {
namespace {

using graph::SizeExpr;
using testing::load_test_model;

std::string refuse(const nlohmann::json& config) {
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "unet/config.json", ZooOptions{});
  REQUIRE_FALSE(g.is_ok());
  return g.message();
}

nlohmann::json tiny_unet() {
  nlohmann::json c;
  std::ifstream(testing::hf_data_dir() + "tiny-sdxl-unet/config.json") >> c;
  return c;
}

bool holds(const graph::Node& node, const std::string& tensor) {
  return std::find(node.holds.begin(), node.holds.end(), tensor) != node.holds.end();
}

// sum(p.numel() for p in UNet2DConditionModel.from_config(config).parameters()) on
// the meta device, diffusers 0.39.0 (env df); SDXL base's is the published 2,567,463,684.
TEST_CASE("sdxl unet parameter counts match diffusers' UNet2DConditionModel") {
  CHECK(load_test_model("sdxl-unet").parameter_count() == 2567463684);
  CHECK(load_test_model("sdxl-unet-small").parameter_count() == 899183364);
  CHECK(load_test_model("tiny-sdxl-unet").parameter_count() == 1343332);
  Result<graph::LayerGraph> zoo = build_zoo_model("sdxl-unet", ZooOptions{});
  REQUIRE(zoo.is_ok());
  CHECK(zoo->parameter_count() == 2567463684);
  CHECK(zoo->lora_targets == std::vector<std::string>{"to_k", "to_q", "to_v", "to_out.0"});
}

TEST_CASE("sdxl unet feature maps are multiples of the deepest, S = (resolution / 32)^2") {
  const graph::LayerGraph g = load_test_model("sdxl-unet");
  CHECK(g.sequence.patch_px == 32);
  CHECK(g.sequence.default_seq == 1024);
  // conv_in: 320 channels at 16 S; the first up block's first cat: 1280 + 1280 at S.
  CHECK(g.find_tensor("conv_in")->elements == SizeExpr::per_token(320 * 16));
  CHECK(g.find_tensor("up_blocks.0.cat.0")->elements == SizeExpr::per_token(2560));
  // The last cat of the last up block reads conv_in's output: 320 + 320 at 16 S.
  CHECK(g.find_node("up_blocks.2.cat.2")->inputs.back() == "conv_in");
  // attn2 of the mid block: keys from the 77 x 2048 text, scores B * S * 77 per head.
  CHECK(g.find_node("mid_block.attentions.0.transformer_blocks.9.attn2.to_k")->inputs.front() ==
        "encoder_hidden_states");
  const int64_t blocks = std::count_if(g.blocks.begin(), g.blocks.end(),
                                       [](const graph::Block& b) { return b.kind == "unet_transformer"; });
  CHECK(blocks == 70);
}

// native_group_norm keeps its input and one fp32 mean and rstd per (sample, group).
TEST_CASE("sdxl unet group norm keeps fp32 statistics per sample and group") {
  const graph::LayerGraph g = load_test_model("sdxl-unet");
  const graph::Tensor* rstd = g.find_tensor("down_blocks.0.resnets.0.norm1:rstd");
  REQUIRE(rstd != nullptr);
  CHECK(rstd->elements == SizeExpr::per_sample(32));
  CHECK(rstd->dtype == graph::DType::kF32);
  CHECK(g.find_tensor("down_blocks.0.resnets.0.norm1:mean")->elements == SizeExpr::per_sample(32));
}

// UNet2DConditionModel.forward hands each up block its skips as one tuple it
// holds until the block returns; BasicTransformerBlock's `norm_hidden_states`
// lives until the next norm rebinds it.
TEST_CASE("sdxl unet holds the skips to the end of their up block") {
  const graph::LayerGraph g = load_test_model("sdxl-unet");
  const graph::Node* upsampler = g.find_node("up_blocks.0.upsamplers.0.conv");
  REQUIRE(upsampler != nullptr);
  CHECK(holds(*upsampler, "down_blocks.2.attentions.1.residual"));
  CHECK(holds(*upsampler, "down_blocks.1.downsamplers.0.conv"));
  const std::string p = "down_blocks.1.attentions.0.transformer_blocks.0";
  CHECK(holds(*g.find_node(p + ".norm2"), p + ".norm1"));
  CHECK(holds(*g.find_node(p + ".ff_residual"), p + ".norm3"));
}

// A skip is read by the cat of its up block, a Transformer2DModel's input by its residual
// add after the transformer blocks: far from their own block, by plain (not checkpointed)
// blocks. They are not persistent (graph/graph_analysis.cc mark_lifetimes): kept by a save
// where one keeps them, else live over that span of the forward (the grid's LoRA rows); the
// time embedding, which every (checkpointable) resnet reads, stays persistent.
TEST_CASE("sdxl unet skips and transformer inputs live over a span of the forward, not the whole step") {
  const graph::LayerGraph g = load_test_model("sdxl-unet");
  const graph::GraphAnalysis a = graph::analyze_graph(g);
  const auto index = [&](const std::string& name) { return graph::tensor_index(g, name); };
  for (const std::string name : {"conv_in", "down_blocks.0.resnets.0.rescale", "down_blocks.1.resnets.0.rescale"}) {
    const int t = index(name);
    REQUIRE_MESSAGE(t >= 0, name);
    // Trained in full, the next group norm saves each: kept by that save, not for the whole step.
    CHECK_FALSE_MESSAGE(a.persistent[t], name);
  }
  CHECK(a.persistent[index("emb")]);
}

TEST_CASE("sdxl unet configs with keys or values headroom does not model are refused by name") {
  Result<graph::LayerGraph> tiny = graph_from_hf_config(tiny_unet(), "unet/config.json", ZooOptions{});
  REQUIRE_MESSAGE(tiny.is_ok(), tiny.message());
  CHECK(tiny->family == "sdxl");
  const std::vector<std::pair<std::string, nlohmann::json>> refused = {
      {"use_linear_projection", false},
      {"addition_embed_type", nullptr},
      {"mid_block_type", "UNetMidBlock2D"},
      {"down_block_types", {"DownBlock2D", "AttnDownBlock2D"}},
      {"num_attention_heads", 2},
      {"dropout", 0.1},
      {"resnet_time_scale_shift", "scale_shift"},
      {"transformer_layers_per_block", {1, 2, 3}},
      {"norm_num_groups", 7},
      {"enable_something_new", true},
  };
  for (const auto& [key, value] : refused) {
    nlohmann::json config = tiny_unet();
    config[key] = value;
    CHECK_MESSAGE(refuse(config).find(key) != std::string::npos, key);
  }
}

}  // namespace
}  // namespace headroom::models
