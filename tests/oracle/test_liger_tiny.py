"""The Trainer's step with use_liger_kernel on a tiny Llama, through the whole oracle (label oracle).

run_oracle.py under the pinned environment (env liger: hf5's pins and liger-kernel 0.8.5,
bench/oracle/liger_shims.py) beside headroom's `fit --json` given as the Trainer's user gives
it (`--loss fused-linear-ce --liger-kernels on`, bench/oracle/flags.py liger_flags). Checks:
Liger's Functions ran (no logits of the vocabulary's width anywhere at the peak, no fp32 copy
of the hidden states kept: LigerRMSNormFunction keeps X and an fp32 rstd per row), and
headroom agrees within 2%.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
BATCH, SEQ, HIDDEN, VOCAB = 2, 256, 256, 8192  # tests/data/oracle/tiny-llama: 4 layers, untied
BASE = {"stack": "hf-trainer", "env": "liger", "liger": True, "model": "tests/data/oracle/tiny-llama",
        "lora_targets": ["q_proj", "v_proj"], "precision": "bf16", "batch": BATCH, "seq": SEQ, "steps": 2}


class TinyLigerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BASE, name="lora", method="lora"),
                 dict(BASE, name="full", method="full")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_no_logits_and_no_fp32_hidden_states_kept(self):
        for name, row in self.rows.items():
            for group in row["live_at_peak"]:
                if group["category"] in ("parameters", "gradients", "optimizer_states"):
                    continue  # lm_head and its states are vocabulary-sized
                self.assertFalse(group["shape"].startswith(f"({BATCH * SEQ}, {VOCAB})"), f"{name}: {group}")
                self.assertFalse(group["shape"].startswith(f"({BATCH}, {SEQ}, {VOCAB})"), f"{name}: {group}")
                if group["category"] == "saved_activations":
                    self.assertNotEqual(group["shape"], f"({BATCH}, {SEQ}, {HIDDEN}) float32", f"{name}: {group}")

    def test_headroom_agrees_within_the_issue_target(self):
        for name, row in self.rows.items():
            self.assertLess(abs(row["error_pct"]), 2.0, f"{name}: {row['error_pct']:+.2f}%")


if __name__ == "__main__":
    unittest.main()
