"""Models at full size on the meta device, from a config.json folder, with PEFT's LoRA."""

from __future__ import annotations

import torch

from stacks.hf_tasks import task_of

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def transformers_at_least(release: str) -> bool:
    """Whether the environment's transformers is `release` or later (the driver follows
    the API each release has; what it allocates is the release's own code)."""
    from importlib.metadata import version

    from packaging.version import Version
    return Version(version("transformers")) >= Version(release)


def weight_dtype(precision: str) -> torch.dtype:
    """headroom's --precision: bf16 loads the weights in 16 bits; bf16-amp and fp16-amp
    (torch.autocast over fp32 weights) and fp32 load them in fp32."""
    return _DTYPES.get(precision, torch.float32)


def build_model(spec: dict):
    """The task's transformers Auto class (stacks/hf_tasks.py) over the config, its weights
    on meta, untrained; for QLoRA, quantized as from_pretrained(quantization_config=...) does."""
    import transformers
    from transformers import AutoConfig

    auto_class = getattr(transformers, task_of(spec).auto_class)

    config = AutoConfig.from_pretrained(spec["model"])
    config._attn_implementation = spec.get("attention", "sdpa")
    with torch.device("meta"):
        # `dtype` since transformers 4.56; `torch_dtype` before
        key = "dtype" if transformers_at_least("4.56") else "torch_dtype"
        model = auto_class.from_config(config, **{key: weight_dtype(spec["precision"])})
    if spec["method"] == "qlora":
        quantize_4bit(model, spec)
    if model.config.model_type == "qwen2_5_vl":
        vision_positions_on_meta()
    freeze_modules(model, spec.get("freeze", []))
    return model


def freeze_modules(model, patterns: list) -> None:
    """A full fine-tune with parts frozen (`freeze`: fnmatch patterns of parameter names,
    as the Qwen2.5-VL recipes freeze `model.visual.*`): requires_grad_(False) before the
    Trainer builds its optimizer, which then skips them."""
    import fnmatch
    for name, param in model.named_parameters():
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            param.requires_grad_(False)


def vision_positions_on_meta() -> None:
    """The one shim Qwen2.5-VL needs on meta: its vision tower derives the patches' (h, w)
    position ids, the windows and cu_seqlens from image_grid_thw's values
    (vision_utils.py, 5.23.0). The batch keeps image_grid_thw on the CPU, so those run on
    real numbers; the position ids then meet the meta inv_freq in the rotary embedding,
    so they are moved to meta (int64 [2, patches]: what a GPU run holds there)."""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as modeling
    original = getattr(modeling.get_vision_position_ids, "__wrapped__", modeling.get_vision_position_ids)

    def on_meta(*args, **kwargs):
        return original(*args, **kwargs).to("meta")

    on_meta.__wrapped__ = original
    modeling.get_vision_position_ids = on_meta


def quantize_4bit(model, spec: dict) -> None:
    """transformers' Bnb4BitHfQuantizer on a meta model: its own module replacement
    (replace_with_bnb_linear, skipping what get_modules_to_not_convert names), then
    bitsandbytes' Params4bit._quantize, whose quantize_4bit runs its registered fake
    kernel on meta: packed codes, absmax and, with double quantization, the nested
    state, at their real sizes. Loading the checkpoint is the only step left out."""
    from bitsandbytes.nn import Params4bit
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.auto import AutoHfQuantizer

    config = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=spec.get("double_quant", True),
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_quant_storage=_DTYPES.get(spec.get("quant_storage", ""), torch.uint8))
    quantizer = AutoHfQuantizer.from_config(config, pre_quantized=False)
    quantizer._process_model_before_weight_loading(model, device_map=None)
    dtype = weight_dtype(spec["precision"])
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, Params4bit) and not weight.bnb_quantized:
            # Loading puts the checkpoint's 16-bit weight into the Params4bit before it is
            # quantized, so QuantState.dtype (what dequantize_4bit returns) is that dtype;
            # Linear4bit's own placeholder is fp32.
            weight.data = weight.data.to(dtype)
            weight._quantize("meta")
    quantizer._process_model_after_weight_loading(model)
    model.hf_quantizer = quantizer
    if spec.get("kbit_prep", "none") == "peft":
        from peft import prepare_model_for_kbit_training
        prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=spec.get("checkpointing", "none") != "none")


def add_lora(model, spec: dict):  # noqa: D103 - LoRA and QLoRA alike
    """PEFT's get_peft_model, as the PEFT docs and TRL's SFT scripts call it, with the
    task's task_type and modules_to_save (stacks/hf_tasks.py)."""
    from peft import LoraConfig, get_peft_model

    task = task_of(spec)
    # PEFT's shorthand is a string; a list holding it would name a module "all-linear".
    targets = "all-linear" if spec["lora_targets"] == ["all-linear"] else spec["lora_targets"]
    lora = LoraConfig(r=spec.get("lora_rank", 16), lora_alpha=2 * spec.get("lora_rank", 16),
                      target_modules=targets, lora_dropout=spec.get("lora_dropout", 0.05),
                      task_type=task.peft_task_type, modules_to_save=list(task.modules_to_save) or None,
                      use_dora=spec.get("use_dora", False))
    if spec.get("use_dora", False) and spec["method"] == "qlora":
        from bnb_shims import params4bit_deepcopy_on_meta
        with params4bit_deepcopy_on_meta():
            return get_peft_model(model, lora)
    return get_peft_model(model, lora)
