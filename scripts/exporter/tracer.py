"""Records what one training step of a PyTorch model allocates, saves and computes.

A forward pass runs under three hooks at once:
- forward pre/post hooks on every module keep a module stack, so each aten op
  and each saved tensor is attributed to a node: the call of a leaf module
  (nn.Linear, a norm, an activation), or a run of functional ops executed
  directly in a container's forward (residual adds, RoPE, attention);
- a TorchDispatchMode sees every aten op with real (or meta) tensors: which
  storages it reads, which new storages it allocates, and its FLOPs (PyTorch's
  own flop_counter formulas);
- saved_tensors_hooks see every tensor autograd keeps for backward.
Tensors are identified by their storage, because that is what memory holds: a
saved view keeps its whole base storage alive, and two views of one storage
count once. Storages are kept referenced until the trace ends so that no
address is reused while we still key on it.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set, Tuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from flash_attention import flash_like_sdpa

_MATMULS = {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm,
            torch.ops.aten.baddbmm, torch.ops.aten.convolution, torch.ops.aten._convolution}


@dataclass
class StorageRecord:
    """One storage seen in the trace: an activation, a graph input, a buffer or a parameter."""

    key: int
    nbytes: int
    itemsize: int
    dtype: torch.dtype
    producer: Optional[int]  # node index, None when it existed before the forward
    name: str = ""           # graph inputs and buffers: their name
    is_param: bool = False
    readers: Set[int] = field(default_factory=set)
    savers: Set[int] = field(default_factory=set)

    @property
    def elements(self) -> int:
        return self.nbytes // self.itemsize


@dataclass
class NodeRecord:
    """A leaf-module call or a run of functional ops in one container call."""

    name: str
    op: str
    block: int
    module_path: str
    index: int = 0  # position in Trace.nodes
    inputs: List[int] = field(default_factory=list)    # storage keys read, produced elsewhere
    produced: List[int] = field(default_factory=list)  # storage keys allocated here
    saves: List[int] = field(default_factory=list)     # storage keys kept for backward
    params: List[Tuple[str, nn.Parameter, str]] = field(default_factory=list)  # name, p, tied_to
    fwd_flops: int = 0
    bwd_input_flops: int = 0
    bwd_param_flops: int = 0
    ops: List[str] = field(default_factory=list)
    linear: Optional[Tuple[int, int, int]] = None  # in_features, out_features, rows


@dataclass
class BlockRecord:
    name: str
    kind: str
    checkpointable: bool


@dataclass
class Trace:
    """Everything recorded at one (batch, seq)."""

    blocks: List[BlockRecord]
    nodes: List[NodeRecord]
    storages: Dict[int, StorageRecord]
    graph_outputs: List[int]  # storage keys of the loss / returned outputs
    unused_params: List[Tuple[str, nn.Parameter, str]]


@dataclass
class _Frame:
    path: str
    module: Optional[nn.Module]
    leaf_node: Optional[int] = None
    glue_node: Optional[int] = None
    glue_runs: int = 0
    block: Optional[int] = None  # set when this frame is a block of the chain


class _Packed:
    """What autograd holds for one saved activation: lets the recorder see, through a
    weak reference, whether the autograd graph still holds it when the forward ends."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def _unpack(packed: object) -> torch.Tensor:
    return packed.tensor if isinstance(packed, _Packed) else packed  # type: ignore[return-value]


def _storage(t: torch.Tensor) -> torch.UntypedStorage:
    return t.untyped_storage()


