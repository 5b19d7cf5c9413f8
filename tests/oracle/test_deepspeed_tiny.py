"""DeepSpeed ZeRO-2 and ZeRO-3 under the Trainer on a tiny Llama (label oracle, env ds).

The Trainer with `deepspeed=` a ZeRO config runs on the meta accelerator
(bench/oracle/meta_accelerator.py) and the fake process group, rank 0 of 2 or 4.
Held to hand counts, N the model's 7,096,576 elements (config.json below):
- ZeRO-1/2 keep the 16-bit model whole and rank 0's fp32 partition of it
  (stage_1_and_2.py `single_partition_of_fp32_groups`): 2N + 4N/world bytes;
- ZeRO-3 keeps rank 0's 16-bit partitions (each parameter's `ds_tensor`, defragmented
  into one buffer) and its fp32 partition: 2N/world + 4N/world;
- torch's AdamW keeps exp_avg and exp_avg_sq of the fp32 partition and a float32 step
  for each of the Trainer's two parameter groups (decay, no decay);
- the reduce bucket is `reduce_bucket_size` elements (DeepSpeed's default 5e8) in 16
  bits whatever the model's size, twice at ZeRO-2 under overlap_comm
  (stage_1_and_2.py `setup_buckets`: buf_0 and buf_1), once at ZeRO-3 (stage3.py,
  `ipg_buckets[dtype].buffer`).
headroom's peak is held within BOUND_PCT of the oracle's (test_headroom_prices_the_reduce_buckets).
"""

import json
import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))

from compare import compare_batch  # noqa: E402

PYTHON = os.environ["ORACLE_PYTHON"]
HEADROOM = os.environ["HEADROOM"]
MODEL = "tests/data/oracle/tiny-llama"
BASE = {"stack": "hf-trainer", "env": "ds", "model": MODEL, "lora_targets": ["q_proj", "v_proj"],
        "precision": "bf16", "batch": 2, "seq": 256, "steps": 2}
BUCKET_BYTES = 2 * 500_000_000  # reduce_bucket_size elements, bf16
BOUND_PCT = 2.0


def elements():
    """The tiny Llama's parameter elements, from its config.json (LlamaForCausalLM)."""
    with open(os.path.join(ROOT, MODEL, "config.json")) as f:
        c = json.load(f)
    h, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * (h // c["num_attention_heads"])
    layer = 2 * h * h + 2 * kv * h + 3 * inter * h + 2 * h
    return 2 * vocab * h + c["num_hidden_layers"] * layer + h


def spec(name, **keys):
    return dict(BASE, name=name, **keys)


class DeepSpeedTinyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        specs = [spec("zero2-w2", method="full", zero_stage=2, world_size=2),
                 spec("zero3-w2", method="full", zero_stage=3, world_size=2),
                 spec("zero3-w4", method="full", zero_stage=3, world_size=4),
                 spec("zero2-w2-lora", method="lora", zero_stage=2, world_size=2)]
        cls.rows = {r["name"]: r for r in compare_batch(specs, PYTHON, HEADROOM)}
        cls.n = elements()

    def test_every_run_ran(self):
        for name, row in self.rows.items():
            self.assertNotIn("error", row, f"{name}: {row.get('error')}")

    def test_hand_count_of_the_model(self):
        self.assertEqual(self.n, 7_096_576)

    def test_zero2_keeps_16bit_whole_and_shards_fp32(self):
        self.assertEqual(self.rows["zero2-w2"]["oracle_at_peak"]["parameters"], 2 * self.n + 4 * self.n // 2)

    def test_zero3_shards_16bit_and_fp32(self):
        for name, world in (("zero3-w2", 2), ("zero3-w4", 4)):
            self.assertEqual(self.rows[name]["oracle_at_peak"]["parameters"],
                             2 * self.n // world + 4 * self.n // world, name)

    def test_adamw_states_are_two_fp32_partitions_and_two_steps(self):
        for name, world in (("zero2-w2", 2), ("zero3-w2", 2), ("zero3-w4", 4)):
            self.assertEqual(self.rows[name]["oracle_at_peak"]["optimizer_states"],
                             2 * 4 * self.n // world + 2 * 4, name)

    def test_reduce_buckets_are_reduce_bucket_size(self):
        for name, count in (("zero2-w2", 2), ("zero2-w2-lora", 2), ("zero3-w2", 1)):
            buckets = sum(g["bytes"] for g in self.rows[name]["live_at_peak"]
                          if g["shape"] == "(500000000,) bfloat16")
            self.assertEqual(buckets, count * BUCKET_BYTES, name)

    def test_headroom_prices_the_reduce_buckets(self):
        # headroom prices all reduce_bucket_size elements, ZeRO-1/2's two from the first
        # gradient hook to the end of backward, ZeRO-3's one all run
        # (planner/memory/deepspeed_buckets.cc); at this size they are nearly all of the peak.
        for name, row in self.rows.items():
            print(f"{name}: oracle {row['oracle_bytes']} headroom {row['predicted_bytes']} "
                  f"({row['error_pct']:+.2f}%)", file=sys.stderr)
            self.assertLessEqual(abs(row["error_pct"]), BOUND_PCT, name)

    def test_zero3_gathered_parameters_are_not_saved_activations(self):
        # bench/oracle/gathered.py: what fetch_sub_module all-gathered (each param.data a
        # view of the flat bf16 buffer `cat` or `empty` made) is gathered though the
        # linears save it; at the tiny ZeRO-3 peak in backward some of it is live
        from oracle_runs import run_oracle
        result = run_oracle(PYTHON, [spec("zero3-w2-raw", method="full", zero_stage=3, world_size=2)])[0]
        flat = [g for g in result["live_at_peak"] if g["op"] in ("cat", "empty")
                and g["shape"].endswith(",) bfloat16") and g["category"] != "gradients" and g["bytes"] > 0]
        self.assertNotIn("saved_activations", {g["category"] for g in flat})
        gathered = sum(g["bytes"] for g in flat if g["category"] == "gathered")
        self.assertGreater(gathered, 0)
        self.assertEqual(result["at_peak"]["gathered"], gathered)

if __name__ == "__main__":
    unittest.main()
