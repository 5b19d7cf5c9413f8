"""litgpt's fine-tuning step on a tiny Llama, through the whole oracle (label oracle).

Runs bench/oracle/compare.py's path end to end on a 4-layer model built by litgpt's own
`Config` with the tiny-llama config.json's dimensions (the stack checks they agree):
run_oracle.py under the pinned `lg` environment (litgpt 0.5.13, lightning 2.6.6,
bitsandbytes 0.50.2), Fabric's precision plugins, the fit loop's forward, chunked
cross-entropy, backward, AdamW and zero_grad, and headroom's `fit --json` for the same run.
The checks are what litgpt's code does (bench/oracle/stacks/litgpt.py cites each), so a change
to the oracle or to the pinned releases that loses one fails here.
"""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_one, oracle_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
# tests/data/oracle/tiny-llama/config.json as litgpt's Config takes it
TINY = {"name": "tiny-llama", "block_size": 2048, "n_layer": 4, "n_embd": 256, "n_head": 4,
        "n_query_groups": 2, "head_size": 64, "vocab_size": 8192, "padded_vocab_size": 8192,
        "intermediate_size": 688, "mlp_class_name": "LLaMAMLP", "norm_class_name": "RMSNorm",
        "norm_eps": 1e-05, "rope_base": 10000, "bias": False, "parallel_residual": False}
B, S, V, H = 2, 256, 8192, 256
# litgpt's LoRAQKVLinear with query and value, r 8: lora_A (2r x H), lora_B ((q + v rows) x r),
# 4 layers, bf16 (made under fabric.init_module's bf16-true dtype)
ADAPTER_BYTES = 2 * 4 * (2 * 8 * H + (256 + 128) * 8)
BASE = {"stack": "litgpt", "env": "lg", "model": "tests/data/oracle/tiny-llama", "litgpt_config": TINY,
        "precision": "bf16", "lora_rank": 8, "lora_dropout": 0.05, "lora_targets": ["q_proj", "v_proj"],
        "batch": B, "seq": S, "steps": 2}


def spec(name, **keys):
    return dict(BASE, name=name, **keys)


def live(truth, op, shape):
    return sum(g["bytes"] for g in truth["live_at_peak"] if g["op"] == op and g["shape"] == shape)


class TinyLitgptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [spec("full", method="full"), spec("full-amp", method="full", precision="bf16-amp"),
                 spec("full-ckpt", method="full", checkpointing="block"), spec("lora", method="lora"),
                 spec("qlora", method="qlora", double_quant=False)]
        cls.truths = dict(zip([s["name"] for s in specs], oracle_batch(specs, PYTHON)))
        cls.rows = {s["name"]: compare_one(s, cls.truths[s["name"]], 0.0, HEADROOM) for s in specs}

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_fabric_returns_fp32_logits(self):
        # _FabricModule.forward: precision.convert_output casts the output to the default
        # dtype, fp32, and full.py's `logits` holds it through backward
        self.assertEqual(live(self.truths["full"], "_to_copy", f"({B}, {S}, {V}) float32"), 4 * B * S * V)

    def test_lora_adapters_and_states_are_bf16(self):
        lora, full = self.rows["lora"], self.rows["full"]
        self.assertEqual(lora["oracle_at_peak"]["parameters"] - full["oracle_at_peak"]["parameters"],
                         ADAPTER_BYTES)
        # torch.optim.AdamW (foreach): exp_avg and exp_avg_sq in the adapters' dtype; the step
        # counters are CPU tensors (adam.py: not capturable, not fused)
        self.assertEqual(lora["oracle_at_peak"]["optimizer_states"], 2 * ADAPTER_BYTES)

    def test_checkpointing_saves_less(self):
        self.assertLess(self.rows["full-ckpt"]["oracle_at_peak"]["activations"],
                        self.rows["full"]["oracle_at_peak"]["activations"])

    def test_qlora_stable_embedding_keeps_its_gradient(self):
        # lora.py swaps wte for a StableEmbedding after the optimizer is made: its weight
        # trains, the optimizer never zeroes its gradient, and it holds the old weight
        truth = self.truths["qlora"]
        self.assertEqual(live(truth, "embedding_dense_backward", f"({V}, {H}) bfloat16"), 2 * V * H)
        self.assertEqual(truth["resolved"]["optimizer"], "PagedAdamW")

    def test_headroom_agrees_with_litgpt(self):
        # headroom (--stack litgpt) prices litgpt's untied head, Fabric's fp32 logits,
        # its fp32 RMSNorm, K/V copies and LoRAQKVLinear, and its QLoRA layout
        # (planner/mechanisms/litgpt_model.h): within 2% here, but for LoRA and QLoRA on
        # this vocabulary-heavy tiny model, under by 9.5% and 10.4%, held so that a change
        # either way shows. The oracle's peak is lora.py's loss backward: the held fp32
        # chunks, one chunk's saved log-softmax and two chunks' log-softmax gradients
        # (the shifted last one waits for the cat), which the one-node loss prices below
        # that; QLoRA matched only while the head's backward held every saved tensor to
        # its end (planner/time/backward_gradients.cc). The real-size litgpt runs of the
        # grid agree within 2%.
        for name, row in self.rows.items():
            if name in ("lora", "qlora"):
                self.assertTrue(-11.5 < row["error_pct"] < -8.5, f"{name}: {row['error_pct']:+.1f}%")
            else:
                self.assertTrue(-2.0 < row["error_pct"] < 2.0, f"{name}: {row['error_pct']:+.1f}%")

if __name__ == "__main__":
    unittest.main()
