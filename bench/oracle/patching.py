"""One attribute replaced for the length of a `with`: how the oracle's shims reach into a
library (fake_pg.py, stacks/torchtune.py, stacks/torchtune_offload.py)."""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def patched(owner, name: str, value) -> Iterator[None]:
    """`owner.name` is `value` while active; restored exactly after (an attribute the
    owner only inherited is deleted again, not copied onto it)."""
    own = name in vars(owner)
    original = vars(owner)[name] if own else None
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)
