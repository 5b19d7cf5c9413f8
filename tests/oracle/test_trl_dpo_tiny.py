"""TRL's DPOTrainer step on a tiny Llama, through the whole oracle (label oracle).

run_oracle.py under the pinned environment (env trl, TRL 1.16.0, stacks/trl_dpo.py)
beside headroom's `fit --json` given as a TRL user gives it (`--stack hf-trainer
--recipe dpo --reference REF --versions ...,trl=X`, bench/oracle/flags.py). Checks: the
policy's batch is 2 x `batch` rows, a frozen copy adds exactly the model's weights to
what precomputed log-probs need, and headroom agrees within 2% for each reference.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
BATCH, SEQ = 2, 256  # pairs of tiny-llama's rows (4 layers, vocabulary 8192)
BASE = {"stack": "trl-dpo", "model": "tests/data/oracle/tiny-llama", "lora_targets": ["q_proj", "v_proj"],
        "precision": "bf16", "batch": BATCH, "seq": SEQ, "steps": 2}


class TinyDpoTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BASE, name="lora", method="lora", ref="adapter-disabled"),
                 dict(BASE, name="lora-ckpt", method="lora", ref="adapter-disabled", checkpointing="non-reentrant"),
                 dict(BASE, name="full-copy", method="full", ref="copy"),
                 dict(BASE, name="full-precomputed", method="full", ref="precomputed")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_chosen_and_rejected_in_one_batch(self):
        shapes = [g["shape"] for g in self.rows["lora"]["live_at_peak"]]
        self.assertTrue(any(s.startswith(f"({2 * BATCH}, {SEQ},") for s in shapes), shapes)

    def test_the_copy_adds_its_weights(self):
        copy, precomputed = self.rows["full-copy"], self.rows["full-precomputed"]
        weights = precomputed["oracle_at_peak"]["parameters"]
        self.assertEqual(copy["oracle_at_peak"]["parameters"], 2 * weights)
        self.assertEqual(copy["predicted_at_peak"]["parameters"] - precomputed["predicted_at_peak"]["parameters"],
                         copy["predicted_at_peak"]["parameters"] // 2)

    def test_headroom_agrees_within_the_issue_target(self):
        for name, row in self.rows.items():
            self.assertLess(abs(row["error_pct"]), 2.0, f"{name}: {row['error_pct']:+.2f}%")


if __name__ == "__main__":
    unittest.main()
