"""torchtune's single-device recipes on a tiny Llama, through the whole oracle (label oracle).

Runs bench/oracle/compare.py's path end to end on a 4-layer model built by
torchtune's own component builder (`llama3_2` with the tiny-llama config.json's
dimensions; the stack checks they agree): run_oracle.py under the pinned `tt`
environment, the recipes' `setup` and `train`, and headroom's `fit --json` for the
same run. The checks are the oracle's invariants (LoRA adapters and their AdamW
states in bf16, checkpointing and activation offloading save less, the optimizer
in backward keeps no gradient past its update) and headroom's agreement where it
is known to hold, so that a change to either side that breaks it fails here.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_one, oracle_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
# tests/data/oracle/tiny-llama/config.json, as torchtune's llama3_2 component builder takes it
TINY = {"vocab_size": 8192, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2, "embed_dim": 256,
        "max_seq_len": 2048, "intermediate_dim": 688, "norm_eps": 1e-05, "rope_base": 10000,
        "tie_word_embeddings": False}
# LoRA r 16 on q_proj [256 -> 256] and v_proj [256 -> 128], 4 layers, bf16 (torchtune
# builds the adapters under the model's dtype)
ADAPTER_BYTES = 2 * 4 * 16 * ((256 + 256) + (256 + 128))
ADAPTER_TENSORS = 4 * 2 * 2
# llama3_2's config.json says its Llama 3 RoPE scaling: torchtune's lora_llama3_2 then shares one
# rotary cache, where lora_llama3 (a config without it) keeps one a layer (models/rope_caches.h).
BASE = {"stack": "torchtune", "model": "tests/data/oracle/tiny-llama3.2", "via": "flags",
        "builder": "torchtune.models.llama3_2.llama3_2", "builder_args": TINY,
        "lora_targets": ["q_proj", "v_proj"], "batch": 2, "seq": 256, "steps": 2}


def spec(name, **keys):
    return dict(BASE, name=name, **keys)


class TinyTorchtuneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [spec("full", method="full"),
                 spec("full-in-backward", method="full", optimizer="in-backward"),
                 spec("full-ckpt", method="full", checkpointing="non-reentrant"),
                 spec("lora", method="lora"),
                 spec("lora-ckpt", method="lora", checkpointing="non-reentrant"),
                 spec("lora-offload", method="lora", checkpointing="non-reentrant", offload=True)]
        cls.truths = dict(zip([s["name"] for s in specs], oracle_batch(specs, PYTHON)))
        cls.rows = {s["name"]: compare_one(s, cls.truths[s["name"]], 0.0, HEADROOM) for s in specs}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_lora_adapters_and_states_are_bf16(self):
        lora = self.rows["lora"]
        self.assertEqual(lora["oracle_at_peak"]["gradients"], 0)  # adapters' grads come after the peak
        # fused AdamW: exp_avg and exp_avg_sq in the adapters' bf16, a float32 step on the device
        self.assertEqual(lora["oracle_at_peak"]["optimizer_states"], 2 * ADAPTER_BYTES + 4 * ADAPTER_TENSORS)
        self.assertEqual(lora["oracle_at_peak"]["parameters"] - self.rows["full"]["oracle_at_peak"]["parameters"],
                         ADAPTER_BYTES)

    def test_checkpointing_and_offloading_save_less(self):
        full, full_ckpt = self.rows["full"], self.rows["full-ckpt"]
        self.assertLess(full_ckpt["oracle_at_peak"]["activations"], full["oracle_at_peak"]["activations"])
        lora_ckpt, offload = self.rows["lora-ckpt"], self.rows["lora-offload"]
        self.assertLess(offload["oracle_at_peak"]["activations"], lora_ckpt["oracle_at_peak"]["activations"])
        self.assertLessEqual(offload["oracle_bytes"], lora_ckpt["oracle_bytes"])

    def test_optimizer_in_backward_steps_in_backward(self):
        # register_optim_in_bwd_hooks: each parameter's fused AdamW runs in its
        # post-accumulate-grad hook, so the step has no optimizer phase of its own
        in_backward, full = self.truths["full-in-backward"]["ops"], self.truths["full"]["ops"]
        self.assertNotIn("step1.optimizer", in_backward)
        self.assertEqual(in_backward["step1.forward_backward"]["by_name"].get("_fused_adamw_"), 39)
        self.assertEqual(full["step1.optimizer"]["by_name"].get("_fused_adamw_"), 1)
        self.assertEqual(self.rows["full-in-backward"]["oracle_at_peak"]["gradients"], 0)

    def test_headroom_agrees_within_the_issue_target(self):
        # ground-truth issue's bar: within 2% ("lora" since headroom copies K/V for
        # torchtune's GQA expansion: -2.5% before, -0.8% after; "full-ckpt" since the
        # backward releases each chunk's saved log-probabilities as it runs and the
        # recipe's chunk list is held through the loss's forward: +2.2% before, -0.3% after)
        for name in ("full", "full-ckpt", "full-in-backward", "lora", "lora-ckpt"):
            self.assertLess(abs(self.rows[name]["error_pct"]), 2.0, name)

    def test_offloaded_inputs_are_over_priced_not_under(self):
        # Not modelled (docs/stacks.md, "Offloading checkpoint inputs"): the final norm's
        # saved tensors are packed into OffloadActivations' stash too and push the older
        # checkpoint inputs out of it, so at the head's forward the oracle keeps one layer
        # input where headroom keeps two (each layer packs two tensors, the checkpoint's
        # dummy and its input: planner/predict/offload_stash.h; four before that). It
        # agreed within 2% (+1.4%) only while torchtune's shared fp32 RoPE cache (0.5 MB)
        # was left unpriced.
        row = self.rows["lora-offload"]
        self.assertGreater(row["error_pct"], 0.0)
        self.assertLess(row["error_pct"], 3.0)
        # the gap in activations is that one bf16 [2, 256, 256] input (and small saves), no more
        extra = row["predicted_at_peak"]["activations"] - row["oracle_at_peak"]["activations"]
        layer_input = 2 * 256 * 256 * 2
        self.assertGreaterEqual(extra, layer_input)
        self.assertLess(extra, 2 * layer_input)

if __name__ == "__main__":
    unittest.main()
