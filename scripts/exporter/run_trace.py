"""One traced training step of a model at one (B, S), and what each block keeps.

The block chain is found from the module tree: every outermost nn.ModuleList
whose items are all of one class with submodules (model.layers.N,
transformer_blocks.N, vision_model.encoder.layers.N) gives one checkpointable
block per item. Ops outside the chain form non-checkpointable blocks
("embeddings" before it, "head" after it, "glue.K" between two chains).
"""

from __future__ import annotations

from typing import Dict

import torch
from torch import nn

from model_loading import ModelSpec
from tracer import Recorder, Trace, finalize_nodes


def find_block_modules(model: nn.Module) -> Dict[nn.Module, str]:
    """The repeated layers of the model, mapped to their class name (the block kind)."""
    chosen: Dict[nn.Module, str] = {}
    taken_prefixes = []
    for path, module in model.named_modules():
        if any(path.startswith(p) for p in taken_prefixes):
            continue
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        items = list(module)
        kinds = {type(item) for item in items}
        if len(kinds) != 1 or not any(True for _ in items[0].children()):
            continue
        for item in items:
            chosen[item] = type(item).__name__
        taken_prefixes.append(path + ".")
    return chosen


def trace_step(spec: ModelSpec, model: nn.Module, batch: int, seq: int, device: torch.device,
               dtype: torch.dtype, real: bool, flash: bool, backward: bool = True) -> Trace:
    """Forward under the recorder, then backward, which shows that the step runs
    (nothing is recorded in it; on the meta device it costs as much as the forward,
    so callers tracing many sizes run it once)."""
    inputs, step = spec.make_step(batch, seq, device, dtype, real)
    recorder = Recorder(model, find_block_modules(model), inputs, flash)
    recorder.flash_follows_q_layout = spec.flash_follows_q_layout
    with recorder.recording_forward():
        loss = step(model, inputs)
    trace = recorder.finish([loss])
    if backward:
        loss.backward()
        model.zero_grad(set_to_none=True)
    finalize_nodes(trace)
    return trace


def block_keep_bytes(trace: Trace) -> Dict[str, int]:
    """Bytes each block keeps for backward, attributed as graph/graph_analysis.h does.

    A storage saved by several nodes counts once. Graph inputs and storages read
    by blocks beyond the producer's successor (rotary tables, timestep
    embeddings) are persistent and belong to no block. Otherwise a storage
    belongs to its producer's block when that block saves it, else to the block
    that saves it.
    """
    keep = {block.name: 0 for block in trace.blocks}
    node_block = [node.block for node in trace.nodes]
    for record in trace.storages.values():
        if record.is_param or not record.savers or record.producer is None:
            continue
        producer_block = node_block[record.producer]
        touching = {node_block[i] for i in record.readers | record.savers}
        if any(b > producer_block + 1 for b in touching):
            continue
        saver_blocks = {node_block[i] for i in record.savers}
        owners = {producer_block} if producer_block in saver_blocks else saver_blocks
        for b in owners:
            keep[trace.blocks[b].name] += record.nbytes
    return keep
