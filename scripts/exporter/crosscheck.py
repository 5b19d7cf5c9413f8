#!/usr/bin/env python3
"""Traces the tiny version of every zoo family on CPU and writes what each block keeps.

    .venv/bin/python scripts/exporter/crosscheck.py OUT_DIR [--family NAME ...]

For each family of tests/data/hf it writes OUT_DIR/<family>/config.json (the
public config scaled down by tiny_configs.py) and trace_<attention>.json, one
per attention implementation: the batch and S of the trace and, per block, the
bytes of the storages autograd keeps for backward (run_trace.block_keep_bytes).
tests/exporter/crosscheck_main.cc then builds the same tiny configs with the
C++ builders and compares, block by block (CTest label `exporter`).

Real tensors, bf16 compute, on CPU; SDPA is traced as the GPU flash kernel
keeps it (flash_attention.py), eager attention as transformers runs it.
Exit 77 (CTest's skip) when torch, transformers or diffusers are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

SKIP = 77
ROOT = Path(__file__).resolve().parents[2]
BATCH = 2
TEXT_SEQ = 16
# Flux and SD3 at B = 1: for B >= 2 the joint blocks' to_out.0 / to_add_out read batch-strided
# slices of the attention output, which their matmul copies (a second copy of the
# attention output is kept); at B = 1 the slices are views, as the builder models.
# docs/exporter.md, "Open differences".
FLUX_BATCH = 1
# Blocks the builders do not model as blocks, with the reason (printed, not compared).
_NOT_COMPARED = {
    ("llava-1.5-7b", "model.vision_tower.encoder.layers.1"):
        "LLaVA uses the penultimate vision layer; the builder keeps the last one as "
        "parameters only, transformers still runs it",
}
# The builders model these heads; a config naming another head is traced with this one.
_TASKS = {"bert-base-uncased": "seq_cls", "roberta-base": "seq_cls"}


def _seq_for(spec: "object", family: str) -> int:
    sequence = spec.sequence  # type: ignore[attr-defined]
    if family.startswith(("flux", "sd3")):
        return TEXT_SEQ  # 16 image tokens: a 4 x 4 patch grid
    if spec.task in ("llava", "qwen2_5_vl"):  # type: ignore[attr-defined]
        return spec.seq_values[0] - 8 + TEXT_SEQ  # type: ignore[attr-defined]
    if sequence["unit"] == "image":
        return int(sequence["default_seq"])  # the native resolution: no interpolation
    return TEXT_SEQ


def trace_family(family: str, out_dir: Path, attentions: List[str]) -> Dict[str, Dict[str, int]]:
    import torch

    from model_loading import load_model_spec
    from run_trace import block_keep_bytes, trace_step
    from tiny_configs import tiny_config

    public = json.loads((ROOT / "tests/data/hf" / family / "config.json").read_text())
    family_dir = out_dir / family
    family_dir.mkdir(parents=True, exist_ok=True)
    (family_dir / "config.json").write_text(json.dumps(tiny_config(family, public), indent=1))
    spec = load_model_spec(family_dir, _TASKS.get(family))
    seq = _seq_for(spec, family)
    results = {}
    for attention in attentions:
        torch.manual_seed(0)
        model = spec.build(attention).to(torch.bfloat16)
        model.train()
        batch = FLUX_BATCH if family.startswith(("flux", "sd3")) else BATCH
        trace = trace_step(spec, model, batch, seq, torch.device("cpu"), torch.bfloat16,
                           real=True, flash=attention == "sdpa")
        keep = block_keep_bytes(trace)
        blocks = []
        for b in trace.blocks:
            entry = {"name": b.name, "checkpointable": b.checkpointable,
                     "keep_bytes": keep[b.name]}
            if (family, b.name) in _NOT_COMPARED:
                entry["not_compared"] = _NOT_COMPARED[(family, b.name)]
            blocks.append(entry)
        record = {"family": family, "config": "config.json", "attention": attention,
                  "compute_dtype": "bf16", "batch": batch, "seq": seq, "blocks": blocks}
        if spec.target_seq:  # T5: the decoder's tokens (ZooOptions::target_tokens)
            record["target_seq"] = spec.target_seq
        if spec.image_px:  # Qwen2.5-VL: the image side the builder is given (ZooOptions::image_side)
            record["image_px"] = spec.image_px
        (family_dir / f"trace_{attention}.json").write_text(json.dumps(record, indent=1) + "\n")
        results[attention] = keep
    return results


def main(argv: List[str]) -> int:
    from tiny_configs import FAMILIES

    parser = argparse.ArgumentParser(prog="crosscheck.py", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--family", action="append", choices=FAMILIES,
                        help="only these families (default: all)")
    parser.add_argument("--attention", action="append", choices=("sdpa", "eager"),
                        help="only these attention implementations (default: both)")
    args = parser.parse_args(argv)
    try:
        import diffusers  # noqa: F401
        import torch
        import transformers  # noqa: F401
    except ImportError as error:
        print(f"crosscheck: skipped: {error.name} is not installed (scripts/setup_exporter.sh)")
        return SKIP
    torch.set_num_threads(1)
    start = time.time()
    for family in args.family or FAMILIES:
        attentions = args.attention or ["sdpa", "eager"]
        if family.startswith(("flux", "sd3")):
            attentions = [a for a in attentions if a == "sdpa"]  # diffusers always calls SDPA
        if family.startswith("gemma-2-"):
            # transformers builds Gemma 2 without SDPA (its softcap): eager is what it runs.
            attentions = [a for a in attentions if a == "eager"]
        began = time.time()
        results = trace_family(family, args.out_dir, attentions)
        chain = {a: [v for k, v in r.items() if k not in ("embeddings", "head")]
                 for a, r in results.items()}
        print(f"crosscheck: {family}: {chain} ({time.time() - began:.1f} s)")
    print(f"crosscheck: traced in {time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main(sys.argv[1:]))
