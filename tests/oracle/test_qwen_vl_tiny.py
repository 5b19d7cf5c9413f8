"""The Trainer's real step on Qwen2.5-VL (label oracle): AutoModelForImageTextToText with
pixel_values and image_grid_thw (bench/oracle/stacks/hf_tasks.py `image-text-to-text`), on
tests/data/hf/qwen2.5-vl-7b-2l (the 7B's widths, 2 LM layers, 4 vision blocks), through the
whole oracle and the one shim its vision tower needs on meta (stacks/hf_models.py
vision_positions_on_meta): LoRA on the LM's attention trains the adapters only, and headroom
agrees within the ground-truth issue's 2% with the tower frozen under checkpointing (the
input-grad hook on patch_embed) and trained in full.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
# LoRA r 16 on q_proj (3584 -> 3584), k_proj and v_proj (3584 -> 512), o_proj, 2 layers, fp32 (PEFT)
ADAPTER_ELEMENTS = 2 * 16 * ((3584 + 3584) * 2 + (3584 + 512) * 2)
ADAPTER_TENSORS = 2 * 4 * 2
QWEN_VL = {"stack": "hf-trainer", "task": "image-text-to-text", "model": "tests/data/hf/qwen2.5-vl-7b-2l",
           "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj"], "precision": "bf16", "batch": 1,
           "seq": 512, "image_size": 448, "steps": 2}


class QwenVlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(QWEN_VL, name="lora-ckpt", method="lora", checkpointing="non-reentrant"),
                 dict(QWEN_VL, name="full", method="full")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_lora_trains_the_adapters_only(self):
        # fused AdamW: exp_avg and exp_avg_sq of each adapter in fp32, a float32 step each
        states = self.rows["lora-ckpt"]["oracle_at_peak"]["optimizer_states"]
        self.assertEqual(states, 2 * 4 * ADAPTER_ELEMENTS + 4 * ADAPTER_TENSORS)

    def test_headroom_agrees_within_the_issue_target(self):
        for name, row in self.rows.items():
            self.assertLess(abs(row["error_pct"]), 2.0, name)


if __name__ == "__main__":
    unittest.main()
