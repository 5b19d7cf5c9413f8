"""diffusers' SDXL LoRA step on a tiny UNet2DConditionModel (label oracle).

The oracle's own numbers held to hand counts: train_text_to_image_lora_sdxl.py's four targets
(to_q, to_k, to_v, to_out.0) match attn1 and attn2 of every BasicTransformerBlock; the tiny
UNet has 8 of them at 64 channels (2 in the cross-attention down block, 2 in the mid block, 2 x 2
in the cross-attention up block), whose attn2 reads the 48-wide text: per block
r x (4 x 128) + r x (128 + 112 + 112 + 128) adapter elements, in the base layer's bf16; foreach
AdamW keeps two bf16 moments per adapter weight; the batch is the latents (4 channels at res/8),
the 77-token prompt embeddings and the pooled text embedding.
headroom's prediction of the same runs is printed, not asserted.
"""

import json
import os
import sys
import unittest

from diffusers_lora_checks import DiffusersLoraChecks

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ.get("HEADROOM")
with open(os.path.join(ROOT, "tests", "data", "hf", "tiny-sdxl-unet", "config.json")) as f:
    CONFIG = json.load(f)
BASE = {"stack": "diffusers-sdxl", "env": "df", "method": "lora", "resolution": 64, "batch": 2, "steps": 2}


def adapter_elements(rank):
    blocks, width, text = 8, 64, 48
    return blocks * rank * (4 * 2 * width + 2 * 2 * width + 2 * (text + width))


def batch_bytes(spec):
    side = spec["resolution"] // 8
    text = CONFIG["projection_class_embeddings_input_dim"] - 6 * CONFIG["addition_time_embed_dim"]
    latents = spec["batch"] * CONFIG["in_channels"] * side * side
    embeds = spec["batch"] * (77 * CONFIG["cross_attention_dim"] + text)
    return 2 * (latents + embeds)


class DiffusersSdxlTinyTest(DiffusersLoraChecks, unittest.TestCase):
    CONFIG, BASE, PYTHON, HEADROOM = CONFIG, BASE, PYTHON, HEADROOM
    adapter_elements = staticmethod(adapter_elements)
    batch_bytes = staticmethod(batch_bytes)


if __name__ == "__main__":
    unittest.main()
