// litgpt's own GPT and LoRA modules (litgpt 0.5.13, litgpt/model.py, litgpt/lora.py)
// where they keep other tensors than the Hugging Face modules headroom's graphs
// model: rewrites of the layer graph for --stack litgpt. docs/stacks.md, "litgpt".
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// litgpt's GPT.__init__ makes lm_head and transformer.wte as two modules and never
// ties them; scripts/convert_hf_checkpoint.py copies wte into lm_head when the HF
// checkpoint has no lm_head (tie_word_embeddings). Clears the tie of every linear
// weight tied to an embedding's weight: the head is a V x H matrix of its own, with
// its own gradient and optimizer states when it trains.
void untie_output_head(graph::LayerGraph& graph);

// litgpt's attention has one qkv linear, adapted as one LoRAQKVLinear (litgpt/lora.py,
// 0.5.13): its forward calls self.lora_dropout(x) once for every enabled part, and
// where not all of q, k and v are enabled zero_pad index_copy_s the adapters' output
// (B, q + v rows, T) into a zero tensor, and index_copy_'s backward keeps it (the
// meta-device oracle: cat (B, 2560, T) per Llama-3.2-1B layer). Rewrites the adapted
// "<attention>.q_proj", ".k_proj", ".v_proj" of each attention to that: the first
// keeps the one dropout's output and mask and saves the padded output
// ("<attention>.lora_qkv_out": rows x the enabled parts' widths), the others lose
// theirs.
void fuse_qkv_adapters(graph::LayerGraph& graph);

// litgpt's CausalSelfAttention.forward (litgpt/model.py, 0.5.13) rebuilds q and k
// with torch.cat((q_roped, q[..., rope_n_elem:]), dim=-1): a contiguous [B, H, S, D]
// tensor, so the flash kernel's output follows that layout (torch 2.11
// attention.cu: empty_like(query.transpose(1, 2))), and y.transpose(1, 2).reshape
// (B, T, H * D) copies it. SDPA keeps its output for backward and the projection
// keeps the copy: S x H x D more per layer than the Hugging Face attention, whose q
// stays [B, S, H, D] in memory. Inserts that copy ("<attention>.merge_heads") between
// every SDPA node and the nodes that read its output; eager attention copies already.
void copy_merged_heads(graph::LayerGraph& graph);

// Under Fabric's bf16-mixed (torch.autocast over the fp32 model) litgpt's attention
// projects q, k and v with its one qkv linear (litgpt/model.py CausalSelfAttention,
// 0.5.13), so autocast casts the fp32 normalized input to 16 bits once, where the
// Hugging Face graph's q_proj, k_proj and v_proj each cast it (apply_autocast's
// "<node>.cast:<input>"), and a training qkv keeps that one copy for its weight
// gradient. Makes k_proj and v_proj read and keep q_proj's cast and drops theirs,
// where none of the three has adapters (LoRAQKVLinear's are fuse_qkv_adapters').
void share_qkv_input_cast(graph::LayerGraph& graph);

// lora.py runs lm_head once per 128-token chunk (model(input_ids,
// lm_head_chunk_size=128); model.py GPT.forward: x.split(lm_head_chunk_size, dim=1)).
inline constexpr int64_t kLitgptHeadChunkTokens = 128;

// Under Fabric's bf16-mixed (torch.autocast over the fp32 model) with the head frozen:
// autocast_mode.cpp cached_cast caches only leaves that require grad, so each chunk's
// call casts the weight again and its matmul saves that 16-bit copy for the input
// gradient: ceil(S / 128) copies of V x H. Scales the frozen head's
// "<head>.weight_cast" (apply_autocast's one copy) to S / 128 copies: exact when 128
// divides S, one copy short otherwise. A head that trains is cast once (cached).
void cast_head_per_chunk(graph::LayerGraph& graph);

// litgpt's finetune/lora.py with --quantize bnb.nf4 (litgpt 0.5.13, Lightning 2.6.6,
// bitsandbytes 0.50.2); docs/stacks.md, "litgpt", QLoRA:
// - Lightning's BitsandbytesPrecision.convert_module replaces every nn.Linear through
//   _ClassReplacementContextManager, lm_head too (lightning/fabric/plugins/precision/
//   bitsandbytes.py): quantizes the frozen head (quantize_linear).
// - Its _Linear4bit.quantize casts the weight to torch.half before quantize_4bit, so
//   quant_state.dtype is fp16: MatMul4Bit.backward (bitsandbytes/autograd/_functions.py)
//   computes dequantize_4bit(B, state).to(grad_output.dtype), an fp16 and a 16-bit
//   copy of in x out live at once. Sets each NF4 linear's backward workspace to
//   2 x in x out (forward keeps quantize_linear's one copy).
// - lora.py fit setup builds the optimizer over model.parameters() before it swaps
//   transformer.wte for bitsandbytes' StableEmbedding (.to the old weight's dtype):
//   the optimizer keeps the old V x H embedding, and the new one's weight trains
//   (nn.Embedding's Parameter) outside the optimizer, so no zero_grad frees the
//   gradient embedding_dense_backward makes in the first backward. Adds both to the
//   token embedding as frozen V x H parameters of its dtype: "<wte>.replaced_weight"
//   and "<wte>.weight_grad_kept" (a gradient: kept_gradient says so).
void litgpt_qlora(graph::LayerGraph& graph, bool double_quant);

// Whether `param` is the StableEmbedding's gradient litgpt_qlora adds: V x H bytes
// a gradient holds from the first backward on (embedding_dense_backward), in no
// optimizer, so no zero_grad frees it. The step priced it from the start, as a
// parameter's storage; its category is the gradients'.
bool kept_gradient(const graph::Param& param);

// Whether litgpt's optimizer is bitsandbytes' PagedAdamW: finetune/lora.py with
// --quantize bnb.* calls utils.py instantiate_bnb_optimizer, which makes
// bnb.optim.PagedAdamW (optim_bits 32) for "AdamW" (litgpt 0.5.13). Its
// Optimizer2State.init_state keeps state1 and state2 in fp32 whatever the
// parameter's dtype, paged (unified memory) from 1e5 elements
// (bitsandbytes optim/optimizer.py get_state_buffer, 0.50.2).
bool litgpt_paged_adamw(const RunSettings& settings);

}  // namespace headroom::planner
