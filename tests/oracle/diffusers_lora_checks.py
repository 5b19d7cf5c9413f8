"""The checks the diffusers LoRA suites share (Flux, SD3): a tiny transformer's config in a
folder, three oracle runs (rank 4 and 8, and rank 4 under non-reentrant checkpointing), each
held to the suite's hand counts.

A suite subclasses DiffusersLoraChecks and unittest.TestCase and gives CONFIG, BASE, PYTHON,
HEADROOM and two static methods: adapter_elements(rank), the adapters' element count, and
batch_bytes(spec), the bytes of one step's batch.
"""

import json
import os
import tempfile

from oracle_runs import report_headroom_figures, run_oracle


class DiffusersLoraChecks:
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        with open(os.path.join(cls.folder.name, "config.json"), "w") as f:
            json.dump(cls.CONFIG, f)
        base = dict(cls.BASE, model=cls.folder.name)
        cls.specs = {"r4": dict(base, lora_rank=4), "r8": dict(base, lora_rank=8),
                     "r4-ckpt": dict(base, lora_rank=4, checkpointing="non-reentrant")}
        cls.results = dict(zip(cls.specs, run_oracle(cls.PYTHON, list(cls.specs.values()))))

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def test_every_run_ran(self):
        for name, result in self.results.items():
            self.assertNotIn("error", result, f"{name}: {result.get('error')}")

    def test_adapters_are_the_script_targets_in_bf16(self):
        for name, rank in (("r4", 4), ("r8", 8)):
            resolved = self.results[name]["resolved"]
            self.assertEqual(resolved["trainable"], self.adapter_elements(rank), name)
            self.assertEqual(resolved["adapter_dtype"], "bfloat16", name)

    def test_foreach_adamw_keeps_two_bf16_moments(self):
        for name, rank in (("r4", 4), ("r8", 8)):
            at_peak = self.results[name]["at_peak"]
            self.assertEqual(at_peak["optimizer_states"], 2 * 2 * self.adapter_elements(rank), name)

    def test_the_batch_is_latents_and_embeddings(self):
        for name, spec in self.specs.items():
            self.assertEqual(self.results[name]["at_peak"]["inputs"], self.batch_bytes(spec), name)

    def test_checkpointing_keeps_less(self):
        kept = self.results["r4"]["at_peak"]["saved_activations"]
        checkpointed = self.results["r4-ckpt"]["at_peak"]["saved_activations"]
        self.assertLess(checkpointed, kept)

    def test_headroom_figure_is_reported(self):
        if not self.HEADROOM:
            self.skipTest("no headroom binary given")
        report_headroom_figures(self, self.results, self.HEADROOM)
