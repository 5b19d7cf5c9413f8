"""Records what a training step allocates and frees on PyTorch's meta device.

Every aten op runs through a TorchDispatchMode. Each storage an op returns is
registered with its size and a C++ weak reference (StorageWeakRef); after each
op the recorder asks which registered storages have expired, so the timeline
holds every storage created and freed, in op order, the way the CUDA caching
allocator sees them (allocated bytes, not reserved). The peak is taken after an
op's outputs exist and before the storages it dropped are counted as freed,
which is when the real allocator holds both; what Python dropped between two ops
is counted as freed before the second one allocates.

Two things reach memory without an aten op, and the recorder follows both:
a tensor subclass that wraps others (DTensor, FSDP2's sharded parameters) is
counted by the tensors it holds (`__tensor_flatten__`), and a storage resized in
place (`UntypedStorage.resize_`, FSDP2's `alloc_storage` / `free_storage` of the
unsharded parameters) is allocated or freed by the difference.

Categories are decided at the end, when the recorder knows the whole step:
a parameter, a gradient (what `.grad` held), an optimizer state, a tensor
autograd saved for backward (saved_tensors_hooks, while a saved variable still holds
it at the peak, and what a Function keeps on ctx: ctx_saves.py), the batch, a
parameter FSDP gathered (gathered.py), or a transient.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Set

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

# `gathered`: FSDP's unsharded parameters (gathered.py), before saved activations: a
# gathered weight autograd saves is still a gathered weight
CATEGORIES = ("parameters", "gradients", "optimizer_states", "inputs", "gathered", "saved_activations",
              "transient")


@dataclass
class _Live:
    key: int
    nbytes: int
    ref: StorageWeakRef
    born_op: int
    label: str  # the op that made it, or the name it had before the step
    shape: str
    category: str = "transient"
    # Saved-tensor hooks' handles to it alive now (`Saved`) and, per stretch of ops with
    # at least one, [first op, op after the last one died or None]: a saved activation
    # is one a saved variable still holds (`saved_at`)
    saved_handles: int = 0
    saved_spans: List[list] = field(default_factory=list)
    # marked saved by other means (ctx attributes, torchtune's offloading hooks): no
    # handle tells when it is let go, so it stays a saved activation
    saved_otherwise: bool = False


@dataclass
class Recorder:
    """Live storages, their timeline and the peak. Keys are StorageImpl addresses."""

    live: Dict[int, _Live] = field(default_factory=dict)
    live_bytes: int = 0
    peak_bytes: int = 0
    peak_op: int = -1
    peak_phase: str = ""
    peak_records: Dict[int, _Live] = field(default_factory=dict)
    peak_sizes: Dict[int, int] = field(default_factory=dict)  # bytes of each at the peak (resizes)
    phase: str = "setup"
    # Whether a number read from a meta tensor before `begin` is 0 (`_scalar_of_meta`)
    zero_scalars_in_setup: bool = False
    # Whether a number read now is 0 anyway: a value the step only logs (`logged_values`)
    zero_scalars_logged: bool = False
    ops: List[dict] = field(default_factory=list)
    timeline: List[tuple] = field(default_factory=list)  # (op index, +/- bytes, key)
    # Storages one of whose tensors died since the last check: the only ones that can
    # have been freed, unless their last reference was a tensor made outside the
    # dispatcher (`.data`); `settle` checks every storage before a peak is taken.
    suspects: Set[int] = field(default_factory=set)
    watched: Dict[int, object] = field(default_factory=dict)
    # An accumulation autograd would have done in place (`accumulates_in_place`): the
    # buffer's storage key and the peak its out-of-place sum would set, kept until the
    # next op shows whether the buffer died with it.
    pending_key: Optional[int] = None
    pending_peak: Optional[tuple] = None
    # Storages a library makes on meta on purpose (shapes only, no memory on a GPU), by
    # key, with a weak reference: never counted while they live (`disown`)
    disowned: Dict[int, object] = field(default_factory=dict)
    # Bytes of bitsandbytes' paged optimizer states: CUDA unified memory, outside the
    # caching allocator and the peak (bnb_optimizer_shims.py)
    paged_optimizer_states: int = 0

    # -- storages -----------------------------------------------------------
    def adopt(self, tensors: Iterable[torch.Tensor], label: str) -> None:
        """Registers storages that existed before recording (weights, the batch)."""
        for t in tensors:
            self._register(t, label)

    def adopt_model(self, params: List[torch.Tensor], buffers: Iterable[torch.Tensor]) -> None:
        """The model's parameters (categorised as such) and buffers, made before recording."""
        self.adopt(params, "parameter")
        self.mark("parameters", params)
        self.adopt(buffers, "buffer")

    def adopt_batch(self, batch: object) -> None:
        """A batch the loader made before the step reads it: its tensors are the inputs."""
        tensors = tensors_of(batch)
        self.adopt(tensors, "batch")
        self.mark("inputs", tensors)

    def _watch(self, t: torch.Tensor, key: int) -> None:
        def died(ref, key=key, watched=self.watched, suspects=self.suspects):
            suspects.add(key)
            watched.pop(id(ref), None)

        ref = weakref.ref(t, died)
        self.watched[id(ref)] = ref

    def disown(self, tensors: Iterable[torch.Tensor]) -> None:
        """Storages a library made on meta itself, for their shapes (DeepSpeed's ZeRO-1/2
        `round_robin_bit16_meta`): on a GPU they hold no memory, so they are not counted,
        now or when a view of them is made."""
        for t in tensors:
            storage = t.untyped_storage()
            if storage._cdata in self.live:
                self._free(storage._cdata)
            self.disowned[storage._cdata] = StorageWeakRef(storage)

    def _register(self, t: torch.Tensor, label: str) -> None:
        if is_traceable_wrapper_subclass(t):
            for inner in _inner_tensors(t):
                self._register(inner, label)
            return
        if t.device.type != "meta" or t.is_sparse:
            return
        storage = t.untyped_storage()
        key = storage._cdata
        disowned = self.disowned.get(key)
        if disowned is not None:
            if not disowned.expired():
                return
            del self.disowned[key]  # the address reused by a new storage
        self._watch(t, key)
        old = self.live.get(key)
        if old is not None:
            if not old.ref.expired():
                return  # a view of a storage already counted
            self._free(key)
        record = _Live(key, storage.nbytes(), StorageWeakRef(storage), len(self.ops), label,
                       f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}")
        self.live[key] = record
        self.live_bytes += record.nbytes
        self.timeline.append((len(self.ops), record.nbytes, key))

    def _free(self, key: int) -> None:
        record = self.live.pop(key)
        self.live_bytes -= record.nbytes
        self.timeline.append((len(self.ops), -record.nbytes, key))

    def resized(self, storage: torch.UntypedStorage, nbytes: int) -> None:
        """A storage resized in place: the difference is allocated or freed now."""
        record = self.live.get(storage._cdata)
        if record is None or record.ref.expired():
            return  # made before recording began and never registered: nothing counted to change
        delta = nbytes - record.nbytes
        record.nbytes = nbytes
        self.live_bytes += delta
        self.timeline.append((len(self.ops), delta, record.key))
        if delta > 0:
            self.note_peak()

    def collect(self) -> None:
        """Counts as freed the storages whose tensors died and nothing references any more."""
        suspects = list(self.suspects)
        self.suspects.clear()
        for key in suspects:
            record = self.live.get(key)
            if record is not None and record.ref.expired():
                self._free(key)

    def settle(self) -> None:
        """Counts as freed every storage nothing references any more."""
        self.suspects.clear()
        for key in [k for k, r in self.live.items() if r.ref.expired()]:
            self._free(key)

    def begin(self, phase: str) -> None:
        """Forgets the peak of building the model (weights made, then quantized): the
        step's peak starts from what is live when it begins."""
        self.settle()
        self.pending_key = self.pending_peak = None
        self.phase = phase
        self.peak_bytes = self.live_bytes
        self.peak_op = len(self.ops) - 1
        self.peak_phase = phase
        self.peak_records = dict(self.live)
        self.peak_sizes = {k: r.nbytes for k, r in self.live.items()}

    def note_peak(self) -> None:
        """live_bytes can only overstate (a free not yet seen), so a new peak is settled
        exactly before it is taken."""
        if self.live_bytes > self.peak_bytes:
            self.settle()
        if self.live_bytes > self.peak_bytes:
            self._take_peak(self._snapshot())

    def _snapshot(self) -> tuple:
        return (self.live_bytes, len(self.ops) - 1, self.phase, dict(self.live),
                {k: r.nbytes for k, r in self.live.items()})

    def _take_peak(self, snapshot: tuple) -> None:
        self.peak_bytes, self.peak_op, self.peak_phase, self.peak_records, self.peak_sizes = snapshot

    def defer_peak(self, buffer_key: int) -> None:
        """The peak after an input-buffer sum, held back: autograd sums in place when it
        holds the buffer's only reference (`resolve_deferred`)."""
        self.settle()
        self.pending_key = buffer_key
        self.pending_peak = self._snapshot() if self.live_bytes > self.peak_bytes else None

    def resolve_deferred(self) -> None:
        """The buffer died right after its sum: the engine held its only reference and,
        outside this recording mode, would have added in place, so the sum's extra copy
        never existed and its peak is dropped. Otherwise the peak stands."""
        if self.pending_key is None:
            return
        record = self.live.get(self.pending_key)
        died = record is None or record.ref.expired()
        if not died and self.pending_peak is not None and self.pending_peak[0] > self.peak_bytes:
            self._take_peak(self.pending_peak)
        self.pending_key = None
        self.pending_peak = None

    # -- categories ---------------------------------------------------------
    def mark(self, category: str, tensors: Iterable[Optional[torch.Tensor]], by_hook: bool = False) -> None:
        """Gives live storages a category; an earlier entry of CATEGORIES wins
        (a saved weight stays a parameter). The record, not the address, carries it,
        so an address reused after a free starts as a transient again. `by_hook`: saved
        through the recorder's own pack hook (`saved`), which tells when it is let go."""
        rank = CATEGORIES.index(category)
        for t in tensors:
            if is_traceable_wrapper_subclass(t):
                self.mark(category, _inner_tensors(t))
                continue
            if not isinstance(t, torch.Tensor) or t.device.type != "meta":
                continue
            record = self.live.get(t.untyped_storage()._cdata)
            if record is None:
                continue
            if rank < CATEGORIES.index(record.category):
                record.category = category
            if category == "saved_activations" and not by_hook:
                record.saved_otherwise = True

    def saved(self, t: torch.Tensor) -> Optional["Saved"]:
        """What the saved-tensor pack hook hands autograd for `t`: marks it a saved
        activation and counts the saved variable holding it until that lets it go."""
        plain = isinstance(t, torch.Tensor) and not is_traceable_wrapper_subclass(t) and t.device.type == "meta"
        self.mark("saved_activations", [t], by_hook=plain)
        record = self.live.get(t.untyped_storage()._cdata) if plain else None
        if record is None:
            return None
        if record.saved_handles == 0:
            record.saved_spans.append([len(self.ops), None])
        record.saved_handles += 1
        return Saved(t, record, self)

    def category_at_peak(self, record: _Live) -> str:
        """A tensor saved through the hook is a saved activation at the peak unless every
        saved variable that held it had let it go by then (docs/memory-model.md, "Categories
        at the peak"): autograd releases a node's saved variables once its backward has
        run (torch/csrc/autograd/engine.cpp `evaluate_function`, `release_variables`), and
        what lives on is held by something else. Liger's fused linear cross-entropy saves
        the weight's and the input's gradients in forward and returns them in backward,
        where they wait in the engine's input buffer as gradients in flight (a tied
        weight's until the embedding's backward has added its part). One saved only
        after the peak, or kept on ctx (ctx_saves.py: no handle), keeps its label."""
        if record.category != "saved_activations" or record.saved_otherwise or not record.saved_spans:
            return record.category
        held = any(start <= self.peak_op and (end is None or end > self.peak_op)
                   for start, end in record.saved_spans)
        released = any(end is not None and end <= self.peak_op for _, end in record.saved_spans)
        return "transient" if released and not held else record.category

    def at_peak(self) -> Dict[str, int]:
        totals = {c: 0 for c in CATEGORIES}
        for key, record in self.peak_records.items():
            totals[self.category_at_peak(record)] += self.peak_sizes[key]
        return totals


