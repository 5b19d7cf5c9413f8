"""diffusers' Flux LoRA step on a tiny FluxTransformer2DModel (label oracle).

The oracle's own numbers held to hand counts: the script's twelve target modules
give a double block 8 square attention linears and 4 feed-forward linears (h <-> 4h)
with adapters, a single block its 3 square q/k/v (a single block has no `to_out`,
`ff` or `ff_context`), each adapter r x (in + out); PEFT leaves them in the base
layer's bf16 under diffusers' `add_adapter`; torch's foreach AdamW keeps two bf16
moments per adapter weight (its `step` counters are CPU tensors); the batch is the
latents, the T5 and CLIP embeddings and the text ids. headroom's prediction of the same
runs is printed, not asserted: at this size it is not within 2% (bench/oracle/README.md).
"""

import os
import sys
import unittest

from diffusers_lora_checks import DiffusersLoraChecks

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ.get("HEADROOM")
# axes_dims_rope must sum to the head dimension (FluxPosEmbed)
CONFIG = {"_class_name": "FluxTransformer2DModel", "attention_head_dim": 16, "axes_dims_rope": [4, 6, 6],
          "guidance_embeds": True, "in_channels": 64, "joint_attention_dim": 32, "num_attention_heads": 2,
          "num_layers": 1, "num_single_layers": 2, "patch_size": 1, "pooled_projection_dim": 16}
BASE = {"stack": "diffusers-flux", "env": "df", "method": "lora", "resolution": 64, "batch": 2,
        "max_sequence_length": 32, "steps": 2}


def adapter_elements(rank):
    h = CONFIG["attention_head_dim"] * CONFIG["num_attention_heads"]
    double = 8 * rank * (h + h) + 4 * rank * (h + 4 * h)
    single = 3 * rank * (h + h)
    return CONFIG["num_layers"] * double + CONFIG["num_single_layers"] * single


def batch_bytes(spec):
    side = spec["resolution"] // 8  # the FLUX.1 VAE's 8x downsampling
    t = spec["max_sequence_length"]
    latents = spec["batch"] * CONFIG["in_channels"] // 4 * side * side
    embeds = spec["batch"] * (t * CONFIG["joint_attention_dim"] + CONFIG["pooled_projection_dim"])
    return 2 * (latents + embeds + t * 3)


class DiffusersFluxTinyTest(DiffusersLoraChecks, unittest.TestCase):
    CONFIG, BASE, PYTHON, HEADROOM = CONFIG, BASE, PYTHON, HEADROOM
    adapter_elements = staticmethod(adapter_elements)
    batch_bytes = staticmethod(batch_bytes)


if __name__ == "__main__":
    unittest.main()
