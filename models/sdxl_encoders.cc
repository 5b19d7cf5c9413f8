// SDXL's resident VAE and text encoders (models/sdxl_encoders.h). Sources, diffusers
// 0.39.0: examples/text_to_image/train_text_to_image_lora_sdxl.py (main: the modules
// loaded, frozen and moved; the loop: vae.encode, encode_prompt), models/autoencoders/
// autoencoder_kl.py (AutoencoderKL: encoder, quant_conv, decoder, post_quant_conv),
// models/autoencoders/vae.py (Encoder, Decoder, DiagonalGaussianDistribution),
// models/unets/unet_2d_blocks.py (DownEncoderBlock2D, UpDecoderBlock2D, UNetMidBlock2D),
// models/resnet.py (ResnetBlock2D with temb_channels None), models/downsampling.py
// (Downsample2D: pad (0, 1, 0, 1), 3x3 stride-2 conv), models/attention_processor.py
// (Attention with group norm, one head of the full width, biased projections).
#include "models/sdxl_encoders.h"

#include <algorithm>
#include <string>
#include <vector>

#include "models/flux_text.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

constexpr int64_t kTextTokens = 77;  // both tokenizers pad to model_max_length 77
// vae.py Encoder: conv_out writes 2 x latent_channels (double_z: mean and logvar).
constexpr int64_t kMomentsPerLatent = 2;

struct VaeParams {
  const GraphBuilder& b;
  std::vector<Param> out;
  // fp32 whatever the run's precision: main() moves the VAE with dtype=torch.float32.
  void add(const std::string& name, std::vector<int64_t> shape) {
    Param p = frozen_param(b, name, std::move(shape));
    p.dtype = DType::kF32;
    p.upcast_fp32 = true;
    out.push_back(std::move(p));
  }
  void conv(const std::string& m, int64_t in, int64_t out_ch, int64_t k) {
    add(m + ".weight", {out_ch, in, k, k});
    add(m + ".bias", {out_ch});
  }
  void group_norm(const std::string& m, int64_t c) {
    add(m + ".weight", {c});
    add(m + ".bias", {c});
  }
  void linear(const std::string& m, int64_t c) {
    add(m + ".weight", {c, c});
    add(m + ".bias", {c});
  }
  // ResnetBlock2D(temb_channels=None): no time_emb_proj.
  void resnet(const std::string& m, int64_t in, int64_t out_ch) {
    group_norm(m + ".norm1", in);
    conv(m + ".conv1", in, out_ch, 3);
    group_norm(m + ".norm2", out_ch);
    conv(m + ".conv2", out_ch, out_ch, 3);
    if (in != out_ch) conv(m + ".conv_shortcut", in, out_ch, 1);
  }
  // UNetMidBlock2D: resnet, Attention(group_norm, to_q/k/v/out.0 with bias), resnet.
  void mid_block(const std::string& m, int64_t c) {
    resnet(m + ".resnets.0", c, c);
    const std::string a = m + ".attentions.0";
    group_norm(a + ".group_norm", c);
    for (const char* p : {".to_q", ".to_k", ".to_v", ".to_out.0"}) linear(a + p, c);
    resnet(m + ".resnets.1", c, c);
  }
};

void encoder_params(VaeParams& p, const VaeConfig& c) {
  p.conv("vae.encoder.conv_in", c.in_channels, c.channels.front(), 3);
  int64_t in = c.channels.front();
  const auto levels = static_cast<int64_t>(c.channels.size());
  for (int64_t l = 0; l < levels; ++l) {
    const int64_t out = c.channels[l];
    const std::string block = "vae.encoder.down_blocks." + std::to_string(l);
    for (int64_t j = 0; j < c.layers_per_block; ++j) {
      p.resnet(block + ".resnets." + std::to_string(j), j == 0 ? in : out, out);
    }
    if (l + 1 < levels) p.conv(block + ".downsamplers.0.conv", out, out, 3);
    in = out;
  }
  p.mid_block("vae.encoder.mid_block", c.channels.back());
  p.group_norm("vae.encoder.conv_norm_out", c.channels.back());
  p.conv("vae.encoder.conv_out", c.channels.back(), kMomentsPerLatent * c.latent_channels, 3);
  p.conv("vae.quant_conv", kMomentsPerLatent * c.latent_channels, kMomentsPerLatent * c.latent_channels, 1);
}