class Saved:
    """The pack hook's handle to a saved tensor: the saved variable holds it, and drops it
    when autograd releases the node's saved variables (or the graph dies)."""

    __slots__ = ("tensor", "record", "recorder")

    def __init__(self, tensor: torch.Tensor, record: _Live, recorder: Recorder) -> None:
        self.tensor, self.record, self.recorder = tensor, record, recorder

    def __del__(self) -> None:
        self.record.saved_handles -= 1
        if self.record.saved_handles == 0:
            self.record.saved_spans[-1][1] = len(self.recorder.ops)


class _Mode(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            setup = self.recorder.zero_scalars_in_setup and self.recorder.phase == "setup"
            setup = setup or self.recorder.zero_scalars_logged
            return _scalar_of_meta(args[0], setup)
        rec = self.recorder
        rec.collect()  # what Python dropped since the last op is free before this one allocates
        rec.resolve_deferred()
        out = func(*args, **(kwargs or {}))
        leaves, _ = tree_flatten(out)
        made = [t for t in leaves if isinstance(t, torch.Tensor)]
        ins, _ = tree_flatten((args, kwargs))
        rec.ops.append({"op": str(func.overloadpacket.__name__), "phase": rec.phase,
                        "shapes": [list(t.shape) for t in ins if isinstance(t, torch.Tensor)][:4],
                        "dtype": str(made[0].dtype).replace("torch.", "") if made else ""})
        for t in made:
            rec._register(t, func.overloadpacket.__name__)
        buffer = accumulates_in_place(func, args, kwargs)
        if buffer is not None:
            rec.defer_peak(buffer.untyped_storage()._cdata)
        else:
            rec.note_peak()
        rec.collect()
        return out


def accumulates_in_place(func, args, kwargs) -> Optional[torch.Tensor]:
    """The input buffer an autograd accumulation adds into, where the engine would add in
    place: inside backward with grad mode off, `old + new` of two meta tensors of one shape
    and dtype whose first is a dense tensor of its own storage (not a view: the transposed
    weight gradient a linear's backward hands on is summed out of place, also with no
    recording). torch/csrc/autograd/input_buffer.cpp `accumulate` adds in place when
    `can_accumulate_inplace(old_var)`: it holds the TensorImpl's and the storage's only
    reference. Under any TorchDispatchMode the tensor's Python object holds one more, so
    the engine always adds out of place here; whether the buffer had other holders shows
    when the next op runs (Recorder.resolve_deferred)."""
    if func is not torch.ops.aten.add.Tensor or kwargs or len(args) != 2 or torch.is_grad_enabled():
        return None
    if torch._C._current_graph_task_id() == -1:
        return None
    old, new = args
    if not (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)) or old.device.type != "meta":
        return None
    if old.shape != new.shape or old.dtype != new.dtype or old._is_view() or not old.is_contiguous():
        return None
    return old


