"""litgpt's model for a run: its own `Config` by name, checked against the config.json
headroom is given, built as `finetune/full.py` and `finetune/lora.py` build it, on meta.

litgpt 0.5.13 `finetune/lora.py` `setup`: `Config.from_file(..., lora_r=, lora_alpha=,
lora_dropout=, lora_query=, lora_key=, lora_value=, ...)`; `main`: `GPT(config)` under
`fabric.init_module`, then `mark_only_lora_as_trainable`. `finetune/full.py`: the same
without the LoRA keys, `litgpt.model.GPT`.
"""

from __future__ import annotations

import json
import os

import torch

from stacks.litgpt_qlora import quantize_layers

# headroom's LoRA target names (the HF config's modules) -> litgpt's `lora_*` flags
# (litgpt/lora.py Config; the fused qkv linear takes query, key and value separately)
_LORA_FLAGS = {"q_proj": "lora_query", "k_proj": "lora_key", "v_proj": "lora_value",
               "o_proj": "lora_projection", "gate_proj": "lora_mlp", "up_proj": "lora_mlp",
               "down_proj": "lora_mlp", "lm_head": "lora_head"}

# litgpt Config field -> the HF config.json key that must agree (the model headroom prices)
_SAME_AS_HF = {"padded_vocab_size": "vocab_size", "n_embd": "hidden_size",
               "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
               "n_query_groups": "num_key_value_heads", "intermediate_size": "intermediate_size"}


# The config.json folders of the grid -> litgpt's config names (litgpt/config.py `configs`)
LITGPT_NAMES = {"llama-3.2-1b": "Llama-3.2-1B", "llama-3-8b": "Llama-3-8B", "qwen2.5-0.5b": "Qwen2.5-0.5B"}


def lora_flags(spec: dict) -> dict:
    """litgpt's LoRA keys for the spec; alpha is twice the rank (litgpt's defaults: r 8, alpha 16)."""
    rank = spec.get("lora_rank", 8)
    flags = {"lora_r": rank, "lora_alpha": 2 * rank, "lora_dropout": spec.get("lora_dropout", 0.05)}
    for target in spec["lora_targets"]:
        if target not in _LORA_FLAGS:
            raise ValueError(f"litgpt: lora target '{target}': expected one of {', '.join(_LORA_FLAGS)}")
        flags[_LORA_FLAGS[target]] = True
    return flags


def litgpt_config(spec: dict):
    """`Config.from_name` of the folder's litgpt name (what `model_config.yaml` holds after
    `litgpt download`), or `Config(**spec["litgpt_config"])` for a model litgpt does not
    name (the test's tiny one); refused where it differs from the spec's config.json."""
    if spec["method"] in ("lora", "qlora"):
        from litgpt.lora import Config
    else:
        from litgpt.config import Config
    lora = lora_flags(spec) if spec["method"] in ("lora", "qlora") else {}
    if "litgpt_config" in spec:
        config = Config(**spec["litgpt_config"], **lora)
    else:
        name = spec.get("litgpt_model") or LITGPT_NAMES[os.path.basename(spec["model"].rstrip("/"))]
        config = Config.from_name(name, **lora)
    with open(os.path.join(spec["model"], "config.json")) as f:
        hf = json.load(f)
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    wrong = [f"{ours}={getattr(config, ours)} vs {theirs}={hf[theirs]}"
             for ours, theirs in _SAME_AS_HF.items() if getattr(config, ours) != hf[theirs]]
    if config.head_size != head_dim:
        wrong.append(f"head_size={config.head_size} vs head_dim={head_dim}")
    if wrong:
        raise ValueError(f"litgpt: {config.name} differs from {spec['model']}: {'; '.join(wrong)}")
    return config


def build_model(spec: dict, fabric):
    """`GPT(config)` under `fabric.init_module()` (the precision's default dtype: bf16 for
    bf16-true, fp32 for bf16-mixed), on meta at full size; LoRA marks only the adapters
    trainable (QLoRA: litgpt_qlora.py). litgpt's GPT never ties lm_head to wte (model.py `GPT.__init__`; for a tied
    HF checkpoint convert_hf_checkpoint.py copies the embedding into `lm_head.weight`)."""
    config = litgpt_config(spec)
    adapters = spec["method"] in ("lora", "qlora")
    if adapters:
        from litgpt.lora import GPT, mark_only_lora_as_trainable
    else:
        from litgpt.model import GPT
    with fabric.init_module(empty_init=False), torch.device("meta"):
        model = GPT(config)
    if spec["method"] == "qlora":
        quantize_layers(model)  # where _Linear4bit.__init__ quantizes on a GPU
    if adapters:
        mark_only_lora_as_trainable(model)
    return model
