"""TRL's RewardTrainer step on a tiny Llama, through the whole oracle (label oracle).

run_oracle.py under the pinned environment (env trl, TRL 1.16.0, stacks/trl_reward.py)
beside headroom's `fit --json` given as a TRL user gives it (`--stack hf-trainer
--recipe reward`, with LoRA `--train score`, bench/oracle/flags.py). Checks: the model's
batch is 2 x `batch` rows, nothing the step keeps has the vocabulary's width (a one-value
score head, no LM head), and headroom agrees within 2%.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
BATCH, SEQ, VOCAB = 2, 256, 8192  # pairs of tiny-llama's rows (4 layers, vocabulary 8192)
BASE = {"stack": "trl-reward", "model": "tests/data/oracle/tiny-llama", "lora_targets": ["q_proj", "v_proj"],
        "precision": "bf16", "batch": BATCH, "seq": SEQ, "steps": 2}


class TinyRewardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BASE, name="lora", method="lora"),
                 dict(BASE, name="lora-ckpt", method="lora", checkpointing="non-reentrant"),
                 dict(BASE, name="full", method="full")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_chosen_and_rejected_in_one_batch(self):
        shapes = [g["shape"] for g in self.rows["lora"]["live_at_peak"]]
        self.assertTrue(any(s.startswith(f"({2 * BATCH}, {SEQ},") for s in shapes), shapes)

    def test_no_vocabulary_wide_activation(self):
        for name, row in self.rows.items():
            for group in row["live_at_peak"]:
                if group["category"] in ("parameters", "gradients", "optimizer_states"):
                    continue  # the input embedding and its states are vocabulary-sized
                self.assertNotIn(f", {VOCAB})", group["shape"], f"{name}: {group}")

    def test_headroom_agrees_within_the_issue_target(self):
        for name, row in self.rows.items():
            self.assertLess(abs(row["error_pct"]), 2.0, f"{name}: {row['error_pct']:+.2f}%")


if __name__ == "__main__":
    unittest.main()
