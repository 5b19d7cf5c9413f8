#include "models/flux_text.h"

#include <string>
#include <vector>

#include "models/layers.h"

namespace headroom::models {
namespace {

// google/t5-v1_1-xxl config.json (FLUX.1 text_encoder_2/config.json): d_model
// 4096, d_ff 10240, num_layers 24, num_heads 64, d_kv 64, vocab_size 32128,
// relative_attention_num_buckets 32, feed_forward_proj "gated-gelu".
struct T5Config {
  int64_t d_model = 4096;
  int64_t d_ff = 10240;
  int64_t layers = 24;
  int64_t heads = 64;
  int64_t d_kv = 64;
  int64_t vocab = 32128;
  int64_t buckets = 32;
};
constexpr T5Config kT5Xxl{};

Param frozen(const GraphBuilder& b, const std::string& name, std::vector<int64_t> shape) {
  return frozen_param(b, name, std::move(shape));
}

std::vector<Param> t5_params(const GraphBuilder& b, const std::string& prefix) {
  const T5Config& c = kT5Xxl;
  const int64_t inner = c.heads * c.d_kv;
  std::vector<Param> params = {frozen(b, prefix + ".shared.weight", {c.vocab, c.d_model})};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = prefix + ".encoder.block." + std::to_string(i) + ".layer.";
    for (const char* m : {"q", "k", "v"}) {
      params.push_back(frozen(b, p + "0.SelfAttention." + m + ".weight", {inner, c.d_model}));
    }
    params.push_back(frozen(b, p + "0.SelfAttention.o.weight", {c.d_model, inner}));
    if (i == 0) {
      params.push_back(frozen(b, p + "0.SelfAttention.relative_attention_bias.weight",
                              {c.buckets, c.heads}));
    }
    params.push_back(frozen(b, p + "0.layer_norm.weight", {c.d_model}));
    params.push_back(frozen(b, p + "1.DenseReluDense.wi_0.weight", {c.d_ff, c.d_model}));
    params.push_back(frozen(b, p + "1.DenseReluDense.wi_1.weight", {c.d_ff, c.d_model}));
    params.push_back(frozen(b, p + "1.DenseReluDense.wo.weight", {c.d_model, c.d_ff}));
    params.push_back(frozen(b, p + "1.layer_norm.weight", {c.d_model}));
  }
  params.push_back(frozen(b, prefix + ".encoder.final_layer_norm.weight", {c.d_model}));
  return params;
}

}  // namespace

Param frozen_param(const GraphBuilder& b, const std::string& name, std::vector<int64_t> shape) {
  Param p = b.param(name, std::move(shape));
  p.trainable = false;
  return p;
}

std::vector<Param> frozen_clip_text_params(const GraphBuilder& b, const std::string& prefix,
                                           const ClipTextConfig& c) {
  const std::string e = prefix + ".text_model.embeddings.";
  std::vector<Param> params = {frozen(b, e + "token_embedding.weight", {c.vocab, c.hidden}),
                               frozen(b, e + "position_embedding.weight", {c.positions, c.hidden})};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = prefix + ".text_model.encoder.layers." + std::to_string(i) + ".";
    for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      params.push_back(frozen(b, p + "self_attn." + m + ".weight", {c.hidden, c.hidden}));
      params.push_back(frozen(b, p + "self_attn." + m + ".bias", {c.hidden}));
    }
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      params.push_back(frozen(b, p + ln + ".weight", {c.hidden}));
      params.push_back(frozen(b, p + ln + ".bias", {c.hidden}));
    }
    params.push_back(frozen(b, p + "mlp.fc1.weight", {c.mlp, c.hidden}));
    params.push_back(frozen(b, p + "mlp.fc1.bias", {c.mlp}));
    params.push_back(frozen(b, p + "mlp.fc2.weight", {c.hidden, c.mlp}));
    params.push_back(frozen(b, p + "mlp.fc2.bias", {c.hidden}));
  }
  params.push_back(frozen(b, prefix + ".text_model.final_layer_norm.weight", {c.hidden}));
  params.push_back(frozen(b, prefix + ".text_model.final_layer_norm.bias", {c.hidden}));
  if (c.projection > 0) params.push_back(frozen(b, prefix + ".text_projection.weight", {c.projection, c.hidden}));
  return params;
}

int64_t param_elements(const std::vector<Param>& params) {
  int64_t total = 0;
  for (const Param& p : params) total += p.elements();
  return total;
}

std::pair<std::string, std::string> add_flux_text_encoders(GraphBuilder& b, int64_t text_tokens) {
  b.begin_block("text_encoders", "frozen_text_encoder", false);
  const std::string clip_ids =
      b.input("clip_input_ids", SizeExpr::per_sample(kClipL.positions), DType::kInt64, false);
  const std::string t5_ids =
      b.input("t5_input_ids", SizeExpr::per_sample(text_tokens), DType::kInt64, false);
  // Frozen and fed token ids, so autograd records nothing: no saves. Forward
  // FLOPs 2 * parameters * tokens (matmuls dominate); the workspace is the
  // largest transient of a layer (T5: the two [B, T, d_ff] gated-GELU halves;
  // CLIP: the [B, 77, 3072] MLP activation).
  OpSpec clip{"text_encoder", "frozen_encoder", {clip_ids}, SizeExpr::per_sample(kClipL.hidden),
              std::nullopt, {}, frozen_clip_text_params(b, "text_encoder", kClipL), {}, {}, {}, {}};
  clip.fwd_flops = SizeExpr::per_sample(2 * param_elements(clip.params) * kClipL.positions);
  clip.workspace_elements = SizeExpr::per_sample(kClipL.positions * kClipL.mlp);
  const std::string pooled = b.op(clip);
  OpSpec t5{"text_encoder_2", "frozen_encoder", {t5_ids},
            SizeExpr::per_sample(text_tokens * kT5Xxl.d_model), std::nullopt, {},
            t5_params(b, "text_encoder_2"), {}, {}, {}, {}};
  t5.fwd_flops = SizeExpr::per_sample(2 * param_elements(t5.params) * text_tokens);
  t5.workspace_elements = SizeExpr::per_sample(2 * text_tokens * kT5Xxl.d_ff);
  const std::string encoded = b.op(t5);
  return {pooled, encoded};
}

}  // namespace headroom::models
