#include "models/rope_caches.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace headroom::models {
namespace {

constexpr std::string_view kCosCached = ".cos_cached";

// A buffer registered persistent=False: resident, never trained, in no checkpoint.
// `fp32`: made in fp32 and never cast, whatever the run's precision.
graph::Param cache_buffer(std::string name, std::vector<int64_t> shape, DType dtype, bool fp32) {
  graph::Param p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.dtype = fp32 ? DType::kF32 : dtype;
  p.trainable = false;
  p.buffer = true;
  p.persistent = false;
  p.upcast_fp32 = fp32;
  return p;
}

}  // namespace

bool RopeCaches::per_layer() const {
  // transformers 4.44.2: Qwen2Attention.__init__ builds self.rotary_emb =
  // Qwen2RotaryEmbedding(...), GPTNeoXAttention._init_rope a GPTNeoXRotaryEmbedding;
  // 4.45.0 keeps only the one in the model (Qwen2Model.rotary_emb), which caches
  // nothing. torchtune 0.6.1's lora_qwen2_self_attention, lora_llama3_self_attention
  // (and lora_llama2, lora_mistral, lora_gemma, lora_phi3) make one per call.
  if (modules_ == RopeModules::kTransformersCached) return style_.transformers_cached;
  return modules_ == RopeModules::kTorchtuneLora && style_.torchtune_values > 0 && style_.torchtune_lora_per_layer;
}

bool RopeCaches::shared() const {
  // torchtune 0.6.1: llama3() (likewise llama2, llama3_1, llama3_2, mistral, gemma, qwen2,
  // phi3) builds `rope = RotaryPositionalEmbeddings(...)` once and passes it to every
  // layer's MultiHeadAttention as pos_embeddings; lora_llama3_1 and lora_llama3_2 do
  // the same with Llama3ScaledRoPE (models/llama3_2/_component_builders.py).
  if (style_.torchtune_values == 0) return false;
  if (modules_ == RopeModules::kTorchtune) return true;
  return modules_ == RopeModules::kTorchtuneLora && !style_.torchtune_lora_per_layer;
}

void RopeCaches::add_for_layer(GraphBuilder& b, int64_t layer, const std::string& node,
                               const std::string& layer_module, const std::string& model_module) const {
  if (per_layer()) {
    add(b, node, layer_module);
  } else if (layer == 0 && shared()) {
    add(b, node, model_module);
  }
}

void RopeCaches::add(GraphBuilder& b, const std::string& node, const std::string& module) const {
  std::vector<graph::Param> buffers;
  if (modules_ == RopeModules::kTransformersCached) {
    // Qwen2RotaryEmbedding._set_cos_sin_cache: emb = cat(freqs, freqs) over
    // max_position_embeddings positions, cos_cached = emb.cos().to(dtype) with the
    // default dtype the model is made in; GPTNeoXRotaryEmbedding's emb.cos() has no
    // .to(): fp32 (the fp32 inv_freq), and from_pretrained casts no buffer.
    const std::vector<int64_t> shape{max_position_, rotary_dims_};
    const DType dtype = b.param_dtype();
    buffers.push_back(cache_buffer(module + std::string(kCosCached), shape, dtype, style_.transformers_fp32));
    buffers.push_back(cache_buffer(module + ".sin_cached", shape, dtype, style_.transformers_fp32));
  } else {
    // torchtune: RotaryPositionalEmbeddings.build_rope_cache stacks cos and sin of the
    // fp32 idx_theta to [max_seq_len, dim // 2, 2] (modules/position_embeddings.py);
    // Qwen2RotaryPositionalEmbeddings concatenates cos and sin of cat(idx_theta,
    // idx_theta) to [max_seq_len, 2 * dim] (models/qwen2/_positional_embeddings.py).
    const std::vector<int64_t> shape =
        style_.torchtune_values == 2 ? std::vector<int64_t>{max_position_, 2 * rotary_dims_}
                                     : std::vector<int64_t>{max_position_, rotary_dims_ / 2, 2};
    buffers.push_back(cache_buffer(module + ".cache", shape, DType::kF32, true));
  }
  b.add_params(node, std::move(buffers));
}

bool rope_cache_kept_for_backward(const graph::Param& param) {
  return param.buffer && param.name.ends_with(".cache") && param.shape.size() == 3;
}

bool rope_cache_shared(const graph::Param& param, const graph::Block& block) {
  return rope_cache_kept_for_backward(param) && !param.name.starts_with(block.name + ".");
}

bool holds_transformers_rope_caches(const graph::LayerGraph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const graph::Node& node) {
    return std::any_of(node.params.begin(), node.params.end(), [](const graph::Param& p) {
      return p.buffer && p.name.ends_with(kCosCached);
    });
  });
}

}  // namespace headroom::models