def _inner_tensors(t: torch.Tensor) -> List[torch.Tensor]:
    names, _ = t.__tensor_flatten__()
    return [getattr(t, name) for name in names]


def _scalar_of_meta(t: torch.Tensor, setup: bool = False) -> object:
    """A meta tensor has no value. The branches the stacks take on one are checks like
    "is the attention mask all ones" or "is this batch unpacked" (transformers'
    masking_utils): the oracle's batch is unpadded and unpacked, so a boolean is True.
    Before the step (`setup`: building and wrapping the model, where the driver allows
    it) a number reads as 0: accelerate's FSDP2 preparation takes the state dict, whose bitsandbytes
    QuantState.as_dict reads the nested quantization's offset, and nothing allocated
    then depends on it. Any other scalar read would be a guess, so it stops the run."""
    if t.dtype == torch.bool:
        return True
    if setup:
        return 0.0 if t.dtype.is_floating_point else 0
    raise RuntimeError(f"meta_recorder: the step reads a {t.dtype} value of a meta tensor "
                       f"{tuple(t.shape)}; its memory depends on data the oracle does not have")


@contextlib.contextmanager
def logged_values(recorder: Recorder) -> Iterator[None]:
    """Numbers read from meta tensors inside are 0: for code whose reads are only logged
    (TRL's compute_loss reads its entropy and accuracy metrics with `.item()`)."""
    recorder.zero_scalars_logged = True
    try:
        yield
    finally:
        recorder.zero_scalars_logged = False


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Records ops and storages; saved_tensors_hooks mark what autograd keeps."""

    def pack(t: torch.Tensor) -> object:
        handle = recorder.saved(t)
        return t if handle is None else handle

    def unpack(packed: object) -> torch.Tensor:
        return packed.tensor if isinstance(packed, Saved) else packed

    resize = torch.UntypedStorage.resize_

    def resize_and_record(storage, nbytes):
        out = resize(storage, nbytes)
        if storage.device.type == "meta":
            recorder.resized(storage, nbytes)
        return out

    torch.UntypedStorage.resize_ = resize_and_record
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack), _Mode(recorder):
            yield recorder
    finally:
        torch.UntypedStorage.resize_ = resize
    recorder.settle()
    recorder.resolve_deferred()


def optimizer_state_tensors(optimizer) -> List[torch.Tensor]:
    """Every tensor of the optimizer's per-parameter state (moments, step counters)."""
    return [t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]


def tensors_of(obj: object) -> List[torch.Tensor]:
    leaves, _ = tree_flatten(obj)
    return [t for t in leaves if isinstance(t, torch.Tensor)]
