"""TRL's SFTTrainer step on a tiny Llama, through the whole oracle (label oracle).

run_oracle.py under the pinned environment (env trl, TRL 1.16.0) beside headroom's
`fit --json` given as a TRL user gives it (`--stack hf-trainer --versions ...,trl=X`,
bench/oracle/flags.py). Checks: no tensor of the logits' size is ever live, the fused
LM head scores its tokens through a [tokens x 32768] tile even at a vocabulary of
8192, and headroom agrees within 2%.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
# tiny-llama: 4 layers, vocabulary 8192
BATCH, SEQ, VOCAB = 2, 256, 8192
BASE = {"stack": "trl-sft", "model": "tests/data/oracle/tiny-llama", "lora_targets": ["q_proj", "v_proj"],
        "method": "lora", "precision": "bf16", "batch": BATCH, "seq": SEQ, "steps": 2}


class TinySftTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BASE, name="lora"), dict(BASE, name="lora-ckpt", checkpointing="non-reentrant")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_no_logits_live(self):
        tokens = BATCH * (SEQ - 1)  # the positions with a next-token label
        for name, row in self.rows.items():
            for group in row["live_at_peak"]:
                self.assertNotIn(f"{VOCAB})", group["shape"], f"{name}: {group}")
        shapes = [g["shape"] for g in self.rows["lora"]["live_at_peak"]]
        # the tile buffer is chunk_size (32768) wide whatever the vocabulary
        self.assertIn(f"({tokens}, 32768) bfloat16", shapes)

    def test_headroom_agrees_within_the_issue_target(self):
        for name, row in self.rows.items():
            self.assertLess(abs(row["error_pct"]), 2.0, f"{name}: {row['error_pct']:+.2f}%")


if __name__ == "__main__":
    unittest.main()
