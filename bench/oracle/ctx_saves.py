"""What an autograd Function keeps for backward on `ctx` attributes instead of
`save_for_backward`: saved activations, though saved_tensors_hooks never see them.

bitsandbytes up to 0.43.1: `MatMul4Bit.forward` keeps its input and the 4-bit weight as
`ctx.tensors = (A, B)` (`bitsandbytes/autograd/_functions.py`, 0.43.1, line 516);
`MatMul8bitLt.forward` keeps `ctx.tensors = (CAt, subA, A)` (line 425). From 0.43.2 the
4-bit one keeps `(None, B)`, the weight only. The tensor is held by the graph node until
its backward runs, as a saved one is, so it is a saved activation (docs/memory-model.md,
"Categories at the peak"). The weight among them (the Function's `B`, a view of a
`Params4bit` or of the parameter FSDP gathered) is not marked: it stays what it is.
The Function's own forward runs unchanged; the tensors are marked after it returns.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from patching import patched

# the Functions of a bitsandbytes release that keep tensors on ctx.tensors
_FUNCTIONS = ("MatMul4Bit", "MatMul8bitLt")


def _marking(forward, recorder):
    def forward_and_mark(ctx, A, B, *args, **kwargs):
        out = forward(ctx, A, B, *args, **kwargs)
        weight = B.untyped_storage()._cdata if isinstance(B, torch.Tensor) else None
        held = [t for t in (getattr(ctx, "tensors", None) or ()) if isinstance(t, torch.Tensor)]
        recorder.mark("saved_activations", [t for t in held if t.untyped_storage()._cdata != weight])
        return out
    return staticmethod(forward_and_mark)


@contextlib.contextmanager
def ctx_saves_marked(recorder) -> Iterator[None]:
    """bitsandbytes' ctx-held tensors marked as saved activations; nothing where the
    environment has no bitsandbytes."""
    try:
        from bitsandbytes.autograd import _functions
    except ImportError:
        yield
        return
    with contextlib.ExitStack() as stack:
        for name in _FUNCTIONS:
            function = getattr(_functions, name, None)
            if function is not None:
                stack.enter_context(patched(function, "forward", _marking(function.forward, recorder)))
        yield
