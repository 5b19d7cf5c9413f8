#include "models/vision.h"

#include <string>

#include "models/layers.h"

namespace headroom::models {
namespace {

// HF ViTModel and Dinov2Model share the embedding, layer and final-norm names
// (embeddings.cls_token, encoder.layer.N, layernorm); CLIP's family does not.
bool hf_vit_names(const VisionSpec& s) { return s.style == VisionStyle::kVit || s.style == VisionStyle::kDinov2; }

const graph::Node& last_of_block(const graph::LayerGraph& graph, int block) {
  const graph::Node* last = nullptr;
  for (const graph::Node& node : graph.nodes) {
    if (node.block == block) last = &node;
  }
  return *last;
}

struct LayerNames {
  std::string ln1, q, k, v, qkv, out, ln2, fc1, act, fc2;
};

LayerNames layer_names(const VisionSpec& s, int64_t i) {
  const std::string idx = std::to_string(i);
  LayerNames n;
  switch (s.style) {
    case VisionStyle::kVit: {
      const std::string p = s.prefix + ".encoder.layer." + idx;
      n = {p + ".layernorm_before", p + ".attention.attention.query", p + ".attention.attention.key",
           p + ".attention.attention.value", "", p + ".attention.output.dense",
           p + ".layernorm_after", p + ".intermediate.dense", p + ".intermediate.intermediate_act_fn",
           p + ".output.dense"};
      break;
    }
    case VisionStyle::kClip:
    case VisionStyle::kSiglip: {
      const std::string p = s.prefix + ".encoder.layers." + idx;
      n = {p + ".layer_norm1", p + ".self_attn.q_proj", p + ".self_attn.k_proj",
           p + ".self_attn.v_proj", "", p + ".self_attn.out_proj", p + ".layer_norm2",
           p + ".mlp.fc1", p + ".mlp.activation_fn", p + ".mlp.fc2"};
      break;
    }
    case VisionStyle::kDinov2: {
      const std::string p = s.prefix + ".encoder.layer." + idx;
      n = {p + ".norm1", p + ".attention.attention.query", p + ".attention.attention.key",
           p + ".attention.attention.value", "", p + ".attention.output.dense", p + ".norm2",
           p + (s.swiglu ? ".mlp.weights_in" : ".mlp.fc1"), p + ".mlp.activation", p + (s.swiglu ? ".mlp.weights_out" : ".mlp.fc2")};
      break;
    }
    case VisionStyle::kTimm: {
      const std::string p = "blocks." + idx;
      n = {p + ".norm1", "", "", "", p + ".attn.qkv", p + ".attn.proj", p + ".norm2", p + ".mlp.fc1",
           p + ".mlp.act", p + ".mlp.fc2"};
      break;
    }
    case VisionStyle::kBlip2: {
      const std::string p = s.prefix + ".encoder.layers." + idx;
      n = {p + ".layer_norm1", "", "", "", p + ".self_attn.qkv", p + ".self_attn.projection",
           p + ".layer_norm2", p + ".mlp.fc1", p + ".mlp.activation_fn", p + ".mlp.fc2"};
      break;
    }
  }
  return n;
}

std::string layer_prefix(const VisionSpec& s, int64_t i) {
  if (s.style == VisionStyle::kTimm) return "blocks." + std::to_string(i);
  return s.prefix + (hf_vit_names(s) ? ".encoder.layer." : ".encoder.layers.") + std::to_string(i);
}

// HF QuickGELUActivation: x * sigmoid(1.702 * x), Python ops: sigmoid keeps
// its output, the product keeps x and the sigmoid.
std::string quick_gelu(GraphBuilder& b, const std::string& name, const std::string& x,
                       SizeExpr elements) {
  const std::string scaled = b.copy(name + ".scale", "mul_scalar", {x}, elements);
  OpSpec sig{name + ".sigmoid", "sigmoid", {scaled}, elements, std::nullopt,
             {SavedRef{name + ".sigmoid", SaveWhen::kInputGrad}}, {}, elements.scaled(4),
             elements.scaled(2), {}, {}};
  const std::string s = b.op(sig);
  return b.mul(name, x, s, elements);
}

// Dinov2LayerScale (hidden * lambda1) or timm's LayerScale (x * gamma) over the
// channels. The product keeps its input for the scale's gradient (and the scale,
// a parameter, for dx).
std::string layer_scale(GraphBuilder& b, const VisionSpec& s, int64_t i, int branch, const std::string& x) {
  const std::string name = s.style == VisionStyle::kTimm
                               ? layer_prefix(s, i) + ".ls" + std::to_string(branch)
                               : layer_prefix(s, i) + ".layer_scale" + std::to_string(branch);
  const std::string scale = s.style == VisionStyle::kTimm ? ".gamma" : ".lambda1";
  const SizeExpr elements = times(s.rows, s.hidden);
  OpSpec spec;
  spec.name = name;
  spec.op = "mul";
  spec.inputs = {x};
  spec.out_elements = elements;
  spec.saves = {SavedRef{x, SaveWhen::kParamGrad}};
  spec.params = {b.param(name + scale, {s.hidden})};
  spec.fwd_flops = elements;
  spec.bwd_input_flops = elements;
  spec.bwd_param_flops = elements;
  return b.op(spec);
}

// Dinov2SwiGLUFFN: weights_in to 2 x mlp, chunk, silu(x1) * x2, weights_out.
std::string swiglu_ffn(GraphBuilder& b, const VisionSpec& s, const LayerNames& n, const std::string& y) {
  const SizeExpr mlp_elements = times(s.rows, s.mlp);
  const std::string both = b.linear(n.fc1, y, s.rows, s.hidden, 2 * s.mlp, true);
  const std::string p = n.fc1.substr(0, n.fc1.rfind('.'));
  const auto halves = b.split(p + ".chunk", both, {{p + ".x1", mlp_elements}, {p + ".x2", mlp_elements}});
  const std::string act = b.activation(n.act, halves[0], mlp_elements, "silu");
  const std::string gated = b.mul(p + ".gate", act, halves[1], mlp_elements);
  return b.linear(n.fc2, gated, s.rows, s.mlp, s.hidden, true);
}

std::string add_layer(GraphBuilder& b, const VisionSpec& s, int64_t i, const std::string& hidden,
                      const ZooOptions& options) {
  const LayerNames n = layer_names(s, i);
  const SizeExpr rows = s.rows;
  const SizeExpr h_elements = times(rows, s.hidden);
  const SizeExpr mlp_elements = times(rows, s.mlp);
  const std::string x = b.norm(n.ln1, hidden, rows, s.hidden, NormKind::kLayerNorm, true, true);
  std::string q, k, v;
  if (s.style == VisionStyle::kBlip2 || s.style == VisionStyle::kTimm) {
    // Blip2Attention: qkv Linear without bias, plus q_bias and v_bias
    // parameters concatenated with zeros for k: in effect a linear with bias.
    // timm's Attention: one qkv Linear with bias, reshaped and unbound into q, k, v.
    const bool blip2 = s.style == VisionStyle::kBlip2;
    const std::string qkv = b.linear(n.qkv, x, rows, s.hidden, 3 * s.hidden, !blip2);
    if (blip2) {
      b.add_params(n.qkv, {b.param(layer_prefix(s, i) + ".self_attn.q_bias", {s.hidden}),
                           b.param(layer_prefix(s, i) + ".self_attn.v_bias", {s.hidden})});
    }
    const std::string p = layer_prefix(s, i) + (blip2 ? ".self_attn" : ".attn");
    const auto parts = b.split(p + ".split_qkv", qkv,
                               {{p + ".query", h_elements}, {p + ".key", h_elements},
                                {p + ".value", h_elements}});
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    q = b.linear(n.q, x, rows, s.hidden, s.hidden, true);
    k = b.linear(n.k, x, rows, s.hidden, s.hidden, true);
    v = b.linear(n.v, x, rows, s.hidden, s.hidden, true);
  }
  const std::string attn_prefix = layer_prefix(s, i) + ".attention_core";
  AttentionShape shape =
      self_attention_shape(s.heads, s.heads, s.hidden / s.heads, rows, s.scores_per_head, false);
  // transformers' eager ViT, CLIP and SigLIP attention: softmax(dtype=float32).to(dtype),
  // which keeps the f32 probabilities and their cast (traced by scripts/exporter).
  // timm's unfused path: attn.softmax(dim=-1) in the input's dtype.
  const bool softmax_fp32 = s.style != VisionStyle::kBlip2 && s.style != VisionStyle::kTimm;
  std::string attn = attention(b, options.attention, attn_prefix, q, k, v, shape,
                               EagerAttentionOptions{softmax_fp32, dropout_p(options, s.attention_dropout)});
  if (options.attention == AttentionImpl::kEager) {
    attn = b.copy(attn_prefix + ".merge_heads", "transpose_contiguous", {attn}, h_elements);
  }
  std::string o = b.linear(n.out, attn, rows, s.hidden, s.hidden, true);
  o = b.dropout(n.out + ".dropout", o, h_elements, dropout_p(options, s.dropout));
  if (s.layer_scale) o = layer_scale(b, s, i, 1, o);
  const std::string h = b.add(layer_prefix(s, i) + ".residual_attn", hidden, o, h_elements);
  const std::string y = b.norm(n.ln2, h, rows, s.hidden, NormKind::kLayerNorm, true, true);
  std::string down;
  if (s.swiglu) {
    down = swiglu_ffn(b, s, n, y);
  } else {
    const std::string fc1 = b.linear(n.fc1, y, rows, s.hidden, s.mlp, true);
    const std::string act = s.style == VisionStyle::kClip     ? quick_gelu(b, n.act, fc1, mlp_elements)
                            : s.style == VisionStyle::kSiglip ? b.activation(n.act, fc1, mlp_elements, "gelu_tanh")
                                                              : b.activation(n.act, fc1, mlp_elements, "gelu");
    down = b.linear(n.fc2, act, rows, s.mlp, s.hidden, true);
  }
  // ViTLayer.forward calls self.mlp(hidden_states) on the layernorm_after output
  // and rebinds the name only when the MLP returns: the frame holds the norm's
  // (under autocast fp32) output through fc2 (modeling_vit.py 5.23.0; 4.44's
  // ViTIntermediate held it through the activation). It matters where nothing saves
  // it: under autocast, or in a no_grad recompute.
  if (s.style == VisionStyle::kVit) b.hold_until(n.fc2, y);
  down = b.dropout(n.fc2 + ".dropout", down, h_elements, dropout_p(options, s.dropout));
  if (s.layer_scale) down = layer_scale(b, s, i, 2, down);
  const std::string out = b.add(layer_prefix(s, i) + ".residual_mlp", h, down, h_elements);
  // ViTEncoder and Dinov2Encoder loop `hidden_states = layer_module(hidden_states)`:
  // the loop's frame holds each layer's input until the layer returns.
  if (hf_vit_names(s)) b.hold_until(layer_prefix(s, i) + ".residual_mlp", hidden);
  return out;
}

std::string add_embeddings(GraphBuilder& b, const VisionSpec& s) {
  // Node names only (timm's parameters have their own names below).
  const std::string e = s.style == VisionStyle::kTimm ? "embeddings" : s.prefix + ".embeddings";
  const int64_t patch_pixels = 3 * s.patch * s.patch;
  const std::string pixels = b.input("pixel_values", times(s.patch_rows, patch_pixels),
                                     s.fp32_pixels ? std::optional(DType::kF32) : std::nullopt, false);
  // Conv2d with kernel = stride = patch: a linear over patches.
  const bool timm = s.style == VisionStyle::kTimm;  // patch_embed.proj, cls_token, pos_embed
  const std::string conv_name = timm             ? "patch_embed.proj"
                                : hf_vit_names(s) ? e + ".patch_embeddings.projection"
                                                  : e + ".patch_embedding";
  const bool conv_bias = s.style != VisionStyle::kClip;
  OpSpec conv;
  conv.name = conv_name;
  conv.op = "conv2d";
  conv.inputs = {pixels};
  conv.out_elements = times(s.patch_rows, s.hidden);
  conv.saves = {SavedRef{pixels, SaveWhen::kParamGrad}};
  conv.params = {b.param(conv_name + ".weight", {s.hidden, 3, s.patch, s.patch})};
  if (conv_bias) conv.params.push_back(b.param(conv_name + ".bias", {s.hidden}));
  conv.fwd_flops = s.patch_rows.scaled(2 * patch_pixels * s.hidden);
  conv.bwd_param_flops = conv.fwd_flops;
  const std::string patches = b.op(conv);
  const SizeExpr h_elements = times(s.rows, s.hidden);
  OpSpec cls{e + ".cat_class_token", "concat", {patches}, h_elements, std::nullopt, {}, {}, {}, {}, {}, {}};
  const std::string cls_name = timm ? "cls_token" : hf_vit_names(s) ? e + ".cls_token" : e + ".class_embedding";
  const std::vector<int64_t> cls_shape =
      s.style == VisionStyle::kClip ? std::vector<int64_t>{s.hidden} : std::vector<int64_t>{1, 1, s.hidden};
  cls.params = {b.param(cls_name, cls_shape)};
  // Dinov2Embeddings.mask_token [1, hidden]: a parameter that only masked-image
  // pretraining reads.
  if (s.style == VisionStyle::kDinov2) cls.params.push_back(b.param(e + ".mask_token", {1, s.hidden}));
  const std::string with_cls = s.style == VisionStyle::kSiglip ? patches : b.op(cls);
  const std::string pos_name =
      timm ? "pos_embed" : hf_vit_names(s) ? e + ".position_embeddings" : e + ".position_embedding";
  OpSpec pos{pos_name, "add", {with_cls}, h_elements, std::nullopt, {}, {}, h_elements, {}, h_elements, {}};
  const bool embedding_table = s.style == VisionStyle::kClip || s.style == VisionStyle::kSiglip;
  pos.params = {embedding_table ? b.param(pos_name + ".weight", {s.positions, s.hidden})
                                              : b.param(pos_name, {1, s.positions, s.hidden})};
  std::string hidden = b.op(pos);
  hidden = b.dropout(e + ".dropout", hidden, h_elements, s.dropout);
  if (s.style == VisionStyle::kClip) {
    hidden = b.norm(s.prefix + ".pre_layrnorm", hidden, s.rows, s.hidden, NormKind::kLayerNorm, true, true);
  }
  return hidden;
}

}  // namespace

std::string add_vision_layer(GraphBuilder& b, const VisionSpec& spec, int64_t i, const std::string& hidden,
                             const ZooOptions& options) {
  b.begin_block(layer_prefix(spec, i), "vision_layer", true);
  return add_layer(b, spec, i, hidden, options);
}

std::string add_vision_encoder(GraphBuilder& b, const VisionSpec& s, const ZooOptions& options) {
  b.begin_block("vision_embeddings", "vision_embedding", false);
  std::string hidden = add_embeddings(b, s);
  for (int64_t i = 0; i < s.layers_to_run; ++i) {
    b.begin_block(layer_prefix(s, i), "vision_layer", true);
    hidden = add_layer(b, s, i, hidden, options);
  }
  if (s.layers_to_run < s.layers) {
    // Parameters of the layers HF runs but whose output is not used, taken from
    // a scratch build of those layers; plus the post layernorm they feed.
    GraphBuilder scratch;
    scratch.set_param_dtype(b.param_dtype());
    scratch.begin_block("scratch", "scratch", false);
    std::string h = scratch.input("h", times(s.rows, s.hidden), std::nullopt, true);
    for (int64_t i = s.layers_to_run; i < s.layers; ++i) h = add_layer(scratch, s, i, h, options);
    if (s.post_layernorm) add_vision_post_norm(scratch, s, h);
    OpSpec unused{s.prefix + ".unused_tail", "unused", {hidden}, times(s.rows, s.hidden),
                  std::nullopt, {}, {}, {}, {}, {}, {}};
    for (const graph::Node& node : scratch.graph().nodes) {
      for (const Param& p : node.params) unused.params.push_back(p);
      unused.fwd_flops += node.fwd_flops;
    }
    b.op(unused);
  }
  return hidden;
}

std::string add_vision_post_norm(GraphBuilder& b, const VisionSpec& s, const std::string& hidden) {
  const std::string name = s.style == VisionStyle::kTimm ? "norm"
                           : hf_vit_names(s)             ? s.prefix + ".layernorm"
                                                         : s.prefix + ".post_layernorm";
  const std::string out = b.norm(name, hidden, s.rows, s.hidden, NormKind::kLayerNorm, true, true);
  // ViTModel.forward and Dinov2Model.forward keep `embedding_output` in their frame
  // until the final layernorm has run (modeling_vit.py, modeling_dinov2.py 5.23.0).
  if (hf_vit_names(s)) {
    const graph::LayerGraph& graph = b.graph();
    for (size_t block = 0; block < graph.blocks.size(); ++block) {
      if (graph.blocks[block].name != "vision_embeddings") continue;
      const std::string embedding_output = last_of_block(graph, static_cast<int>(block)).outputs.front();
      b.hold_until(name, embedding_output);
      break;
    }
  }
  // ViTModel.forward (not Dinov2's) rebinds pixel_values to its copy in the patch
  // projection's dtype (`pixel_values.to(expected_dtype)`) and keeps it to the end;
  // the graph holds the input, which the planner turns into that copy when the run's
  // weights are 16-bit over fp32 pixels (planner/mechanisms/autocast.cc).
  if (s.style == VisionStyle::kVit && s.fp32_pixels) b.hold_until(name, "pixel_values");
  return out;
}

VisionSpec clip_vit_l14_336(const std::string& prefix, SizeExpr rows, SizeExpr patch_rows,
                            SizeExpr scores_per_head) {
  VisionSpec s;
  s.style = VisionStyle::kClip;
  s.prefix = prefix;
  s.hidden = 1024;
  s.layers = 24;
  s.layers_to_run = 24;
  s.heads = 16;
  s.mlp = 4096;
  s.patch = 14;
  s.positions = 577;
  s.rows = rows;
  s.patch_rows = patch_rows;
  s.scores_per_head = scores_per_head;
  s.post_layernorm = true;
  return s;
}

}  // namespace headroom::models
