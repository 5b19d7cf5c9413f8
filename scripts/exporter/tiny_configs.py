"""Public configs scaled down to a size a CPU traces in a second, structure kept.

Why these numbers: every family keeps what makes its saved tensors differ
(grouped key/value heads, a head_dim that is not hidden/heads, fused
projections, biases, dropout, tied embeddings, class tokens), while widths
shrink to 64 and depth to 2, so the cross-check runs in seconds on a laptop.
Sizes are distinct from each other (hidden 64, MLP 176, vocab 384), so that a
tensor counted at the wrong width cannot agree by accident.
"""

from __future__ import annotations

import copy
from typing import Any, Dict

HIDDEN = 64
MLP = 176
LAYERS = 2
HEADS = 4
VOCAB = 384
POSITIONS = 128
IMAGE = 32
PATCH = 8

# family name in tests/data/hf -> how to shrink it
FAMILIES = ("llama-3.2-1b", "mistral-7b", "qwen2.5-0.5b", "qwen3-0.6b", "gemma-2b",
            "phi-3-mini-4k", "gpt2-medium", "pythia-160m", "opt-125m", "bert-base-uncased",
            "roberta-base", "vit-base-patch16-224", "clip-vit-base-patch32",
            "siglip-base-patch16-224", "llava-1.5-7b", "flux.1-dev-transformer",
            "gemma-2-9b", "gemma-3-1b", "qwen3-moe-2l", "deepseek-v2-lite-2l",
            "deepseek-v3-2l", "qwen2.5-vl-7b", "flan-t5-base", "t5-base", "sd3-medium",
            "sd3.5-medium")

# Mixture of experts: few experts, top-2, a distinct expert width (48); DeepSeek's
# MLA keeps q/k (16 + 8) and v (16) widths apart, as the published 192 and 128 are.
_MOE = {"num_experts": 8, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 48}
# A null q_lora_rank (V2-Lite's plain q_proj) stays null; V3's 8 groups of 256
# experts become 2 groups of 4 (its router sums each group's top 2).
_MLA = {"kv_lora_rank": 32, "q_lora_rank": 40, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
        "v_head_dim": 16, "n_group": 2, "topk_group": 1}


def _shrink_text(c: Dict[str, Any], positions: int = POSITIONS) -> None:
    """Llama-style and BERT-style key names; GPT-2's n_* names."""
    heads = c.get("num_attention_heads", c.get("n_head"))
    kv = c.get("num_key_value_heads")
    head_dim = c.get("head_dim")
    hidden = c.get("hidden_size", c.get("n_embd"))
    for key, value in (("hidden_size", HIDDEN), ("n_embd", HIDDEN), ("intermediate_size", MLP),
                       ("ffn_dim", MLP), ("num_hidden_layers", LAYERS), ("n_layer", LAYERS),
                       ("num_attention_heads", HEADS), ("n_head", HEADS),
                       ("vocab_size", VOCAB), ("max_position_embeddings", positions),
                       ("n_positions", positions), ("n_ctx", positions),
                       ("word_embed_proj_dim", HIDDEN)):
        if key in c or key in ("num_hidden_layers",) and "n_layer" not in c:
            c[key] = value
    if kv is not None and heads is not None and kv < heads:
        c["num_key_value_heads"] = 2  # grouped-query attention stays grouped
    elif kv is not None:
        c["num_key_value_heads"] = HEADS
    if head_dim is not None and heads is not None and hidden is not None:
        # Qwen3 and Gemma set a head_dim that is not hidden/heads: keep it so.
        c["head_dim"] = 32 if head_dim * heads != hidden else HIDDEN // HEADS
    if "rope_scaling" in c and isinstance(c["rope_scaling"], dict):
        c["rope_scaling"] = dict(c["rope_scaling"], original_max_position_embeddings=positions // 2)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        if isinstance(c.get(key), int) and c[key] >= VOCAB:
            c[key] = VOCAB - 1
    c.pop("sliding_window", None)


def _shrink_vision(c: Dict[str, Any]) -> None:
    c.update(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS,
             num_attention_heads=HEADS, image_size=IMAGE, patch_size=PATCH)


def tiny_config(family: str, public: Dict[str, Any]) -> Dict[str, Any]:
    """The tiny version of tests/data/hf/<family>/config.json."""
    c = copy.deepcopy(public)
    if family.startswith("flux"):
        c.update(num_layers=1, num_single_layers=1, attention_head_dim=16,
                 num_attention_heads=HEADS, joint_attention_dim=48, pooled_projection_dim=24,
                 in_channels=16, axes_dims_rope=[4, 6, 6])
        return c
    if c.get("_class_name") == "SD3Transformer2DModel":
        # Two blocks: an ordinary one and the last, context_pre_only; SD3.5's
        # dual attention kept in the first.
        c.update(num_layers=2, attention_head_dim=16, num_attention_heads=HEADS,
                 caption_projection_dim=16 * HEADS, joint_attention_dim=48, pooled_projection_dim=24,
                 pos_embed_max_size=8)
        if c.get("dual_attention_layers"):
            c["dual_attention_layers"] = [0]
        return c
    if c.get("model_type") == "qwen2_5_vl":
        return _tiny_qwen25vl(c)
    if "vision_config" in c:
        _shrink_vision(c["vision_config"])
        text = c.setdefault("text_config", {})
        if c.get("model_type") == "llava":
            text.update(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, vocab_size=VOCAB,
                        max_position_embeddings=POSITIONS)
            c["vocab_size"] = VOCAB
            c["image_token_index"] = VOCAB - 1
            c["image_seq_length"] = (IMAGE // PATCH) ** 2
            c["pad_token_id"] = VOCAB - 2
        else:
            # transformers writes nested configs without their defaults: state every size.
            text.update(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, vocab_size=VOCAB, max_position_embeddings=16)
            for config in (c, text, c["vision_config"]):
                if "projection_dim" in config:
                    config["projection_dim"] = 48
        return c
    if c.get("model_type") == "t5":
        # T5's own key names; d_kv x heads (96) is not d_model (64), as in T5-11B.
        c.update(d_model=HIDDEN, d_kv=24, d_ff=MLP, num_heads=HEADS, num_layers=LAYERS,
                 num_decoder_layers=LAYERS, vocab_size=VOCAB)
        return c
    if c.get("model_type") == "vit":
        _shrink_vision(c)
        return c
    _shrink_text(c)
    for key, value in {**_MOE, **_MLA}.items():
        if c.get(key) is not None:
            c[key] = value
    if c.get("model_type") == "gpt2":
        c["n_inner"] = MLP
    return c


def _tiny_qwen25vl(c: Dict[str, Any]) -> Dict[str, Any]:
    """Qwen2.5-VL (the Hub's flat layout): the text fields shrunk as a Llama's, M-RoPE's
    sections summing to head_dim / 2; 2 vision blocks of width 64 (MLP 176, 4 heads), the
    second of full attention, windows of 56 px (2 x 2 merged units), patch 14 kept; the
    merger out to the text width; the special tokens inside the small vocabulary."""
    _shrink_text(c)
    c["rope_scaling"] = {"type": "mrope", "mrope_section": [2, 3, 3]}
    c["vision_config"].update(depth=LAYERS, hidden_size=HIDDEN, intermediate_size=MLP, num_heads=HEADS,
                              out_hidden_size=HIDDEN, window_size=56, fullatt_block_indexes=[1])
    for offset, key in enumerate(("image_token_id", "video_token_id", "vision_start_token_id",
                                  "vision_end_token_id", "vision_token_id")):
        c[key] = VOCAB - 1 - offset
    return c
