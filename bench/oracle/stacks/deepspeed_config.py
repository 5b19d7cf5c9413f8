"""A DeepSpeed run's JSON config, as the user writes it for the Trainer's `deepspeed=`
argument and gives headroom (`fit --deepspeed FILE`). No torch: flags.py imports it.

Spec keys: `zero_stage` (2 or 3), `batch`, `max_grad_norm` (1.0), `overlap_comm` (true,
as transformers' example configs set it), `contiguous_gradients` (true), and any of
DeepSpeed's bucket keys in `zero_buckets` (reduce_bucket_size, allgather_bucket_size,
stage3_prefetch_bucket_size, stage3_max_live_parameters, stage3_param_persistence_threshold);
a bucket key not given is DeepSpeed's default (runtime/zero/config.py), in the config
and in headroom's reading of it alike.
"""

from __future__ import annotations

import json


def deepspeed_config(spec: dict) -> dict:
    stage = spec["zero_stage"]
    if stage not in (1, 2, 3):
        raise ValueError(f"hf-trainer: zero_stage {stage}: expected 1, 2 or 3")
    zero = {"stage": stage, "overlap_comm": spec.get("overlap_comm", True),
            "contiguous_gradients": spec.get("contiguous_gradients", True),
            **spec.get("zero_buckets", {})}
    return {"bf16": {"enabled": True}, "zero_optimization": zero,
            "train_micro_batch_size_per_gpu": spec["batch"], "gradient_accumulation_steps": 1,
            "gradient_clipping": spec.get("max_grad_norm", 1.0)}


def config_json(spec: dict) -> str:
    return json.dumps(deepspeed_config(spec), indent=1, sort_keys=True) + "\n"
