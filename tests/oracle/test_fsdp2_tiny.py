"""FSDP2 on the fake process group, a tiny Llama at world size 2 and 3 (label oracle).

The oracle's own numbers held to hand counts: rank 0's sharded parameters are
FSDP2's padded dim-0 chunks (`_fsdp_param.py`: each parameter is chunked on dim 0
into `world_size` pieces and every rank's piece padded to the first one's size,
`ceil(dim0 / world_size)` rows), fused AdamW's states are two of those per trainable
tensor plus a float32 step, and a storage FSDP2 frees by resizing it to 0
(`free_storage`) counts as freed. headroom's prediction of the same runs is
printed, not asserted: at this size it is not within 2% (bench/oracle/README.md).
"""

import json
import math
import os
import sys
import unittest

from oracle_runs import report_headroom_figures, run_oracle

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ.get("HEADROOM")
MODEL = "tests/data/oracle/tiny-llama"
BASE = {"stack": "fsdp2", "model": os.path.join(ROOT, MODEL), "lora_targets": ["q_proj", "v_proj"],
        "batch": 2, "seq": 256, "steps": 2, "precision": "bf16-mixed"}


def tiny_llama_shapes():
    """Every parameter's shape, from config.json, as LlamaForCausalLM builds them."""
    with open(os.path.join(ROOT, MODEL, "config.json")) as f:
        c = json.load(f)
    h, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * (h // c["num_attention_heads"])
    layer = [(h, h), (kv, h), (kv, h), (h, h), (inter, h), (inter, h), (h, inter), (h,), (h,)]
    shapes = [(vocab, h)] + layer * c["num_hidden_layers"] + [(h,)]
    if not c.get("tie_word_embeddings", False):
        shapes.append((vocab, h))
    return shapes, c["num_hidden_layers"], h, kv


def rank0_elements(shape, world):
    """FSDP2's rank-0 shard of one parameter: ceil(dim0 / world) rows, the rest whole."""
    return math.ceil(shape[0] / world) * math.prod(shape[1:])


class Fsdp2TinyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        names = ["full-2", "full-3", "lora-2", "full-2-keep", "full-2-short"]
        specs = [dict(BASE, method="full", world_size=2), dict(BASE, method="full", world_size=3),
                 dict(BASE, method="lora", world_size=2),
                 dict(BASE, method="full", world_size=2, reshard_after_forward=False),
                 dict(BASE, method="full", world_size=2, batch=1, seq=32)]
        cls.results = dict(zip(names, run_oracle(PYTHON, specs)))
        cls.shapes, cls.layers, cls.hidden, cls.kv = tiny_llama_shapes()

    def test_every_run_ran(self):
        for name, result in self.results.items():
            self.assertNotIn("error", result, f"{name}: {result.get('error')}")

    def test_sharded_parameters_are_padded_dim0_chunks(self):
        for name, world in (("full-2", 2), ("full-3", 3)):
            fp32_bytes = 4 * sum(rank0_elements(s, world) for s in self.shapes)
            self.assertEqual(self.results[name]["at_peak"]["parameters"], fp32_bytes, name)
        # world 3 pads (688 rows -> 230 a rank, 128 -> 43): more than a third of the model
        total = 4 * sum(math.prod(s) for s in self.shapes)
        self.assertGreater(self.results["full-3"]["at_peak"]["parameters"], total / 3)

    def test_fused_adamw_states_are_two_shards_and_a_step(self):
        shard_bytes = 4 * sum(rank0_elements(s, 2) for s in self.shapes)
        self.assertEqual(self.results["full-2"]["at_peak"]["optimizer_states"],
                         2 * shard_bytes + 4 * len(self.shapes))

    def test_lora_shards_fp32_adapters_beside_the_frozen_base(self):
        rank = BASE.get("lora_rank", 16)
        adapters = [(rank, self.hidden), (self.hidden, rank), (rank, self.hidden), (self.kv, rank)]
        adapter_bytes = 4 * sum(rank0_elements(s, 2) for s in adapters) * self.layers
        base_bytes = 4 * sum(rank0_elements(s, 2) for s in self.shapes)
        at_peak = self.results["lora-2"]["at_peak"]
        self.assertEqual(at_peak["parameters"], base_bytes + adapter_bytes)
        self.assertEqual(at_peak["optimizer_states"], 2 * adapter_bytes + 4 * 4 * self.layers)

    def test_unsharded_layers_are_freed_after_forward(self):
        # reshard_after_forward=False keeps each layer's bf16 parameters from its forward
        # to its backward; True frees them by resizing their storage to 0
        kept, freed = self.results["full-2-keep"], self.results["full-2"]
        self.assertGreater(kept["peak_allocated_bytes"], freed["peak_allocated_bytes"])

    def test_gathered_parameters_are_not_saved_activations(self):
        # bench/oracle/gathered.py: FSDP2's per-parameter all-gather outputs (flat bf16
        # `empty`, the unsharded parameters' storage) count as gathered though the linears
        # save views of them; some are live at the peak. The group's flat all-gather
        # buffer in flight beside them is a transient.
        for name in ("full-2-keep", "lora-2"):
            result = self.results[name]
            flat = [g for g in result["live_at_peak"]
                    if g["op"] == "empty" and g["shape"].endswith(",) bfloat16") and g["bytes"] > 0]
            self.assertNotIn("saved_activations", {g["category"] for g in flat}, name)
            gathered = sum(g["bytes"] for g in flat if g["category"] == "gathered")
            self.assertGreater(gathered, 0, name)
            self.assertEqual(result["at_peak"]["gathered"], gathered, name)

    def test_unsharded_gradients_are_gradients(self):
        # 32 tokens: the peak is the root group's reduce-scatter in backward's final callback
        # (embeddings, final norm, LM head; `foreach_reduce`, `_fsdp_collectives.py`, torch 2.11).
        # Its fp32 reduce-scatter output (the sharded gradient) is allocated after the copy-in,
        # when every layer's sharded gradient exists, and the loop over the group's unsharded
        # gradients still binds the last one, the LM head's bf16 `.grad` (an `mm`): a
        # gradient by docs/memory-model.md's rule, as AccumulateGrad set it on the unsharded
        # parameter (bench/oracle/unsharded_grads.py), not a transient.
        result = self.results["full-2-short"]
        shapes, _, hidden, _ = tiny_llama_shapes()
        vocab = shapes[0][0]
        sharded = 4 * sum(rank0_elements(s, 2) for s in shapes)
        self.assertEqual(result["at_peak"]["gradients"], sharded + 2 * vocab * hidden)
        head = [g for g in result["live_at_peak"] if g["op"] == "mm" and g["shape"] == f"({vocab}, {hidden}) bfloat16"]
        self.assertEqual([(g["category"], g["count"]) for g in head], [("gradients", 1)])

    def test_headroom_figure_is_reported(self):
        if not HEADROOM:
            self.skipTest("no headroom binary given")
        report_headroom_figures(self, self.results, HEADROOM)


if __name__ == "__main__":
    unittest.main()
