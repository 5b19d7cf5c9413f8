// SDXL's resident VAE and text encoders (models/sdxl_encoders.cc): their parameter
// counts against the meta-built modules, the VAE encode's no-grad peak, the block the
// UNet reads them from, and the refusal of UNets whose widths they do not give.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "models/flux_text.h"
#include "models/hf_import.h"
#include "models/sdxl_encoders.h"
#include "tests/models/hf_test_model.h"

namespace headroom::models {
namespace {

using graph::SizeExpr;
using testing::load_test_model;

ZooOptions resident() {
  ZooOptions options;
  options.precomputed_text_embeddings = false;
  return options;
}

int64_t bytes_of(const std::vector<Param>& params) {
  int64_t total = 0;
  for (const Param& p : params) total += graph::dtype_bytes(p.dtype, p.elements());
  return total;
}

// sum(p.numel() for p in m.parameters()) on the meta device, diffusers 0.39.0 and
// transformers 5.23.0 (env df), of AutoencoderKL.from_config, CLIPTextModel._from_config
// and CLIPTextModelWithProjection._from_config of tests/data/hf/sdxl-encoders (SDXL
// base's vae/, text_encoder/ and text_encoder_2/ config.json): 83,653,863 (encoder
// 34,163,592, quant_conv 72, decoder 49,490,179, post_quant_conv 20), 123,060,480 and
// 694,659,840.
TEST_CASE("sdxl vae and text encoder parameter counts match diffusers' and transformers' modules") {
  GraphBuilder b;
  const std::vector<Param> vae = frozen_vae_params(b, sdxl_vae_config());
  CHECK(param_elements(vae) == 83653863);
  // main() moves the VAE in fp32 (no --pretrained_vae_model_name_or_path): 4 bytes each.
  CHECK(bytes_of(vae) == 4 * 83653863);
  for (const Param& p : vae) CHECK_FALSE(p.trainable);
  CHECK(param_elements(frozen_clip_text_params(b, "text_encoder", kClipL)) == 123060480);
  CHECK(param_elements(frozen_clip_text_params(b, "text_encoder_2", kClipBigG)) == 694659840);
}

// Encoder.forward at level 0 (the pixels, 64 per latent position), in the second
// ResnetBlock2D of down_blocks.0: Encoder.forward's `sample` (conv_in's output, the
// block's input) beside the resnet's input, its hidden map, the residual sum and the
// quotient of `/ output_scale_factor`: five maps of 128 channels, 5 x 128 x 64 per
// latent position. The oracle's encode of a 64 px image on meta (stacks/diffusers_sdxl.py
// _encode, recorded): 10,485,760 bytes above the weights and the pixels, at the div of
// that resnet. At 1024 px (16,384 latent positions), batch 1, in fp32: 2.5 GiB.
TEST_CASE("sdxl vae encode peaks at five 128-channel pixel maps, 2.5 GiB at 1024 px in fp32") {
  CHECK(vae_encode_peak_per_latent_position(sdxl_vae_config()) == 5 * 128 * 64);
  CHECK(4 * vae_encode_peak_per_latent_position(sdxl_vae_config()) * 8 * 8 == 10485760);
  CHECK(4 * vae_encode_peak_per_latent_position(sdxl_vae_config()) * 128 * 128 == 5LL << 29);
}

TEST_CASE("sdxl unet with resident encoders reads their outputs and holds their weights") {
  const graph::LayerGraph alone = load_test_model("sdxl-unet-small");
  const graph::LayerGraph g = load_test_model("sdxl-unet-small", resident());
  CHECK(g.parameter_count() == alone.parameter_count() + 83653863 + 123060480 + 694659840);
  CHECK(g.blocks.front().name == "encoders");
  CHECK_FALSE(g.blocks.front().checkpointable);
  CHECK(g.find_tensor("encoder_hidden_states") == nullptr);
  CHECK(g.find_tensor("prompt_embeds")->elements == SizeExpr::per_sample(77 * 2048));
  // S = (res / 32)^2: the pixels are 1024 S per sample, the latents 16 S.
  CHECK(g.find_tensor("pixel_values")->elements == SizeExpr::per_token(3 * 1024));
  CHECK(g.find_tensor("pixel_values")->dtype == graph::DType::kF32);
  const graph::Node* vae = g.find_node("vae");
  REQUIRE(vae != nullptr);
  // fp32 maps counted in the 16-bit compute dtype: twice the elements.
  CHECK(vae->workspace_elements == SizeExpr::per_token(16 * 2 * 5 * 128 * 64));
  CHECK(g.find_node("add_embeds")->inputs.front() == "text_encoder_2.text_embeds");
}

TEST_CASE("sdxl resident encoders refuse a unet whose text widths they do not give") {
  nlohmann::json c;
  std::ifstream(testing::hf_data_dir() + "tiny-sdxl-unet/config.json") >> c;
  Result<graph::LayerGraph> g = graph_from_hf_config(c, "unet/config.json", resident());
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.message().find("cross_attention_dim") != std::string::npos);
}

}  // namespace
}  // namespace headroom::models
