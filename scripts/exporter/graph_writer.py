"""Turns traces at several (B, S) into one layer-graph JSON (docs/layer-graph-format.md).

Every storage becomes a tensor, named after the node that allocated it
("model.layers.0.mlp.up_proj", then ":1", ":2" for its further outputs) or,
for graph inputs and buffers, after the input ("input_ids") or buffer. A node
lists as outputs the storages it allocated that another node reads, that
autograd saves, or that the step returns; the others were transient and
become its workspace. The traces must agree on the structure (the same nodes,
inputs, outputs and saves); their sizes are fitted exactly (size_fit.py).

Save conditions are not traced (every parameter is trainable in the trace):
a linear, embedding or convolution keeps its input for the weight gradient
(param_grad); a node without parameters keeps what it keeps for the input
gradient (input_grad); any other node uses any_grad.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import torch

from errors import ExporterError
from model_loading import ModelSpec
from size_fit import Point, SizeExpr, fit_size
from tracer import NodeRecord, Trace

_DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
                torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8",
                torch.bool: "bool", torch.float8_e4m3fn: "f8_e4m3",
                # The format has no f64; i64 has the same 8 bytes per value (Flux's
                # rotary tables are computed in float64).
                torch.float64: "i64"}
_LORA_CANDIDATES = ("q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value", "to_q",
                    "to_k", "to_v", "to_out.0", "c_attn", "qkv_proj", "query_key_value", "qkv",
                    "q_lin", "v_lin", "Wqkv")
_PARAM_NODE_OPS = ("linear", "embedding", "conv")


def dtype_name(dtype: torch.dtype, where: str) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        raise ExporterError(f"{where}: dtype {dtype} has no layer-graph name (expected one of "
                            f"{', '.join(sorted(set(_DTYPE_NAMES.values())))})")
    return name


@dataclass
class _NodeView:
    """One node of one trace with canonical tensor names."""

    node: NodeRecord
    inputs: List[str]
    outputs: List[str]
    saves: List[str]
    temporaries_bytes: int


def _canonical_names(trace: Trace) -> Dict[int, str]:
    names: Dict[int, str] = {}
    for node in trace.nodes:
        for i, key in enumerate(node.produced):
            names[key] = node.name if i == 0 else f"{node.name}:{i}"
    unnamed = 0
    taken = set(names.values())
    for node in trace.nodes:
        for key in node.inputs + node.saves:
            if key in names:
                continue
            name = trace.storages[key].name
            if not name or name in taken:
                name = f"input.{unnamed}"
                unnamed += 1
            names[key] = name
            taken.add(name)
    return names


def _views(trace: Trace) -> Tuple[List[_NodeView], Dict[int, str]]:
    names = _canonical_names(trace)
    outputs = set(trace.graph_outputs)
    views = []
    for index, node in enumerate(trace.nodes):
        kept, temporary = [], 0
        for key in node.produced:
            record = trace.storages[key]
            if (record.readers - {index}) or record.savers or key in outputs:
                kept.append(key)
            else:
                temporary += record.nbytes
        views.append(_NodeView(node, [names[k] for k in node.inputs], [names[k] for k in kept],
                               [names[k] for k in node.saves], temporary))
    return views, names


def _save_condition(node: NodeRecord) -> str:
    if not node.params:
        return "input_grad"
    return "param_grad" if node.op in _PARAM_NODE_OPS else "any_grad"


def _check_same_structure(reference: List[_NodeView], other: List[_NodeView], point: Point,
                          first: Point) -> None:
    ref_names = [v.node.name for v in reference]
    other_names = [v.node.name for v in other]
    if ref_names != other_names:
        diff = next((a, b) for a, b in zip(ref_names + [""], other_names + [""]) if a != b)
        raise ExporterError(f"the model runs different ops at (B, S) = {point} than at {first}: "
                            f"node {diff[0]!r} there, {diff[1]!r} here (a size-dependent code "
                            f"path; the exporter needs one graph for every size)")
    for a, b in zip(reference, other):
        if (a.inputs, a.outputs, a.saves) != (b.inputs, b.outputs, b.saves):
            raise ExporterError(f"node {a.node.name!r} reads, writes or saves different tensors "
                                f"at (B, S) = {point} than at {first}")


class _Fitter:
    def __init__(self, points: Sequence[Point], batches: Sequence[int],
                 seqs: Sequence[int]) -> None:
        self.points, self.batches, self.seqs = points, batches, seqs
        self.clamped: List[str] = []

    def fit(self, values: Sequence[int], what: str) -> SizeExpr:
        expr = fit_size(dict(zip(self.points, values)), self.batches, self.seqs, what)
        if expr.has_negative():
            self.clamped.append(what)
            expr = expr.clamped()
        return expr


def build_graph(spec: ModelSpec, traces: Dict[Point, Trace], batches: Sequence[int],
                seqs: Sequence[int], compute_dtype: torch.dtype, name: str,
                description: str) -> dict:
    points = list(traces)
    per_point = {p: _views(traces[p]) for p in points}
    first = points[0]
    reference, ref_names = per_point[first]
    for p in points[1:]:
        _check_same_structure(reference, per_point[p][0], p, first)
    fitter = _Fitter(points, batches, seqs)
    trace0 = traces[first]

    # Tensor sizes: canonical name -> elements at every point.
    elements: Dict[str, List[int]] = {}
    dtypes: Dict[str, torch.dtype] = {}
    for p in points:
        trace = traces[p]
        for key, tensor_name in per_point[p][1].items():
            record = trace.storages[key]
            elements.setdefault(tensor_name, []).append(record.elements)
            previous = dtypes.setdefault(tensor_name, record.dtype)
            if previous != record.dtype:
                raise ExporterError(f"tensor {tensor_name!r} is {previous} at {first} but "
                                    f"{record.dtype} at {p}")

    used: List[str] = []
    nodes_json = []
    compute_bytes = torch.empty((), dtype=compute_dtype).element_size()
    for index, view in enumerate(reference):
        node = view.node
        if not view.outputs and not node.params and not view.saves:
            continue  # views only: nothing allocated, kept or owned
        nodes_at = [per_point[p][0][index] for p in points]
        io = [sum(elements[t][i] for t in v.inputs + v.outputs) for i, v in enumerate(nodes_at)]
        workspace_bytes = fitter.fit([v.temporaries_bytes for v in nodes_at],
                                     f"node {node.name!r}: workspace bytes")
        workspace = SizeExpr(*(-(-getattr(workspace_bytes, t) // compute_bytes)
                               for t in ("c", "b", "s", "bs", "ss", "bss")))
        when = _save_condition(node)
        entry = {
            "name": node.name,
            "op": node.op,
            "block": node.block,
            "inputs": view.inputs,
            "outputs": view.outputs,
            "params": [_param_json(pname, param, tied, spec.param_dtype)
                       for pname, param, tied in node.params],
            "saves": [{"tensor": t, "when": when} for t in view.saves],
            "fwd_flops": fitter.fit([v.node.fwd_flops for v in nodes_at],
                                    f"node {node.name!r}: fwd_flops").to_json(),
            "bwd_input_flops": fitter.fit([v.node.bwd_input_flops for v in nodes_at],
                                          f"node {node.name!r}: bwd_input_flops").to_json(),
            "bwd_param_flops": fitter.fit([v.node.bwd_param_flops for v in nodes_at],
                                          f"node {node.name!r}: bwd_param_flops").to_json(),
            "fwd_io_elements": fitter.fit(io, f"node {node.name!r}: fwd_io_elements").to_json(),
            "workspace_elements": workspace.to_json(),
        }
        if node.linear is not None:
            rows = fitter.fit([v.node.linear[2] for v in nodes_at],  # type: ignore[index]
                              f"node {node.name!r}: linear rows")
            entry["linear"] = {"in_features": node.linear[0], "out_features": node.linear[1],
                               "rows": rows.to_json()}
        nodes_json.append(entry)
        for t in view.inputs + view.outputs:
            if t not in used:
                used.append(t)
    _place_unused_params(nodes_json, trace0, spec.param_dtype)

    produced = {t for entry in nodes_json for t in entry["outputs"]}
    tensors_json = []
    for tensor_name in used:
        tensor = {"name": tensor_name,
                  "elements": fitter.fit(elements[tensor_name],
                                         f"tensor {tensor_name!r}: elements").to_json()}
        dtype = dtypes[tensor_name]
        if dtype != compute_dtype or tensor_name not in produced:
            tensor["dtype"] = dtype_name(dtype, f"tensor {tensor_name!r}")
        tensors_json.append(tensor)
    for what in fitter.clamped:
        print(f"export_graph: note: {what} has a negative term (e.g. S-1 patch tokens); "
              f"written as the upper bound without it", file=sys.stderr)

    blocks_json = [{"name": b.name, "kind": b.kind, "checkpointable": b.checkpointable}
                   for b in trace0.blocks]
    return {
        "format": "headroom.layer_graph",
        "version": 1,
        "name": name,
        "family": spec.family,
        "description": description,
        "source": str(spec.config_path),
        "sequence": spec.sequence,
        "lora_targets": _lora_targets(nodes_json, blocks_json),
        "blocks": blocks_json,
        "tensors": tensors_json,
        "nodes": nodes_json,
    }


def _param_json(name: str, param: torch.nn.Parameter, tied_to: str, dtype: str) -> dict:
    entry = {"name": name, "shape": list(param.shape), "dtype": dtype,
             "trainable": bool(param.requires_grad)}
    if tied_to:
        entry["tied_to"] = tied_to
    return entry


def _place_unused_params(nodes_json: List[dict], trace: Trace, dtype: str) -> None:
    """Parameters no op read (an unused last vision layer) still take memory: put each on
    the node of its nearest module, else on the first node."""
    for name, param, tied in trace.unused_params:
        target = nodes_json[0]
        best = -1
        for entry in nodes_json:
            prefix = entry["name"]
            if name.startswith(prefix + ".") and len(prefix) > best:
                target, best = entry, len(prefix)
        target["params"].append(_param_json(name, param, tied, dtype))


def _lora_targets(nodes_json: List[dict], blocks_json: List[dict]) -> List[str]:
    linears = [n["name"] for n in nodes_json
               if n["op"] == "linear" and blocks_json[n["block"]]["checkpointable"]]
    found = [c for c in _LORA_CANDIDATES if any(n.endswith("." + c) for n in linears)]
    if found:
        return found
    return sorted({n.rsplit(".", 1)[-1] for n in linears})
