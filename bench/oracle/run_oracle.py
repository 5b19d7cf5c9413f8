"""Runs one training stack's real step on the meta device and writes what it allocated.

    python bench/oracle/run_oracle.py SPEC.json [--out RESULT.json]

SPEC names the stack and the run (bench/oracle/README.md lists the keys), or is
a list of runs, answered by a list in the same order (one process: the stack's
imports are paid once). The
result: the peak of allocated bytes, the phase it falls in, each category at
the peak, the live storages at the peak grouped by the op that made them, and
the aten ops of each phase (what the time model counts kernels from).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import warnings
from collections import Counter
from importlib.metadata import PackageNotFoundError, version

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bnb_optimizer_shims import BNB_OPTIMS, bnb_optimizers_on_meta  # noqa: E402
from bnb_gemm_shims import bnb_gemm_dispatch_on_meta  # noqa: E402
from bnb_shims import bnb_kernels_on_meta, stub_triton_ops  # noqa: E402
from ctx_saves import ctx_saves_marked  # noqa: E402
from cuda_autocast import cuda_autocast_on_meta  # noqa: E402
from cuda_shims import cuda_dropout_on_meta, cuda_sdpa_on_meta, fused_optimizers_on_meta  # noqa: E402
from gathered import gathered_marked  # noqa: E402
from liger_shims import liger_kernels_on_meta  # noqa: E402
from meta_recorder import CATEGORIES, Recorder, recording  # noqa: E402
from torchao_optimizer_shims import TORCHAO_OPTIMS, torchao_optimizers_on_meta  # noqa: E402
from report import write_atomically  # noqa: E402
from unsharded_grads import unsharded_grads_marked  # noqa: E402

STACKS = {"hf-trainer": "stacks.hf_trainer", "torchtune": "stacks.torchtune"}
STACKS["fsdp2"] = "stacks.fsdp2"  # torch's fully_shard in a plain loop, fake process group (fake_pg.py)
STACKS["diffusers-flux"] = "stacks.diffusers_flux"  # train_dreambooth_lora_flux.py's step, mirrored
STACKS["diffusers-sd3"] = "stacks.diffusers_sd3"  # train_dreambooth_lora_sd3.py's step, mirrored
STACKS["diffusers-sdxl"] = "stacks.diffusers_sdxl"  # train_text_to_image_lora_sdxl.py's step, mirrored
STACKS["litgpt"] = "stacks.litgpt"  # litgpt's finetune/full.py and lora.py step under Lightning Fabric
STACKS["torch-loop"] = "stacks.torch_loop"  # a torchvision model in a plain loop (env vision)
STACKS["trl-sft"] = "stacks.trl_sft"  # TRL's SFTTrainer over the Trainer's step (env trl)
STACKS["trl-dpo"] = "stacks.trl_dpo"  # TRL's DPOTrainer: policy and reference over chosen and rejected (env trl)
STACKS["trl-reward"] = "stacks.trl_reward"  # TRL's RewardTrainer: a reward head over chosen and rejected (env trl)
STACKS["trl-grpo"] = "stacks.trl_grpo"  # TRL's GRPOTrainer: generation, then the policy over prompt + completion (env trl)
_PACKAGES = ("torch", "torchvision", "transformers", "peft", "accelerate", "bitsandbytes", "trl",
             "torchtune", "torchao", "diffusers", "litgpt", "lightning", "liger-kernel")


def versions() -> dict:
    found = {}
    for name in _PACKAGES:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name).split("+")[0]
    return found


def live_at_peak(recorder: Recorder, limit: int = int(os.environ.get("LIVE_LIMIT", 40))) -> list:
    groups: Counter = Counter()
    counts: Counter = Counter()
    for storage, record in recorder.peak_records.items():
        key = (recorder.category_at_peak(record), record.label, record.shape)
        groups[key] += recorder.peak_sizes[storage]
        counts[key] += 1
    return [{"category": c, "op": op, "shape": shape, "count": counts[(c, op, shape)], "bytes": b}
            for (c, op, shape), b in groups.most_common(limit)]


def ops_by_phase(recorder: Recorder) -> dict:
    phases: dict = {}
    for op in recorder.ops:
        phase = phases.setdefault(op["phase"], Counter())
        phase[op["op"]] += 1
    return {p: {"ops": sum(c.values()), "by_name": dict(c.most_common())} for p, c in phases.items()}


def run(spec: dict) -> dict:
    stub_triton_ops()  # before anything imports a bitsandbytes that needs it (bnb_shims.py)
    stack = importlib.import_module(STACKS[spec["stack"]])
    # a value read while the model is built and wrapped decides no allocation of the step
    # (meta_recorder._scalar_of_meta: accelerate's FSDP2 state dict of bitsandbytes weights)
    recorder = Recorder(zero_scalars_in_setup=True)
    warnings.filterwarnings("ignore")
    with cuda_autocast_on_meta(), cuda_sdpa_on_meta(), cuda_dropout_on_meta(), \
            fused_optimizers_on_meta(), bnb_kernels_on_meta(), bnb_gemm_dispatch_on_meta(spec.get("gpu", "h200")), \
            liger_kernels_on_meta(recorder), ctx_saves_marked(recorder), \
            gathered_marked(recorder), unsharded_grads_marked(recorder), recording(recorder), \
            (bnb_optimizers_on_meta(recorder) if spec.get("optim") in BNB_OPTIMS else contextlib.nullcontext()), \
            (torchao_optimizers_on_meta() if spec.get("optim") in TORCHAO_OPTIMS else contextlib.nullcontext()):
        resolved = stack.run(spec, recorder) or {}
    at_peak = recorder.at_peak()
    return {"format": "headroom.oracle", "spec": spec, "resolved": resolved, "versions": versions(),
            "peak_allocated_bytes": recorder.peak_bytes, "peak_phase": recorder.peak_phase,
            "at_peak": {c: at_peak[c] for c in CATEGORIES},
            "paged_optimizer_states_bytes": recorder.paged_optimizer_states,
            "live_at_peak": live_at_peak(recorder), "ops": ops_by_phase(recorder),
            **({"op_list": recorder.ops} if spec.get("record_ops") else {})}


def run_or_error(spec: dict) -> dict:
    """A run the stack refuses is an answer for that run, not the end of the batch."""
    try:
        return run(spec)
    except Exception as e:  # noqa: BLE001 - reported per run, with its type
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="a JSON file with one run, or '-' for stdin")
    parser.add_argument("--out", help="where to write the result (default: stdout)")
    args = parser.parse_args()
    # stdout carries the result only: what libraries print (DeepSpeed's logger writes to
    # the stdout it found at import) goes to stderr, at the descriptor
    sys.stdout.flush()
    result_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with (sys.stdin if args.spec == "-" else open(args.spec)) as f:
        spec = json.load(f)
    specs = spec if isinstance(spec, list) else [spec]
    for i, one in enumerate(specs):
        if not isinstance(one, dict) or one.get("stack") not in STACKS:
            print(f"run_oracle: {args.spec}: run {i}, field 'stack': expected one of "
                  f"{', '.join(STACKS)}", file=sys.stderr)
            return 2
    results = [run_or_error(one) for one in specs]
    text = json.dumps(results if isinstance(spec, list) else results[0], indent=1)
    if args.out:
        write_atomically(args.out, text + "\n")
    else:
        print(text, file=result_out)
        result_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
