// Op sequences the diffusers MMDiT transformers share (FluxTransformer2DModel,
// SD3Transformer2DModel; diffusers 0.39.0 normalization.py AdaLayerNormZero /
// AdaLayerNormContinuous, attention.py FeedForward, embeddings.py
// TimestepEmbedding / PixArtAlphaTextProjection): AdaLN modulation, gated
// residuals, per-stream q/k/v with their q/k norms, the GELU(tanh) feed-forward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/graph_builder.h"
#include "models/zoo.h"

namespace headroom::models {

// How q and k are normalized per head after their projections.
enum class QkNorm {
  kNone,    // SD3 (qk_norm null): no norm
  kFused,   // a fused RMSNorm kernel (the executor's LibTorch Flux module)
  kPython,  // torch.nn.RMSNorm as Flux's FluxAttention runs it (Python ops: an f32 copy of x, rstd, the f32 normalized)
  // diffusers' own RMSNorm (normalization.py, the SD3 Attention's qk_norm "rms_norm"):
  // pow on an f32 copy, but `hidden_states * rsqrt(...)` multiplies the input itself,
  // so x is kept too; the normalized is cast to the weight's dtype before `* weight`.
  kDiffusers,
};

struct MmditDims {
  int64_t hidden = 0;    // heads * head_dim
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t mlp = 0;       // FeedForward width (mult 4)
  QkNorm qk_norm = QkNorm::kNone;
};

struct MmditContext {
  GraphBuilder& b;
  MmditDims d;
  const ZooOptions& options;
  std::string temb;  // the [B, hidden] timestep/text embedding every AdaLN reads
};

// SiLU(temb) -> linear to `chunks` x hidden, split into per-sample chunks.
std::vector<std::string> mmdit_modulation(MmditContext& c, const std::string& module, int64_t chunks);
// normed * (1 + scale) + shift (broadcast per sample).
std::string mmdit_scale_shift(MmditContext& c, const std::string& name, const std::string& normed,
                              SizeExpr rows, const std::string& shift, const std::string& scale);
// LayerNorm without affine, then mmdit_scale_shift.
std::string mmdit_modulate(MmditContext& c, const std::string& name, const std::string& x, SizeExpr rows,
                           const std::string& shift, const std::string& scale);
// gate[:, None] * x, then residual + that.
std::string mmdit_gated_residual(MmditContext& c, const std::string& gate_name, const std::string& add_name,
                                 const std::string& residual, const std::string& gate, const std::string& x,
                                 SizeExpr rows);

struct MmditQkv {
  std::string q, k, v;
};
struct MmditQkvNames {
  const char* q;
  const char* k;
  const char* v;
  const char* norm_q;
  const char* norm_k;
};
// to_q/to_k/to_v (with bias), then the per-head q/k norm of `c.d.qk_norm`.
MmditQkv mmdit_projections(MmditContext& c, const std::string& attn, const std::string& x, SizeExpr rows,
                           const MmditQkvNames& names);

// A linear over a slice (a view) of `base`: autograd keeps the view, whose
// storage is all of `base`, so the node reads and saves `base` itself.
std::string mmdit_linear_on_view(MmditContext& c, const std::string& module, const std::string& view,
                                 const std::string& base, SizeExpr rows, int64_t in, int64_t out);

// norm2 modulated by mod[3], mod[4], FeedForward (GELU tanh) hidden -> mlp ->
// hidden at `ff`, gated by mod[5], added to `hidden`.
std::string mmdit_feed_forward(MmditContext& c, const std::string& norm_name, const std::string& ff,
                               const std::string& hidden, SizeExpr rows, const std::vector<std::string>& mod);

// TimestepEmbedding / PixArtAlphaTextProjection: linear_1 -> SiLU (node
// `act_name`) -> linear_2, `in` -> hidden, per sample.
std::string mmdit_embed_mlp(GraphBuilder& b, int64_t hidden, const std::string& module, const std::string& x,
                            int64_t in, const char* act_name);

// The flow-matching loss of diffusers' trainers: weighted MSE in f32 of `out`
// against an input "target" of the same size (keeps the difference).
void mmdit_flow_matching_loss(GraphBuilder& b, const std::string& out, SizeExpr out_elements);

}  // namespace headroom::models