def _tensors(tree: object) -> List[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def leaf_op_kind(module: nn.Module) -> str:
    """The layer-graph `op` of a leaf module; "linear" is what LoRA/QLoRA look for."""
    name = type(module).__name__.lower()
    if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
        return "linear"  # transformers' Conv1D (GPT-2) is a linear with a [in, out] weight
    if isinstance(module, nn.Embedding):
        return "embedding"
    if "norm" in name:
        return "norm"
    if "dropout" in name:
        return "dropout"
    if isinstance(module, (nn.modules.conv._ConvNd,)):
        return "conv"
    if any(k in name for k in ("gelu", "silu", "relu", "swish", "tanh", "sigmoid", "activation")):
        return "activation"
    return type(module).__name__


def _linear_features(module: nn.Module) -> Optional[Tuple[int, int]]:
    """(in, out) of an nn.Linear or a transformers Conv1D (weight [in, out])."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D":
        weight = getattr(module, "weight")
        return int(weight.shape[0]), int(weight.shape[1])
    return None


def _glue_op_kind(ops: List[str]) -> str:
    joined = " ".join(ops)
    if "nll_loss" in joined or "mse_loss" in joined or "cross_entropy" in joined:
        return "loss"
    if "attention" in joined or "softmax" in joined:
        return "attention"
    return "ops"


class Recorder:
    """Attributes ops, allocations and saves of one forward to nodes and blocks."""

    def __init__(self, model: nn.Module, block_modules: Dict[nn.Module, str],
                 named_inputs: Dict[str, torch.Tensor], model_flash_sdpa: bool) -> None:
        self.model = model
        self.block_modules = block_modules
        self.model_flash_sdpa = model_flash_sdpa
        self.flash_follows_q_layout = False  # flash_attention.py: the output's layout
        self.blocks: List[BlockRecord] = []
        self.nodes: List[NodeRecord] = []
        self.storages: Dict[int, StorageRecord] = {}
        self._alive: List[torch.UntypedStorage] = []
        self._stack: List[_Frame] = []
        self._outside = _Frame(path="", module=None)
        self._names_used: Dict[str, int] = {}
        self._active = False
        self._suspended = 0
        self._param_names: Dict[int, List[Tuple[str, nn.Parameter]]] = {}
        self._first_name: Dict[int, str] = {}  # id(param) -> the name it was first placed as
        self._placed: Set[str] = set()          # parameter names placed on a node
        self._leaf = {m: not any(True for _ in m.children()) for m in model.modules()}
        self._paths = {m: p for p, m in model.named_modules(remove_duplicate=False)}
        for name, p in model.named_parameters(remove_duplicate=False):
            key = _storage(p)._cdata
            self._param_names.setdefault(key, []).append((name, p))
        self._buffer_names = {_storage(b)._cdata: name for name, b in model.named_buffers()}
        self._input_names = {_storage(t)._cdata: name for name, t in named_inputs.items()}
        self._handles: List[object] = []
        self._packs: List[Tuple[weakref.ref, int, int]] = []

    # -- module stack -------------------------------------------------------
    def _install(self) -> None:
        for module in self.model.modules():
            self._handles.append(module.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post_hook, always_call=True))

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not self._active:
            return
        parent = self._stack[-1] if self._stack else self._outside
        parent.glue_node = None  # a child call ends the parent's run of ops
        frame = _Frame(path=self._paths.get(module, type(module).__name__), module=module)
        if module in self.block_modules and self._current_block_frame() is None:
            frame.block = len(self.blocks)
            self.blocks.append(BlockRecord(self._unique(frame.path, blocks=True),
                                           self.block_modules[module], True))
        self._stack.append(frame)
        if self._leaf.get(module, False):
            frame.leaf_node = self._new_node(frame.path, leaf_op_kind(module), frame.path)
            node = self.nodes[frame.leaf_node]
            for name, p in module.named_parameters(recurse=False, remove_duplicate=False):
                self._attach_param(node, frame.path + "." + name if frame.path else name, p)
            features = _linear_features(module)
            if features is not None:
                x = (_tensors(args) or _tensors(kwargs))[0]
                node.linear = (features[0], features[1], x.numel() // features[0])

    def _post_hook(self, module: nn.Module, args: tuple, output: object) -> None:
        if not self._active or not self._stack:
            return
        self._stack.pop()
        parent = self._stack[-1] if self._stack else self._outside
        parent.glue_node = None

    def _current_block_frame(self) -> Optional[_Frame]:
        for frame in reversed(self._stack):
            if frame.block is not None:
                return frame
        return None

    def _unique(self, name: str, blocks: bool = False) -> str:
        key = ("block:" if blocks else "node:") + name
        count = self._names_used.get(key, 0) + 1
        self._names_used[key] = count
        return name if count == 1 else f"{name}#{count}"

    def _current_block(self) -> int:
        frame = self._current_block_frame()
        if frame is not None:
            return frame.block  # type: ignore[return-value]
        if not self.blocks or self.blocks[-1].checkpointable:
            self.blocks.append(BlockRecord("", "glue", False))
        return len(self.blocks) - 1

    def _new_node(self, name: str, op: str, module_path: str) -> int:
        node = NodeRecord(self._unique(name), op, self._current_block(), module_path,
                          len(self.nodes))
        self.nodes.append(node)
        return len(self.nodes) - 1

    def current_node(self) -> NodeRecord:
        frame = self._stack[-1] if self._stack else self._outside
        if frame.leaf_node is not None:
            return self.nodes[frame.leaf_node]
        if frame.glue_node is None:
            base = f"{frame.path}.ops{frame.glue_runs}" if frame.path else f"ops{frame.glue_runs}"
            frame.glue_runs += 1
            frame.glue_node = self._new_node(base, "ops", frame.path)
        return self.nodes[frame.glue_node]

    def _attach_param(self, node: NodeRecord, name: str, p: nn.Parameter) -> None:
        """Places a parameter on a node once; a second name of one tensor is a tie."""
        if name in self._placed:
            return
        first = self._first_name.setdefault(id(p), name)
        node.params.append((name, p, "" if first == name else first))
        self._placed.add(name)

    # -- storages -----------------------------------------------------------
    def _known(self, t: torch.Tensor, node_index: int) -> StorageRecord:
        storage = _storage(t)
        key = storage._cdata
        record = self.storages.get(key)
        if record is None:
            is_param = key in self._param_names
            name = self._input_names.get(key) or self._buffer_names.get(key, "")
            record = StorageRecord(key, storage.nbytes(), t.element_size(), t.dtype, None,
                                   name=name, is_param=is_param)
            self.storages[key] = record
            self._alive.append(storage)
        return record

    def note_read(self, t: torch.Tensor, node_index: int) -> None:
        if t.untyped_storage().nbytes() == 0:
            return  # empty placeholders hold no memory
        record = self._known(t, node_index)
        node = self.nodes[node_index]
        if record.is_param:
            name, p = self._param_names[record.key][0]
            if id(p) not in self._first_name:
                self._attach_param(node, name, p)
            return
        record.readers.add(node_index)
        if record.producer != node_index and record.key not in node.inputs:
            node.inputs.append(record.key)

    def note_output(self, t: torch.Tensor, node_index: int) -> None:
        storage = _storage(t)
        key = storage._cdata
        if key in self.storages:
            return  # a view or an in-place result: no new memory
        self.storages[key] = StorageRecord(key, storage.nbytes(), t.element_size(), t.dtype,
                                           node_index)
        self._alive.append(storage)
        self.nodes[node_index].produced.append(key)

    def note_saved(self, t: torch.Tensor) -> Optional[Tuple[int, int]]:
        """(storage key, node index) of an activation autograd saves; None for parameters."""
        node = self.current_node()
        index = self.node_index(node)
        if t.untyped_storage().nbytes() == 0:
            return None
        record = self._known(t, index)
        if record.is_param:
            return None
        if record.producer != index:
            self.note_read(t, index)
        return record.key, index

    def node_index(self, node: NodeRecord) -> int:
        return node.index

    def add_flops(self, fwd: int, bwd_input: int, bwd_param: int, op: str) -> None:
        node = self.current_node()
        node.fwd_flops += fwd
        node.bwd_input_flops += bwd_input
        node.bwd_param_flops += bwd_param
        node.ops.append(op)

    @property
    def recording(self) -> bool:
        return self._active and self._suspended == 0

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Ops run here are not recorded (the reference math of modelled kernels)."""
        self._suspended += 1
        try:
            yield
        finally:
            self._suspended -= 1

    # -- the run ------------------------------------------------------------
    @contextlib.contextmanager
    def recording_forward(self) -> Iterator[None]:
        self._install()
        self._active = True
        modes: List[contextlib.AbstractContextManager] = [_DispatchRecorder(self),
                                                         _GpuKernelMode(self, self.model_flash_sdpa)]
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
                with contextlib.ExitStack() as stack:
                    for mode in modes:
                        stack.enter_context(mode)
                    yield
        finally:
            self._active = False
            self._remove()

    def _pack(self, t: torch.Tensor) -> object:
        if not self.recording:
            return t
        saved = self.note_saved(t)
        if saved is None:
            return t
        packed = _Packed(t)
        self._packs.append((weakref.ref(packed), saved[0], saved[1]))
        return packed

    def _keep_live_saves(self) -> None:
        """Saves whose autograd node is still reachable when the forward ends.

        A saved tensor lives as long as the grad_fn holding it: an output that
        nothing uses afterwards (LLaVA's last vision layer, whose hidden state is
        dropped) frees its saves during the forward, so they are not kept.
        """
        gc.collect()
        for ref, key, index in self._packs:
            if ref() is None:
                continue
            self.storages[key].savers.add(index)
            node = self.nodes[index]
            if key not in node.saves:
                node.saves.append(key)
        self._packs.clear()

    def finish(self, outputs: List[torch.Tensor]) -> Trace:
        self._keep_live_saves()
        graph_outputs = []
        for t in outputs:
            key = _storage(t)._cdata
            if key in self.storages:
                graph_outputs.append(key)
        unused = []
        for names in self._param_names.values():
            for name, p in names:
                if name not in self._placed:
                    first = self._first_name.setdefault(id(p), name)
                    unused.append((name, p, "" if first == name else first))
                    self._placed.add(name)
        return Trace(self.blocks, self.nodes, self.storages, graph_outputs, unused)


class _DispatchRecorder(TorchDispatchMode):
    """Sees every aten op below autograd: reads, new storages and FLOPs."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        rec = self.recorder
        if not rec.recording:
            return out
        node = rec.current_node()
        index = rec.node_index(node)
        inputs = _tensors((args, kwargs))
        for t in inputs:
            rec.note_read(t, index)
        for t in _tensors(out):
            rec.note_output(t, index)
        packet = func.overloadpacket
        fwd = bwd_in = bwd_param = 0
        if packet in flop_registry:
            fwd = int(flop_registry[packet](*args, **kwargs, out_val=out))
            if func.overloadpacket in _MATMULS:
                weights = [t for t in inputs if rec.storages[_storage(t)._cdata].is_param]
                if weights:
                    # dX = dY W and dW = dY^T X cost what the forward costs; a bias
                    # gradient adds a column sum (one FLOP per output element).
                    bwd_in, bwd_param = fwd, fwd + (out.numel() if len(weights) > 1 else 0)
                else:
                    bwd_in = 2 * fwd  # both operands are activations
            else:
                bwd_in = 5 * fwd // 2  # fused attention: recompute P plus four matmuls
        node.fwd_flops += fwd
        node.bwd_input_flops += bwd_in
        node.bwd_param_flops += bwd_param
        node.ops.append(str(packet).split(".")[-1])
        return out


class _GpuKernelMode(TorchFunctionMode):
    """Routes two calls through what the GPU runs, whatever device traces them.

    - F.scaled_dot_product_attention: through the flash-attention model
      (flash_attention.py), when `flash` is set.
    - F.dropout in training: through torch.native_dropout, the fused kernel
      PyTorch uses on CUDA, which keeps a bool mask (1 byte per value). On CPU
      and meta, F.dropout instead multiplies by a noise tensor of the input's
      dtype and keeps that (2 or 4 bytes per value).
    """

    def __init__(self, recorder: Recorder, flash: bool) -> None:
        super().__init__()
        self.recorder = recorder
        self.flash = flash

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if not self.recorder.recording:
            return func(*args, **kwargs)
        if func is torch.nn.functional.scaled_dot_product_attention and self.flash:
            return flash_like_sdpa(self.recorder, *args, **kwargs)
        if func is torch.nn.functional.dropout:
            return _fused_dropout(*args, **kwargs)
        return func(*args, **kwargs)


def _fused_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True,
                   inplace: bool = False) -> torch.Tensor:
    if not training or p == 0.0 or input.numel() == 0:
        return input
    out, _mask = torch.native_dropout(input, p, True)
    if inplace:
        return input.copy_(out)
    return out


def finalize_nodes(trace: Trace) -> None:
    """Names glue blocks and node ops once the whole forward is known."""
    chain = [i for i, b in enumerate(trace.blocks) if b.checkpointable]
    for i, block in enumerate(trace.blocks):
        if block.checkpointable:
            continue
        if not chain or i < chain[0]:
            block.name = "embeddings" if chain else "model"
            block.kind = "embedding"
        elif i > chain[-1]:
            block.name, block.kind = "head", "head"
        else:
            block.name = f"glue.{i}"
    for node in trace.nodes:
        if node.op == "ops":
            node.op = _glue_op_kind(node.ops)
