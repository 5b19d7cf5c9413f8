"""torchvision's ResNet-50 in a plain loop through the whole oracle (label oracle;
bench/oracle/stacks/torch_loop.py, env vision): BatchNorm in train mode, SGD with
momentum and AdamW, fp32 and bf16 autocast, beside headroom's zoo `resnet-50`.

Hand-counted: SGD keeps one momentum buffer a parameter, foreach AdamW two (its step
counters stay on the host), both in fp32; BatchNorm's running statistics are buffers,
not parameters. Autocast keeps bf16 activations: fewer saved bytes than fp32.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
# torchvision resnet50(): 25,557,032 parameters (its weights' documented num_params), fp32
PARAMETER_BYTES = 4 * 25_557_032
BASE = {"stack": "torch-loop", "env": "vision", "model": "resnet-50", "builder": "torchvision.models.resnet50",
        "method": "full", "batch": 32, "image_size": 224, "steps": 2}


class TorchLoopTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [dict(BASE, name="sgd", precision="fp32", optimizer="sgd"),
                 dict(BASE, name="adamw", precision="fp32", optimizer="adamw"),
                 dict(BASE, name="sgd-amp", precision="bf16-amp", optimizer="sgd")]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_parameters_and_optimizer_states(self):
        for name in ("sgd", "adamw", "sgd-amp"):
            self.assertEqual(self.rows[name]["oracle_at_peak"]["parameters"], PARAMETER_BYTES, name)
        self.assertEqual(self.rows["sgd"]["oracle_at_peak"]["optimizer_states"], PARAMETER_BYTES)
        self.assertEqual(self.rows["adamw"]["oracle_at_peak"]["optimizer_states"], 2 * PARAMETER_BYTES)

    def test_autocast_saves_less(self):
        self.assertLess(self.rows["sgd-amp"]["oracle_at_peak"]["activations"],
                        self.rows["sgd"]["oracle_at_peak"]["activations"])

    def test_headroom_agrees_within_the_issue_target(self):
        for name in ("sgd", "adamw", "sgd-amp"):
            self.assertLess(abs(self.rows[name]["error_pct"]), 2.0, name)


if __name__ == "__main__":
    unittest.main()
