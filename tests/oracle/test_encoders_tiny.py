"""The Trainer's real step on encoders (label oracle): BERT for sequence classification and
ViT for image classification (bench/oracle/stacks/hf_tasks.py), through the whole oracle.

Tiny models (tests/data/hf/tiny-bert, tiny-vit) for the oracle's own invariants: PEFT's
LoRA trains the adapters and the head (modules_to_save), checkpointing saves less; and
one run of each real model beside headroom, within the ground-truth issue's 2%.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
# LoRA r 16 on two [64 -> 64] linears a layer, 2 layers, fp32 (PEFT)
ADAPTER_BYTES = 4 * 2 * 2 * 16 * (64 + 64)
# the head PEFT trains in full, a bf16 copy (modules_to_save): Linear(64, labels)
BERT_HEAD_BYTES = 2 * (64 * 4 + 4)  # tiny-bert: 4 labels
VIT_HEAD_BYTES = 2 * (64 * 10 + 10)  # tiny-vit: 10 labels
TENSORS = 2 * 2 * 2 + 2  # adapters' A and B, the head's weight and bias
BERT = {"stack": "hf-trainer", "task": "sequence-classification", "model": "tests/data/hf/tiny-bert",
        "lora_targets": ["query", "value"], "precision": "bf16", "batch": 4, "seq": 64, "steps": 2}
# transformers 5 names ViT's attention linears q_proj, v_proj (flags.py gives headroom query, value)
VIT = {"stack": "hf-trainer", "task": "image-classification", "model": "tests/data/hf/tiny-vit",
       "lora_targets": ["q_proj", "v_proj"], "precision": "bf16", "batch": 8, "image_size": 32, "steps": 2}


class EncodersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BERT, name="bert-lora", method="lora"),
                 dict(VIT, name="vit-lora", method="lora"),
                 dict(VIT, name="vit-full", method="full"),
                 dict(VIT, name="vit-full-ckpt", method="full", checkpointing="non-reentrant"),
                 dict(BERT, name="bert-base", method="lora", model="tests/data/hf/bert-base-uncased",
                      batch=8, seq=128),
                 dict(VIT, name="vit-base", method="full", model="tests/data/hf/vit-base-patch16-224",
                      batch=32, image_size=224)]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_lora_trains_the_adapters_and_the_head(self):
        # fused AdamW: exp_avg and exp_avg_sq of each trainable tensor, a float32 step each
        for name, head in (("bert-lora", BERT_HEAD_BYTES), ("vit-lora", VIT_HEAD_BYTES)):
            states = self.rows[name]["oracle_at_peak"]["optimizer_states"]
            self.assertEqual(states, 2 * (ADAPTER_BYTES + head) + 4 * TENSORS, name)

    def test_checkpointing_saves_less(self):
        full, ckpt = self.rows["vit-full"], self.rows["vit-full-ckpt"]
        self.assertLess(ckpt["oracle_at_peak"]["activations"], full["oracle_at_peak"]["activations"])

    def test_headroom_agrees_within_the_issue_target(self):
        for name in ("bert-base", "vit-base"):
            self.assertLess(abs(self.rows[name]["error_pct"]), 2.0, name)


if __name__ == "__main__":
    unittest.main()
