"""diffusers' SD3 LoRA step on a tiny SD3Transformer2DModel (label oracle).

The oracle's own numbers held to hand counts: the script's eight attention targets give
an ordinary block 8 square linears with adapters and the last (context_pre_only) block 7
(it has no `to_add_out`); attn2 of a dual-attention block is not a target (PEFT matches
`attn.to_q`, not `attn2.to_q`); each adapter r x (in + out) in the base layer's bf16;
foreach AdamW keeps two bf16 moments per adapter weight; the batch is the latents (16
channels at res/8), the prompt embeddings (77 CLIP + the T5 length) and the pooled pair.
headroom's prediction of the same runs is printed, not asserted.
"""

import os
import sys
import unittest

from diffusers_lora_checks import DiffusersLoraChecks

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ.get("HEADROOM")
CONFIG = {"_class_name": "SD3Transformer2DModel", "attention_head_dim": 16, "caption_projection_dim": 32,
          "dual_attention_layers": [0], "in_channels": 16, "joint_attention_dim": 48, "num_attention_heads": 2,
          "num_layers": 2, "out_channels": 16, "patch_size": 2, "pooled_projection_dim": 24,
          "pos_embed_max_size": 16, "qk_norm": "rms_norm", "sample_size": 16}
BASE = {"stack": "diffusers-sd3", "env": "df", "method": "lora", "resolution": 64, "batch": 2,
        "max_sequence_length": 8, "steps": 2}


def adapter_elements(rank):
    h = CONFIG["attention_head_dim"] * CONFIG["num_attention_heads"]
    return (8 + 7) * rank * (h + h)


def batch_bytes(spec):
    side = spec["resolution"] // 8
    t = 77 + spec["max_sequence_length"]
    latents = spec["batch"] * CONFIG["in_channels"] * side * side
    embeds = spec["batch"] * (t * CONFIG["joint_attention_dim"] + CONFIG["pooled_projection_dim"])
    return 2 * (latents + embeds)


class DiffusersSd3TinyTest(DiffusersLoraChecks, unittest.TestCase):
    CONFIG, BASE, PYTHON, HEADROOM = CONFIG, BASE, PYTHON, HEADROOM
    adapter_elements = staticmethod(adapter_elements)
    batch_bytes = staticmethod(batch_bytes)


if __name__ == "__main__":
    unittest.main()
