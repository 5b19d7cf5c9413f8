"""The Trainer's bitsandbytes optimizers on a tiny Llama (label oracle).

`optim="adamw_bnb_8bit"` and `"paged_adamw_8bit"` built by Trainer.create_optimizer, with its
32-bit override of the embedding, stepped by bitsandbytes 0.50.2 on meta
(bench/oracle/bnb_optimizer_shims.py); headroom given `--optimizer adamw-8bit
[--paged-optimizer]` must agree on the peak and on the optimizer states, the paged ones
(unified memory, outside the peak) included (docs/memory-model.md, "Optimizer states").
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import category_agrees, compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
BASE = {"stack": "hf-trainer", "model": "tests/data/oracle/tiny-llama", "method": "full",
        "precision": "bf16", "batch": 2, "seq": 256, "steps": 2}
EMBEDDING = "(8192, 256) float32"  # the tiny Llama's embed_tokens, fp32 states under the override


class BitsandbytesOptimizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BASE, name="8bit", optim="adamw_bnb_8bit"),
                 dict(BASE, name="paged-8bit", optim="paged_adamw_8bit")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")
            self.assertIn("--optimizer", row["command"], name)

    def test_the_trainer_keeps_the_embedding_states_in_fp32(self):
        live = self.rows["8bit"]["live_at_peak"]
        states = [g for g in live if g["category"] == "optimizer_states" and g["shape"] == EMBEDDING]
        self.assertEqual(sum(g["count"] for g in states), 2, live)

    def test_headroom_agrees_on_the_peak_and_the_states(self):
        for name, row in self.rows.items():
            print(f"{name}: oracle {row['oracle_bytes']} headroom {row['predicted_bytes']} "
                  f"({row['error_pct']:+.2f}%), states {row['oracle_at_peak']['optimizer_states']} / "
                  f"{row['predicted_at_peak']['optimizer_states']}", file=sys.stderr)
            self.assertLess(abs(row["error_pct"]), 2.0, name)
            self.assertTrue(category_agrees(row, "optimizer_states"), name)


if __name__ == "__main__":
    unittest.main()
