"""litgpt's QLoRA (`finetune/lora.py --quantize bnb.nf4`) on meta: Fabric's BitsandbytesPrecision.

What runs is Lightning's and bitsandbytes' own code: the plugin's `module_init_context`
replaces `torch.nn.Linear` by its `_NF4Linear` (every linear of the model, lm_head included,
the LoRA layers' frozen `linear` too), `quantize_` runs bitsandbytes' `quantize_4bit` (whose
registered fake kernel gives the packed codes and absmax at their sizes on meta), the forward
is `bnb.matmul_4bit`, the optimizer `instantiate_bnb_optimizer` (bitsandbytes' PagedAdamW), and
lora.py's swap of `transformer.wte` for bitsandbytes' `StableEmbedding` after the optimizer is made.
Replaced, and why (lightning 2.6.6 `fabric/plugins/precision/bitsandbytes.py`):
- the plugin's CUDA checks: `_Connector._check_and_init_precision` refuses it without a
  CUDA accelerator, and `_Linear4bit.quantize` raises for a device other than CUDA. The
  quantization is the same call on meta;
- when it runs: `_Linear4bit.__init__` quantizes at once under a CUDA device; made under meta
  it does not, so every layer is quantized right after `GPT(config)` (before the step either way);
- placement: lora.py makes the StableEmbedding on the CPU in fp32, copies the weight and moves
  it to the device in the model's dtype; here it is made on meta (the step sees the moved one).
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

import torch

from patching import patched

# finetune/lora.py setup's `quantize` -> BitsandbytesPrecision's mode (`quantize[4:]`)
QUANTIZE = "bnb.nf4"


@contextlib.contextmanager
def bnb_on_meta() -> Iterator[None]:
    """The plugin's two CUDA checks lifted (module docstring)."""
    import lightning.fabric.connector as connector
    import lightning.fabric.plugins.precision.bitsandbytes as plugin
    from lightning.fabric.accelerators import CPUAccelerator

    plugin._import_bitsandbytes()  # defines _Linear4bit
    with patched(connector, "CUDAAccelerator", CPUAccelerator), \
            patched(plugin._Linear4bit, "quantize", staticmethod(_quantize_on_meta)):
        yield


def _quantize_on_meta(params4bit, weight: torch.Tensor, device):
    """`_Linear4bit.quantize` without its device check: the same `quantize_4bit` call."""
    import bitsandbytes as bnb
    import lightning.fabric.plugins.precision.bitsandbytes as plugin

    w = weight.contiguous().to(dtype=torch.half)
    w_4bit, quant_state = bnb.functional.quantize_4bit(
        w, blocksize=params4bit.blocksize, compress_statistics=params4bit.compress_statistics,
        quant_type=params4bit.quant_type, quant_storage=params4bit.quant_storage)
    return plugin._replace_param(params4bit, w_4bit, quant_state)


def precision_plugin():
    """lora.py setup: `BitsandbytesPrecision(quantize[4:], dtype)` with bf16-true's dtype."""
    from lightning.fabric.plugins import BitsandbytesPrecision
    return BitsandbytesPrecision(QUANTIZE[4:], torch.bfloat16)


def quantize_layers(model) -> None:
    """What `_Linear4bit.__init__` does on a CUDA device: `quantize_()` every 4-bit layer."""
    import lightning.fabric.plugins.precision.bitsandbytes as plugin
    for module in model.modules():
        if isinstance(module, plugin._Linear4bit):
            module.quantize_(device=torch.device("meta"))
    # the 16-bit weights replaced here can sit in reference cycles until Python's next
    # collection (on a GPU long before the step): collected now, the step starts from what is live
    gc.collect()


def optimizer_and_embedding(model):
    """lora.py main under BitsandbytesPrecision: the optimizer over `model.parameters()`,
    then `transformer.wte` becomes a StableEmbedding the optimizer does not hold (its weight
    trains: a new Parameter, made after mark_only_lora_as_trainable)."""
    from bitsandbytes.nn import StableEmbedding
    from litgpt.utils import instantiate_bnb_optimizer

    optimizer = instantiate_bnb_optimizer("AdamW", model.parameters())
    old_embedding = model.transformer.wte
    with torch.device("meta"):  # lora.py: on the CPU, moved below
        model.transformer.wte = StableEmbedding(old_embedding.num_embeddings, old_embedding.embedding_dim)
    with torch.no_grad():
        model.transformer.wte.weight.copy_(old_embedding.weight)
    model.transformer.wte = model.transformer.wte.to(
        device=old_embedding.weight.device, dtype=old_embedding.weight.dtype)
    return optimizer
