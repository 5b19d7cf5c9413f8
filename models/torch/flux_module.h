// LibTorch modules for the Flux-style MMDiT the zoo describes (models/flux.h),
// as diffusers' FluxTransformer2DModel runs it: double-stream blocks (separate
// image and text weights, joint attention), single-stream blocks over the
// concatenated text+image tokens, AdaLN-Zero modulation by the
// timestep/guidance/pooled-text embedding, GELU(tanh) MLPs, and a
// flow-matching MSE loss. Built from the same FluxConfig as the planner's
// graph and named as its nodes ("transformer_blocks.0.attn.to_q"); blocks run
// through a BlockRunner under the graph's block names. Only built with LibTorch.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "models/flux.h"
#include "models/torch/layers.h"

namespace headroom::models::torch_modules {

// One training batch: noised latents and the flow-matching target.
struct FluxBatch {
  torch::Tensor hidden_states;          // [B, S, in_channels] x_t = (1 - t) x0 + t noise
  torch::Tensor encoder_hidden_states;  // [B, T, joint_dim] precomputed T5 output
  torch::Tensor pooled_projections;     // [B, pooled_dim] precomputed CLIP pooled output
  torch::Tensor timestep;               // [B] t in [0, 1]
  torch::Tensor guidance;               // [B]
  torch::Tensor target;                 // [B, S, in_channels] noise - x0
};

// A random batch of `image_tokens` latent tokens per sample (default dtype).
FluxBatch synthetic_flux_batch(const FluxConfig& config, int64_t batch, int64_t image_tokens);

// RoPE tables [tokens, head_dim] (cos, sin), f32 on `device`, interleaved pairs (Flux's layout).
std::pair<torch::Tensor, torch::Tensor> flux_rope_tables(int64_t tokens, int64_t head_dim,
                                                         torch::Device device = torch::kCPU);

// AdaLayerNormZero / AdaLayerNormZeroSingle / AdaLayerNormContinuous: the
// projection linear(silu(temb)) split into `chunks` [B, hidden] parts, and the
// LayerNorm without affine (`norm`) the block modulates with them.
class ModulationImpl : public torch::nn::Module {
 public:
  ModulationImpl(int64_t hidden, int64_t chunks);
  std::vector<torch::Tensor> forward(const torch::Tensor& temb);
  Linear linear{nullptr};
  LayerNorm norm{nullptr};
  int64_t chunks;
};
TORCH_MODULE(Modulation);

// FeedForward: net.0.proj (hidden -> mlp), GELU(tanh), net.2 (mlp -> hidden).
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t hidden, int64_t mlp);
  torch::Tensor forward(const torch::Tensor& x);
  Linear proj{nullptr};
  Linear out{nullptr};
};
TORCH_MODULE(FeedForward);

// FluxTransformerBlock: forward({img, txt, temb, cos, sin}) -> {img, txt}.
class DoubleStreamBlockImpl : public torch::nn::Module {
 public:
  explicit DoubleStreamBlockImpl(const FluxConfig& config);
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& inputs);
  FluxConfig config;
  Modulation norm1{nullptr}, norm1_context{nullptr};
  Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, to_out{nullptr};
  Linear add_q_proj{nullptr}, add_k_proj{nullptr}, add_v_proj{nullptr}, to_add_out{nullptr};
  RMSNorm norm_q{nullptr}, norm_k{nullptr}, norm_added_q{nullptr}, norm_added_k{nullptr};
  LayerNorm norm2{nullptr}, norm2_context{nullptr};
  FeedForward ff{nullptr}, ff_context{nullptr};
};
TORCH_MODULE(DoubleStreamBlock);

// FluxSingleTransformerBlock over [txt; img]: forward as the double block.
class SingleStreamBlockImpl : public torch::nn::Module {
 public:
  explicit SingleStreamBlockImpl(const FluxConfig& config);
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& inputs);
  FluxConfig config;
  Modulation norm{nullptr};
  Linear proj_mlp{nullptr}, proj_out{nullptr};
  Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  RMSNorm norm_q{nullptr}, norm_k{nullptr};
};
TORCH_MODULE(SingleStreamBlock);

// The zoo's LoRA targets for Flux (models/zoo.cc).
LoraOptions flux_lora(int64_t rank, double alpha = 16);

class FluxTransformerImpl : public torch::nn::Module {
 public:
  explicit FluxTransformerImpl(const FluxConfig& config, const LoraOptions& lora = {});
  // Flow-matching MSE of the predicted velocity against batch.target. Blocks
  // run through `runner` ("transformer_blocks.<i>", "single_transformer_blocks.<i>").
  torch::Tensor forward(const FluxBatch& batch, const BlockRunner& runner = {});
  // The embeddings (temb, img, txt) and RoPE tables the blocks take.
  std::vector<torch::Tensor> embed(const FluxBatch& batch);
  FluxConfig config;
  Linear x_embedder{nullptr}, context_embedder{nullptr};
  Linear time_1{nullptr}, time_2{nullptr}, guidance_1{nullptr}, guidance_2{nullptr};
  Linear text_1{nullptr}, text_2{nullptr};
  std::vector<DoubleStreamBlock> transformer_blocks;
  std::vector<SingleStreamBlock> single_transformer_blocks;
  Modulation norm_out{nullptr};
  Linear proj_out{nullptr};
};
TORCH_MODULE(FluxTransformer);

}  // namespace headroom::models::torch_modules
