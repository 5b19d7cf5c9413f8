"""QLoRA under the Trainer with bitsandbytes 0.43.1 on a tiny Llama (label oracle).

bitsandbytes before 0.46 has no fake kernels: bench/oracle/bnb_shims.py runs it on meta.
Each 4-bit linear of 0.43.1 keeps its input for backward (MatMul4Bit's ctx.tensors), through
non-reentrant checkpointing too; headroom, given the release as compare.py gives it
(`--versions ...,bitsandbytes=0.43.1`), must agree (docs/stacks.md, "Releases").
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
BASE = {"stack": "hf-trainer", "model": "tests/data/oracle/tiny-llama", "lora_targets": ["q_proj", "v_proj"],
        "method": "qlora", "precision": "bf16", "batch": 2, "seq": 256, "steps": 2}


class OldBitsandbytesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BASE, name="qlora", kbit_prep="none"),
                 dict(BASE, name="qlora-ckpt", kbit_prep="none", checkpointing="non-reentrant"),
                 dict(BASE, name="qlora-peft", kbit_prep="peft")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran_under_the_old_release(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")
            self.assertEqual(row["versions"]["bitsandbytes"], "0.43.1", name)
            self.assertIn("bitsandbytes=0.43.1", row["command"], name)

    def test_headroom_agrees_within_the_issue_target(self):
        for name, row in self.rows.items():
            print(f"{name}: oracle {row['oracle_bytes']} headroom {row['predicted_bytes']} "
                  f"({row['error_pct']:+.2f}%)", file=sys.stderr)
            self.assertLess(abs(row["error_pct"]), 2.0, name)


if __name__ == "__main__":
    unittest.main()
