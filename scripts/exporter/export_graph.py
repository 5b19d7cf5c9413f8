#!/usr/bin/env python3
"""Writes a headroom layer graph for a Hugging Face or diffusers model from its config alone.

    .venv/bin/python scripts/exporter/export_graph.py CONFIG -o graph.json
        [--device meta|cpu] [--dtype bf16|f16|f32] [--attention sdpa|eager]
        [--task TASK] [--name NAME]

CONFIG is a config.json (transformers: model_type / architectures; diffusers:
_class_name FluxTransformer2DModel) or the directory holding it. The model is
built on the meta device (no weights, no download, offline), one training step
is traced at seven (batch, seq) sizes, and the sizes are fitted to the
layer-graph polynomials. docs/exporter.md explains what is recorded.

Exit status: 0 written; 2 bad input (one message naming the file); 3 the
exporter's Python packages are missing (scripts/setup_exporter.sh); 1 the
model failed while tracing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Sequence

# Offline before transformers is imported: a config never triggers a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

from config_file import read_config  # noqa: E402
from errors import ExporterError  # noqa: E402

_DTYPES = ("bf16", "f16", "f32")
# Not B = 1: a slice of one sample is contiguous and skips copies a batch makes.
BATCHES = (2, 3, 4)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="export_graph.py",
        description="Export a headroom layer graph (docs/layer-graph-format.md) from a model "
                    "config.json by tracing one training step.")
    parser.add_argument("config", type=Path, help="config.json or a model directory")
    parser.add_argument("-o", "--output", type=Path, required=True, help="graph JSON to write")
    parser.add_argument("--device", choices=("meta", "cpu"), default="meta",
                        help="meta: no memory, any size (default); cpu: real tensors, tiny "
                             "models only")
    parser.add_argument("--dtype", choices=_DTYPES, default="bf16",
                        help="compute dtype of the traced step (default bf16)")
    parser.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa",
                        help="sdpa: saves of the GPU flash kernel (default); eager: "
                             "transformers' matmul-softmax-matmul")
    parser.add_argument("--task", default=None,
                        help="causal_lm, masked_lm, seq_cls, image_cls, contrastive, llava, "
                             "flux (default: from the config's architectures)")
    parser.add_argument("--name", default=None, help="graph name (default: the config's folder)")
    return parser.parse_args(argv)


def seq_values(spec: "ModelSpec") -> List[int]:  # type: ignore[name-defined]  # noqa: F821
    """Four S values: three to fit the S^2 terms, one to check the fit."""
    if spec.seq_values:
        return spec.seq_values
    if spec.sequence["unit"] == "image" and spec.task != "flux":
        extra = int(spec.sequence["extra_tokens"])
        native = int(spec.sequence["default_resolution"]) // int(spec.sequence["patch_px"])
        # Not the native side: position embeddings are interpolated at every traced size,
        # so every size runs the same ops.
        sides = [s for s in range(2, 8) if s != native][:4]
        return [s * s + extra for s in sides]
    return [16, 24, 32, 40]


def export(args: argparse.Namespace) -> dict:
    import torch

    from graph_writer import build_graph
    from model_loading import load_model_spec
    from run_trace import trace_step
    from size_fit import fit_points

    torch_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    spec = load_model_spec(args.config, args.task)
    if spec.task == "seq2seq":
        # The layer-graph format sizes every tensor by one sequence length; an
        # encoder-decoder has two. headroom builds T5 itself from the same file.
        raise ExporterError(f"{args.config}: {spec.family} is an encoder-decoder (two sequence "
                            f"lengths), which a layer-graph JSON cannot express; headroom reads "
                            f"this config.json itself: `headroom fit {args.config} --seq S "
                            f"--target-seq T` (t5 and Flan-T5)")
    device = torch.device(args.device)
    with device:
        model = spec.build(args.attention)
    model.to(dtype=torch_dtype)
    model.train()
    seqs = seq_values(spec)
    points = fit_points(BATCHES, seqs) + [(BATCHES[2], seqs[3])]
    traces: Dict = {}
    for batch, seq in points:
        traces[(batch, seq)] = trace_step(spec, model, batch, seq, device, torch_dtype,
                                          real=args.device != "meta", flash=args.attention == "sdpa",
                                          backward=not traces)
    name = args.name or (args.config if args.config.is_dir() else args.config.parent).resolve().name
    description = (f"{spec.family} ({spec.task}) exported from its config by "
                   f"scripts/exporter/export_graph.py, {args.attention} attention, "
                   f"{args.dtype} compute")
    return build_graph(spec, traces, BATCHES, seqs, torch_dtype, name, description)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    try:  # a missing or broken file is refused before the seconds-long imports below
        read_config(args.config)
    except ExporterError as error:
        print(f"export_graph: {error}", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import diffusers  # noqa: F401
    except ImportError as error:
        print(f"export_graph: {error.name} is not installed (run scripts/setup_exporter.sh, "
              f"which installs scripts/exporter/requirements.txt into .venv)", file=sys.stderr)
        return 3
    try:
        graph = export(args)
    except ExporterError as error:
        print(f"export_graph: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a model that fails to trace: one line, no traceback
        if os.environ.get("HEADROOM_EXPORTER_DEBUG"):
            raise
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(f"export_graph: {args.config}: tracing failed: {type(error).__name__}: {first} "
              f"(set HEADROOM_EXPORTER_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    try:
        args.output.write_text(json.dumps(graph, indent=1) + "\n", encoding="utf-8")
    except OSError as error:
        print(f"export_graph: {args.output}: cannot write ({error.strerror})", file=sys.stderr)
        return 2
    print(f"export_graph: wrote {args.output}: {len(graph['blocks'])} blocks, "
          f"{len(graph['nodes'])} nodes, {len(graph['tensors'])} tensors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