// Decoder: conv_in, the mid block, UpDecoderBlock2D levels (widest first, one resnet
// more than the encoder's, an upsampler but on the last), conv_norm_out, conv_out.
void decoder_params(VaeParams& p, const VaeConfig& c) {
  p.conv("vae.post_quant_conv", c.latent_channels, c.latent_channels, 1);
  p.conv("vae.decoder.conv_in", c.latent_channels, c.channels.back(), 3);
  p.mid_block("vae.decoder.mid_block", c.channels.back());
  int64_t in = c.channels.back();
  const auto levels = static_cast<int64_t>(c.channels.size());
  for (int64_t i = 0; i < levels; ++i) {
    const int64_t out = c.channels[levels - 1 - i];
    const std::string block = "vae.decoder.up_blocks." + std::to_string(i);
    for (int64_t j = 0; j <= c.layers_per_block; ++j) {
      p.resnet(block + ".resnets." + std::to_string(j), j == 0 ? in : out, out);
    }
    if (i + 1 < levels) p.conv(block + ".upsamplers.0.conv", out, out, 3);
    in = out;
  }
  p.group_norm("vae.decoder.conv_norm_out", c.channels.front());
  p.conv("vae.decoder.conv_out", c.channels.front(), c.in_channels, 3);
}

// Live elements (per latent position of a sample) while Encoder.forward runs under no
// autograd: every tensor a Python name holds, freed when rebound. `p` is the level's
// positions per latent position; `held` what callers up the stack still hold: a down
// block's input, which Encoder.forward's `sample` keeps until the block returns while
// DownEncoderBlock2D.forward rebinds its own `hidden_states` resnet by resnet.
struct EncodeWalk {
  int64_t peak = 0;
  int64_t flops = 0;
  int64_t held = 0;
  void at(int64_t live) { peak = std::max(peak, held + live); }
  void conv(int64_t positions_out, int64_t in, int64_t out, int64_t k) { flops += 2 * in * out * k * k * positions_out; }
  // ResnetBlock2D.forward: the caller's `x` (input_tensor) held throughout; norm1 ->
  // SiLU -> conv1 -> norm2 -> SiLU -> Dropout (eval: the same tensor) -> conv2, each
  // result bound to `hidden_states` (so an op's input and output are live together);
  // conv_shortcut rebinds input_tensor, the caller still holding x; then
  // (input_tensor + hidden_states) / output_scale_factor: the sum is live beside the
  // quotient, both operands still bound.
  void resnet(int64_t p, int64_t in, int64_t out) {
    const int64_t shortcut = in == out ? 0 : out;
    at(p * 3 * in);                     // x, norm1, SiLU
    at(p * (2 * in + out));             // x, SiLU, conv1
    at(p * (in + 2 * out + shortcut));  // x, two of norm2 -> SiLU -> conv2, conv_shortcut
    at(p * (in + shortcut + 3 * out));  // x, [shortcut], hidden, sum, quotient
    conv(p, in, out, 3);
    conv(p, out, out, 3);
    if (shortcut > 0) conv(p, in, out, 1);
  }
  // UNetMidBlock2D's Attention (AttnProcessor2_0, one head of width c): the residual,
  // the group-norm output (bound as encoder_hidden_states too), q, k, v to the end, the
  // SDPA output, to_out.0, the map-shaped copy, the residual sum and its quotient.
  void attention(int64_t p, int64_t c) {
    at(p * 8 * c);
    flops += 2 * 4 * c * c * p;
  }
};

EncodeWalk walk_encoder(const VaeConfig& c) {
  EncodeWalk w;
  const auto levels = static_cast<int64_t>(c.channels.size());
  int64_t p = 1;
  for (int64_t l = 0; l + 1 < levels; ++l) p *= 4;  // level 0: the pixels
  w.at(p * c.channels.front());                      // conv_in's output
  w.conv(p, c.in_channels, c.channels.front(), 3);
  int64_t in = c.channels.front();
  for (int64_t l = 0; l < levels; ++l) {
    const int64_t out = c.channels[l];
    for (int64_t j = 0; j < c.layers_per_block; ++j) {
      w.held = j == 0 ? 0 : p * in;  // the block's input, once the first resnet has rebound it
      w.resnet(p, j == 0 ? in : out, out);
    }
    if (l + 1 < levels) {
      // Downsample2D: F.pad's copy beside the block's last output, then the strided conv.
      w.at(p * 2 * out + p / 4 * out);
      w.conv(p / 4, out, out, 3);
      p /= 4;
    }
    in = out;
  }
  // UNetMidBlock2D: Encoder.forward's `sample` holds its input to the end.
  const int64_t top = c.channels.back();
  w.held = 0;
  w.resnet(p, top, top);
  w.held = p * top;
  w.attention(p, top);
  w.resnet(p, top, top);
  w.held = 0;
  w.at(p * 3 * top);  // conv_norm_out, conv_act, conv_out's input
  w.conv(p, top, kMomentsPerLatent * c.latent_channels, 3);
  return w;
}

}  // namespace

