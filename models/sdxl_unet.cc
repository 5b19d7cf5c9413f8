// UNet2DConditionModel.forward (diffusers 0.39.0 models/unets/unet_2d_condition.py)
// as SDXL runs it: Timesteps + TimestepEmbedding, the "text_time" add embedding
// (add_time_proj over the six time ids, cat with the pooled text embedding,
// add_embedding), conv_in, the down blocks (DownBlock2D / CrossAttnDownBlock2D,
// models/unets/unet_2d_blocks.py), UNetMidBlock2DCrossAttn, the up blocks
// (CrossAttnUpBlock2D / UpBlock2D, each resnet reading torch.cat of the running
// map and a skip), conv_norm_out, SiLU, conv_out; then the epsilon MSE of
// examples/text_to_image/train_text_to_image_lora_sdxl.py.
#include "models/sdxl_unet.h"

#include <algorithm>
#include <string>
#include <vector>

#include "models/layers.h"
#include "models/mmdit_parts.h"
#include "models/sdxl_encoders.h"
#include "models/unet_parts.h"

namespace headroom::models {
namespace {

std::string at(const char* kind, int64_t i, const char* part, int64_t j) {
  return std::string(kind) + "." + std::to_string(i) + "." + part + "." + std::to_string(j);
}

// get_time_embed + time_embedding, get_aug_embed ("text_time") + add_embedding,
// emb = emb + aug_emb. Timesteps return fp32 and the model casts them to the
// sample's dtype; the cat of the 16-bit text_embeds and the fp32 time
// projection is cast back by `.to(emb.dtype)`. All of it is [B, width].
std::string time_embeddings(GraphBuilder& b, const UnetConfig& f, int64_t temb_dim, std::string text) {
  const SizeExpr rows = SizeExpr::per_sample(1);
  const int64_t time_channels = f.channels.front();
  const std::string timestep = b.input("timestep", rows, DType::kInt64, false);
  const std::string t = b.copy("time_proj", "sinusoidal", {timestep}, times(rows, time_channels));
  const std::string emb = mmdit_embed_mlp(b, temb_dim, "time_embedding", t, time_channels, "act");
  const int64_t text_dim = f.addition_input_dim - kSdxlTimeIds * f.addition_time_dim;
  if (text.empty()) text = b.input("text_embeds", times(rows, text_dim), std::nullopt, false);
  const std::string ids = b.input("time_ids", times(rows, kSdxlTimeIds), std::nullopt, false);
  const std::string ids_proj =
      b.copy("add_time_proj", "sinusoidal", {ids}, times(rows, kSdxlTimeIds * f.addition_time_dim));
  const std::string cat = b.copy("add_embeds", "concat", {text, ids_proj}, times(rows, f.addition_input_dim));
  const std::string aug = mmdit_embed_mlp(b, temb_dim, "add_embedding", cat, f.addition_input_dim, "act");
  return b.add("emb", emb, aug, times(rows, temb_dim));
}

struct Walk {
  UnetContext& c;
  const UnetConfig& f;
  std::vector<std::string> skips;  // down_block_res_samples, in order
};

// The down blocks: each resnet (and transformer) output is a skip, and so is each
// downsampler's.
std::string down_blocks(Walk& w, std::string x) {
  int64_t in = w.f.channels.front();
  for (int64_t l = 0; l < w.c.levels; ++l) {
    const int64_t out = w.f.channels[l];
    for (int64_t j = 0; j < w.f.layers_per_block; ++j) {
      x = unet_resnet(w.c, at("down_blocks", l, "resnets", j), x, l, j == 0 ? in : out, out);
      if (w.f.cross_attention_down[l]) {
        x = unet_transformer(w.c, at("down_blocks", l, "attentions", j), x, l, out, w.f.heads[l],
                             w.f.transformer_layers[l]);
      }
      w.skips.push_back(x);
    }
    if (l + 1 < w.c.levels) {
      x = unet_downsample(w.c, at("down_blocks", l, "downsamplers", 0), x, l, out);
      w.skips.push_back(x);
    }
    in = out;
  }
  return x;
}

// UNetMidBlock2DCrossAttn: resnet, transformer, resnet at the deepest level.
std::string mid_block(Walk& w, std::string x) {
  const int64_t level = w.c.levels - 1;
  const int64_t width = w.f.channels.back();
  x = unet_resnet(w.c, "mid_block.resnets.0", x, level, width, width);
  x = unet_transformer(w.c, "mid_block.attentions.0", x, level, width, w.f.heads.back(),
                       w.f.transformer_layers.back());
  return unet_resnet(w.c, "mid_block.resnets.1", x, level, width, width);
}

// The up blocks, deepest first: layers_per_block + 1 resnets, each on
// torch.cat([x, skip], dim=1) (the last skip first). UNet2DConditionModel.forward
// passes the block its skips as `res_samples`, a tuple it holds until the block
// returns.
std::string up_blocks(Walk& w, std::string x) {
  const int64_t levels = w.c.levels;
  const int64_t n = w.f.layers_per_block + 1;
  int64_t prev = w.f.channels.back();
  for (int64_t i = 0; i < levels; ++i) {
    const int64_t level = levels - 1 - i;
    const int64_t out = w.f.channels[level];
    const int64_t in = w.f.channels[std::max<int64_t>(level - 1, 0)];
    const std::vector<std::string> held(w.skips.end() - n, w.skips.end());
    w.skips.resize(w.skips.size() - n);
    for (int64_t j = 0; j < n; ++j) {
      const std::string& skip = held[n - 1 - j];
      const int64_t width = (j == 0 ? prev : out) + (j == n - 1 ? in : out);
      // The cat runs in the up block's forward, outside the (checkpointable) resnet.
      w.c.b.begin_block(at("up_blocks", i, "cat", j), "unet_skip", false);
      const std::string cat = w.c.b.copy(at("up_blocks", i, "cat", j), "concat", {x, skip}, unet_map(w.c, level, width));
      x = unet_resnet(w.c, at("up_blocks", i, "resnets", j), cat, level, width, out);
      if (w.f.cross_attention_up[i]) {
        x = unet_transformer(w.c, at("up_blocks", i, "attentions", j), x, level, out, w.f.heads[level],
                             w.f.transformer_layers[level]);
      }
    }
    if (i + 1 < levels) x = unet_upsample(w.c, at("up_blocks", i, "upsamplers", 0), x, level, out);
    for (const std::string& skip : held) w.c.b.hold_until(x, skip);
    prev = out;
  }
  return x;
}

}  // namespace

UnetConfig sdxl_base_unet_config() {
  UnetConfig f;
  f.channels = {320, 640, 1280};
  f.cross_attention_down = {false, true, true};
  f.cross_attention_up = {true, true, false};
  f.transformer_layers = {1, 2, 10};
  f.heads = {5, 10, 20};
  return f;
}

std::vector<std::string> sdxl_lora_targets() { return {"to_k", "to_q", "to_v", "to_out.0"}; }

graph::LayerGraph build_unet(const UnetConfig& f, const ZooOptions& options) {
  GraphBuilder b;
  // train_text_to_image_lora_sdxl.py casts the frozen UNet to the weight dtype.
  b.set_param_dtype(DType::kBF16);
  const int64_t c0 = f.channels.front();
  UnetContext c{b, options, static_cast<int64_t>(f.channels.size()), f.groups, f.cross_dim, f.text_tokens,
                4 * c0, "", ""};
  // The script's resident VAE and text encoders, run on each batch first
  // (models/sdxl_encoders.h); otherwise their outputs are inputs.
  SdxlEncoded encoded;
  if (!options.precomputed_text_embeddings) encoded = add_sdxl_encoders(b, unet_rows(c, 0));
  b.begin_block("embeddings", "unet_embedding", false);
  c.context = encoded.prompt_embeds.empty()
                  ? b.input("encoder_hidden_states", times(fixed_tokens(f.text_tokens), f.cross_dim), std::nullopt, false)
                  : encoded.prompt_embeds;
  c.temb = time_embeddings(b, f, c.temb_dim, encoded.text_embeds);
  const std::string sample = b.input("sample", unet_map(c, 0, f.in_channels), std::nullopt, false);
  const std::string x = unet_conv(c, "conv_in", sample, 0, f.in_channels, c0, 3);
  Walk w{c, f, {x}};
  std::string h = down_blocks(w, x);
  h = mid_block(w, h);
  h = up_blocks(w, h);
  b.begin_block("head", "unet_output", false);
  h = unet_group_norm(c, "conv_norm_out", h, 0, c0);
  h = b.activation("conv_act", h, unet_map(c, 0, c0), "silu");
  const std::string out = unet_conv(c, "conv_out", h, 0, c0, f.out_channels, 3);
  // F.mse_loss(model_pred.float(), target.float()): the noise, epsilon prediction.
  mmdit_flow_matching_loss(b, out, unet_map(c, 0, f.out_channels));
  return b.finish();
}

}  // namespace headroom::models
