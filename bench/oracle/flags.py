"""A run of the oracle as a user would give it to headroom: `fit` flags."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# transformers' `optim` names -> how optimizer.step() runs (torch/optim/adamw.py)
_OPTIMIZER_IMPL = {"adamw_torch_fused": "fused", "adamw_torch": "foreach"}


def model_path(spec: dict) -> str:
    return spec["model"] if os.path.isabs(spec["model"]) else os.path.join(ROOT, spec["model"])


def _release(text: str) -> tuple:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def headroom_flags(spec: dict) -> list:
    if "world_size" in spec:
        return sharded_flags(spec)
    flags = [model_path(spec), "--gpu", spec.get("gpu", "h200"), "--stack", spec["stack"],
             "--precision", spec["precision"], "--batch", str(spec["batch"]),
             "--seq", str(spec["seq"])]
    if spec["method"] in ("lora", "qlora"):
        flags += ["--mode", spec["method"], "--lora-rank", str(spec.get("lora_rank", 16)),
                  "--lora-targets", ",".join(spec["lora_targets"]),
                  "--lora-dropout", str(spec.get("lora_dropout", 0.05))]
    else:
        flags += ["--mode", "full"]
    if spec["method"] == "qlora":
        flags += ["--kbit-prep", spec.get("kbit_prep", "none")]
        if not spec.get("double_quant", True):
            flags.append("--no-double-quant")
    if spec.get("checkpointing", "none") != "none":
        flags += ["--checkpointing", "every"]
    if "optim" in spec:
        flags += ["--optimizer-impl", _OPTIMIZER_IMPL[spec["optim"]]]
    transformers = spec.get("versions", {}).get("transformers")
    if spec["stack"] == "hf-trainer" and transformers and _release(transformers) < (4, 49):
        flags += ["--loss", "upcast-shift"]  # docs/stacks.md, "The loss"
    if spec.get("attention", "sdpa") != "sdpa":
        flags += ["--attention", spec["attention"]]
    return flags


# -- sharded runs (stacks/fsdp2.py; hf-trainer with `sharding`) -------------------
# The plain fully_shard loop is no stack headroom names (torchtitan's keeps its last
# layer unsharded, torchtune's loss is chunked), so it is `unspecified` with each
# mechanism the loop pins given: torch.optim.AdamW as `optim` says, transformers'
# loss with the outputs dropped before backward, PEFT's fp32 adapters, no autocast.
_SHARDED_STACK = {"fsdp2": "unspecified", "hf-trainer": "hf-trainer"}


def sharded_flags(spec: dict) -> list:
    """`--gpus N --zero 3 --sharding fsdp2|fsdp1` and what the stack pins. FSDP2's
    reshard_after_forward False is ZeRO-2's layout, as headroom reads it from an
    accelerate or torchtune config (docs/config-import.md)."""
    one = {k: v for k, v in spec.items() if k != "world_size"}
    one["stack"] = _SHARDED_STACK[spec["stack"]]
    flags = headroom_flags(one)
    zero = "3" if spec.get("reshard_after_forward", True) else "2"
    flags += ["--gpus", str(spec["world_size"]), "--zero", zero,
              "--sharding", spec.get("sharding", "fsdp2")]
    if spec["stack"] == "fsdp2":
        flags += ["--loss", "full", "--adapter-dtype", "fp32",
                  "--reduce-dtype", "fp32" if spec["precision"] == "bf16-mixed" else "param"]
        if zero == "3" or spec["precision"] == "bf16":  # where headroom has autocast to pin
            flags += ["--autocast", "off"]
    return flags
