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

import json
import os
import sys
import tempfile
import unittest

from oracle_runs import report_headroom_figures, run_oracle

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


class DiffusersFluxTinyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        with open(os.path.join(cls.folder.name, "config.json"), "w") as f:
            json.dump(CONFIG, f)
        base = dict(BASE, model=cls.folder.name)
        cls.specs = {"r4": dict(base, lora_rank=4), "r8": dict(base, lora_rank=8),
                     "r4-ckpt": dict(base, lora_rank=4, checkpointing="non-reentrant")}
        cls.results = dict(zip(cls.specs, run_oracle(PYTHON, list(cls.specs.values()))))

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def test_every_run_ran(self):
        for name, result in self.results.items():
            self.assertNotIn("error", result, f"{name}: {result.get('error')}")

    def test_adapters_are_the_script_targets_in_bf16(self):
        for name, rank in (("r4", 4), ("r8", 8)):
            resolved = self.results[name]["resolved"]
            self.assertEqual(resolved["trainable"], adapter_elements(rank), name)
            self.assertEqual(resolved["adapter_dtype"], "bfloat16", name)

    def test_foreach_adamw_keeps_two_bf16_moments(self):
        for name, rank in (("r4", 4), ("r8", 8)):
            at_peak = self.results[name]["at_peak"]
            self.assertEqual(at_peak["optimizer_states"], 2 * 2 * adapter_elements(rank), name)

    def test_the_batch_is_latents_and_embeddings(self):
        for name, spec in self.specs.items():
            self.assertEqual(self.results[name]["at_peak"]["inputs"], batch_bytes(spec), name)

    def test_checkpointing_keeps_less(self):
        kept = self.results["r4"]["at_peak"]["saved_activations"]
        checkpointed = self.results["r4-ckpt"]["at_peak"]["saved_activations"]
        self.assertLess(checkpointed, kept)

    def test_headroom_figure_is_reported(self):
        if not HEADROOM:
            self.skipTest("no headroom binary given")
        report_headroom_figures(self, self.results, HEADROOM)


if __name__ == "__main__":
    unittest.main()
