"""A torchtune run of the grid as its recipe config: what the oracle's recipe runs
and what headroom reads (`fit --torchtune FILE.yaml`), from one function.

Pure Python (no torch, no torchtune): compare.py's flags.py imports it under the
system interpreter. The keys and defaults are those of torchtune 0.6.1's shipped
single-device configs (recipes/configs/llama3_2/1B_lora_single_device.yaml,
qwen2_5/0.5B_full_single_device.yaml): `torch.optim.AdamW` with `fused: True`,
`CEWithChunkedOutputLoss`, bf16, a cosine schedule for LoRA. The oracle replaces
the device, the checkpoint, the tokenizer and the dataset (stacks/torchtune.py).
"""

from __future__ import annotations

# spec "loss" -> the recipe's loss component (torchtune/modules/loss/, torch.nn)
LOSSES = {"chunked": "torchtune.modules.loss.CEWithChunkedOutputLoss",
          "full": "torch.nn.CrossEntropyLoss"}


def recipe_name(spec: dict) -> str:
    """The single-device recipe that runs the spec (torchtune's recipes/*.py)."""
    return "full_finetune_single_device" if spec["method"] == "full" else "lora_finetune_single_device"


def model_component(spec: dict) -> dict:
    """model: the builder, its lora_ variant for LoRA (same module), and its arguments."""
    module, name = spec["builder"].rsplit(".", 1)
    model = {"_component_": f"{module}.lora_{name}" if spec["method"] == "lora" else spec["builder"]}
    model.update(spec.get("builder_args", {}))
    if spec["method"] == "lora":
        rank = spec.get("lora_rank", 16)
        model.update({"lora_attn_modules": list(spec["lora_targets"]),
                      "apply_lora_to_mlp": spec.get("lora_mlp", False),
                      "apply_lora_to_output": False,
                      "lora_rank": rank, "lora_alpha": 2 * rank,
                      "lora_dropout": spec.get("lora_dropout", 0.0)})
    return model


def recipe_config(spec: dict) -> dict:
    """The recipe config of the run, as a user writes it (YAML keys, in file order)."""
    if spec["method"] not in ("full", "lora"):
        # QLoRA: FrozenNF4Linear swaps its weight for the NF4 one with torch.utils.swap_tensors,
        # which refuses a tensor the recorder watches through a weak reference (README)
        raise ValueError(f"torchtune stack: method {spec['method']!r}: expected full or lora")
    if spec.get("precision", "bf16") != "bf16":
        # fp32 would run torch's fused RMSNorm on CUDA (weight and input dtypes agree),
        # the composite on meta: no shim for it yet (README)
        raise ValueError(f"torchtune stack: precision {spec['precision']!r}: expected bf16")
    optimizer = spec.get("optimizer", "fused")  # headroom's --optimizer-impl names
    if optimizer not in ("fused", "foreach", "in-backward") or (optimizer == "in-backward" and spec["method"] != "full"):
        raise ValueError(f"torchtune stack: optimizer {optimizer!r}: expected fused, foreach, or in-backward "
                         "(the full recipe's optimizer_in_bwd)")
    loss = {"_component_": LOSSES[spec.get("loss", "chunked")]}
    if spec.get("loss", "chunked") == "chunked":
        loss["num_output_chunks"] = spec.get("num_output_chunks", 8)
    config = {
        "output_dir": "/tmp/torchtune/oracle",
        "model": model_component(spec),
        # null as in the shipped configs: the length comes from the data (here --seq)
        "tokenizer": {"max_seq_len": None},
        "dataset": {"packed": False},
        "seed": 0, "shuffle": True,
        "resume_from_checkpoint": False,
        "batch_size": spec["batch"],
        "epochs": 1,
        # fused: False leaves torch to pick foreach on CUDA (optimizer.py _default_to_fused_or_foreach)
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": 2e-5, "fused": optimizer != "foreach"},
    }
    if spec["method"] == "lora":
        config["lr_scheduler"] = {
            "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
            "num_warmup_steps": 100}
    config.update({
        "loss": loss,
        "max_steps_per_epoch": spec.get("steps", 2),
        "gradient_accumulation_steps": 1,
        "clip_grad_norm": spec.get("clip_grad_norm"),
        "compile": False,
        "device": "cuda",
        "dtype": "bf16",
        "enable_activation_checkpointing": spec.get("checkpointing", "none") != "none",
        "enable_activation_offloading": bool(spec.get("offload", False)),
    })
    if spec["method"] == "full":
        config["optimizer_in_bwd"] = optimizer == "in-backward"
    else:
        config["save_adapter_weights_only"] = False
    return config


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        text = repr(value)  # PyYAML's YAML 1.1 reads 2e-05 as a string: give it a dot
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    if isinstance(value, int):
        return repr(value)
    text = str(value)
    return text if text.replace("_", "").replace(".", "").replace("/", "").isalnum() else f"'{text}'"


def to_yaml(config: dict, indent: int = 0) -> str:
    """Block-style YAML of mappings, lists of scalars and scalars (what torchtune's configs use)."""
    lines = []
    pad = " " * indent
    for key, value in config.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.append(to_yaml(value, indent + 2))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: [{', '.join(_scalar(v) for v in value)}]")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return "\n".join(lines)