VaeConfig sdxl_vae_config() { return VaeConfig{{128, 256, 512, 512}, 2, 3, 4}; }

std::vector<Param> frozen_vae_params(const GraphBuilder& b, const VaeConfig& c) {
  VaeParams p{b, {}};
  encoder_params(p, c);
  decoder_params(p, c);
  return std::move(p.out);
}

int64_t vae_encode_peak_per_latent_position(const VaeConfig& c) { return walk_encoder(c).peak; }

int64_t vae_encode_flops_per_latent_position(const VaeConfig& c) { return walk_encoder(c).flops; }

namespace {

// A frozen CLIP text encoder over [B, 77] ids writing `out` elements: its FLOPs
// 2 x parameters x tokens; its workspace the MLP's [B, 77, mlp] beside the
// output_hidden_states tuple (layers + 1 states of [B, 77, hidden]), which
// encode_prompt holds until it takes the penultimate.
std::string clip_encoder(GraphBuilder& b, const std::string& name, const std::string& ids,
                         const ClipTextConfig& c, SizeExpr out) {
  OpSpec op{name, "frozen_encoder", {ids}, std::move(out), std::nullopt, {}, frozen_clip_text_params(b, name, c),
            {}, {}, {}, {}};
  op.fwd_flops = SizeExpr::per_sample(2 * param_elements(op.params) * kTextTokens);
  op.workspace_elements = SizeExpr::per_sample(kTextTokens * (c.mlp + (c.layers + 1) * c.hidden));
  return b.op(op);
}

}  // namespace

SdxlEncoded add_sdxl_encoders(GraphBuilder& b, const SizeExpr& latent_positions) {
  const VaeConfig vae = sdxl_vae_config();
  b.begin_block("encoders", "frozen_text_encoder", false);
  constexpr int64_t kPixelsPerLatent = 64;  // the VAE's factor 8 on each side
  const std::string pixels = b.input("pixel_values", latent_positions.scaled(kPixelsPerLatent * vae.in_channels),
                                     DType::kF32, false);
  // main(): vae.to(dtype=torch.float32) when --pretrained_vae_model_name_or_path is unset.
  OpSpec encode{"vae", "frozen_encoder", {pixels}, latent_positions.scaled(vae.latent_channels), DType::kF32, {},
                frozen_vae_params(b, vae), {}, {}, {}, {}};
  encode.fwd_flops = latent_positions.scaled(vae_encode_flops_per_latent_position(vae));
  // fp32 maps, counted in the run's 16-bit compute dtype (SDXL's builder sets bf16): x 2.
  encode.workspace_elements = latent_positions.scaled(2 * vae_encode_peak_per_latent_position(vae));
  const std::string sample = b.op(encode);
  // `model_input * vae.config.scaling_factor` (fp32), then `.to(weight_dtype)`.
  const std::string scaled = b.copy("vae.scaling_factor", "mul_scalar", {sample}, latent_positions.scaled(vae.latent_channels),
                                    DType::kF32);
  b.copy("model_input", "to_copy", {scaled}, latent_positions.scaled(vae.latent_channels));
  const std::string ids_one = b.input("input_ids_one", SizeExpr::per_sample(kTextTokens), DType::kInt64, false);
  const std::string ids_two = b.input("input_ids_two", SizeExpr::per_sample(kTextTokens), DType::kInt64, false);
  const std::string one = clip_encoder(b, "text_encoder", ids_one, kClipL, SizeExpr::per_sample(kTextTokens * kClipL.hidden));
  const std::string two = clip_encoder(b, "text_encoder_2", ids_two, kClipBigG,
                                       SizeExpr::per_sample(kTextTokens * kClipBigG.hidden + kClipBigG.projection));
  const SizeExpr hidden_two = SizeExpr::per_sample(kTextTokens * kClipBigG.hidden);
  const auto parts = b.split("text_encoder_2.outputs", two,
                             {{"text_encoder_2.hidden_states", hidden_two},
                              {"text_encoder_2.text_embeds", SizeExpr::per_sample(kClipBigG.projection)}});
  const std::string prompt = b.copy("prompt_embeds", "concat", {one, parts[0]},
                                    SizeExpr::per_sample(kTextTokens * (kClipL.hidden + kClipBigG.hidden)));
  return {prompt, parts[1]};
}

}  // namespace headroom::models
