// Unsloth's patched Llama/Mistral/Qwen2 (unsloth 2026.8.19 at 015bdef, unsloth_zoo
// 2026.8.13 at ce232d6) where it keeps other tensors than the Hugging Face modules
// headroom's graphs model: rewrites of the layer graph for --stack unsloth, each
// read from the autograd Function's save_for_backward. docs/stacks.md, "Unsloth".
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"

namespace headroom::planner {

// fast_rms_layernorm (unsloth/kernels/rms_layernorm.py Fast_RMS_Layernorm) is one
// Triton kernel that saves X, W and r, the fp32 inverse RMS per row, and writes a
// 16-bit Y: no fp32 copy of x and no normalized tensor. Makes every Python-style
// RMSNorm node (outputs "<norm>:x32", "<norm>:normalized") a fused one that saves its
// input and ":rstd". Returns how many norms it rewrote.
int unsloth_fused_norms(graph::LayerGraph& graph);

// patch_peft_model (unsloth/models/llama.py), with lora_dropout 0 and no bias, runs
// the adapted projections through unsloth/kernels/fast_lora.py:
// - LoRA_MLP where gate, up and down are all adapted: save_for_backward(adapters, X,
//   e, g), so neither silu(e) nor h = silu(e) * g (recomputed in backward by
//   swiglu_DWf_DW_dfg_kernel) nor any X @ A is kept;
// - LoRA_QKV where q, k and v are all adapted and bias-free: saves X and the adapters;
// - LoRA_W for an adapted o_proj: saves X and the adapters.
// Drops the saves those Functions do not make ("<proj>.lora_mid", silu's output kept by
// the multiply, h kept by down_proj). Each fused 4-bit base is dequantized into
// unsloth's global buffer in forward (matmul_lora: fast_dequantize(use_global_buffer =
// True)) and into a fresh in x out tensor in backward, except down_proj's (matmul_lora
// again); the global buffer (WEIGHT_BUFFERS, resized to the largest weight, and
// ABSMAX_BUFFERS, fp32) stays for the run: added as the frozen parameters
// "unsloth.weight_buffer" and "unsloth.absmax_buffer" of the first fused linear.
// Returns how many projections it fused.
int unsloth_fused_lora(graph::LayerGraph& graph);

// The attention backend's extra saves at the top of the band
// (unsloth/utils/attention_dispatch.py run_attention; flash-attn, the bottom, keeps
// what headroom's fused attention keeps): xformers with grouped K/V reshapes K and V
// expanded to every query head (a copy when they require grad), which it keeps; SDPA
// returns out.transpose(1, 2) and LlamaAttention_fast_forward's reshape copies it, the
// copy kept by o_proj. Prices whichever keeps more for this model: the two K/V copies
// when 2 x (q width - kv width) exceeds the q width, else the output copy.
void unsloth_attention_top(graph::LayerGraph& graph);

// unsloth_zoo/fused_losses/cross_entropy_loss.py UnslothFusedLoss over `tokens` rows:
// torch.chunk into get_chunk_size chunks, each target_gb of fp32 logits at most
// (_get_chunk_multiplier: min(free VRAM / 2, 4) GiB; headroom takes 4, the largest
// chunk), its gradient written into grad_inputs in forward. Sets the head's forward
// workspace (apply_loss_impl made it the fused op) to one chunk of
// `bytes_per_logit` per logit: 4 as torch.compile fuses the fp32 cross-entropy
// (the 16-bit logits and their 16-bit gradient), 16 in its eager fallback (the 16-bit
// logits, the fp32 log-probabilities, their fp32 and 16-bit gradients).
void unsloth_fused_ce_chunks(graph::LayerGraph& graph, int64_t tokens, int64_t bytes_per_logit);

// get_chunk_size(bsz, qlen, vocab, target_gb = 4): the chunk count.
int64_t unsloth_ce_chunks(int64_t tokens, int64_t vocab);

}  // namespace headroom::planner
