"""Models at full size on the meta device, from a config.json folder, with PEFT's LoRA."""

from __future__ import annotations

import torch

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def weight_dtype(precision: str) -> torch.dtype:
    """headroom's --precision: bf16 loads the weights in 16 bits; bf16-amp and fp16-amp
    (torch.autocast over fp32 weights) and fp32 load them in fp32."""
    return _DTYPES.get(precision, torch.float32)


def build_model(spec: dict):
    """The transformers model class the config names, its weights on meta, untrained."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(spec["model"])
    config._attn_implementation = spec.get("attention", "sdpa")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=weight_dtype(spec["precision"]))
    return model


def add_lora(model, spec: dict):
    """PEFT's get_peft_model, as the PEFT docs and TRL's SFT scripts call it."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=spec.get("lora_rank", 16), lora_alpha=2 * spec.get("lora_rank", 16),
                      target_modules=spec["lora_targets"], lora_dropout=spec.get("lora_dropout", 0.05),
                      task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def causal_lm_batch(spec: dict) -> dict:
    """An unpadded batch of full-length samples, as a packing or fixed-length collator gives."""
    ids = torch.empty(spec["batch"], spec["seq"], dtype=torch.long, device="meta")
    return {"input_ids": ids, "labels": ids.clone()}
