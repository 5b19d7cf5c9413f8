"""torchao's low-bit AdamW (AdamW8bit, AdamW4bit; the Trainer's `adamw_torch_8bit`,
`adamw_torch_4bit`) on the meta device.

What decides each state is the release's own Python, run as it is (torchao 0.17.0
`optim/adam.py` `_AdamBase.step` and `_new_buffer`, `subclass_8bit.py` /
`subclass_4bit.py` `OptimState8bit.zeros` / `OptimState4bit.zeros`): uint8 codes, one
fp32 scale per block and each state's own fp32 copy of its quantization map, or a plain
`zeros_like` under 4096 elements or off the block.

Replaced, while `torchao_optimizers_on_meta` is active: the update. `_AdamBase.step` runs
`torch.compile(single_param_adam, fullgraph=True)` for every parameter, one compiled
kernel on CUDA that updates the parameter and the states in place. Under the recorder's
TorchDispatchMode dynamo does not compile: torch 2.11 `_dynamo/convert_frame.py` skips a
frame while a dispatch mode is on the stack (`is_in_any_mode_without_ignore_compile_internals`),
so the function would run op by op, its fp32 intermediates (`p.float()`, `grad.float()`,
two `lerp`s, `sub`, `div`, `add`: 3.8 GB for Qwen2.5-0.5B's 151936 x 896 embedding) each
an allocation that the compiled kernel does not make, and inductor does not generate
code for the meta device. So `single_param_adam` is replaced by a kernel that writes in
place and allocates nothing, as headroom prices the compiled step (docs/stacks.md,
"torchao's low-bit AdamW"). A GPU run would be needed to check what inductor's kernels
allocate beside their outputs.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from patching import patched

# transformers' `optim` names that build a torchao optimizer (trainer_optimizer.py
# `_get_torchao_optimizer`)
TORCHAO_OPTIMS = ("adamw_torch_8bit", "adamw_torch_4bit")


def _fused_step(*args, **kwargs) -> None:
    """The compiled per-parameter update: in place, nothing allocated (module docstring)."""


@contextlib.contextmanager
def torchao_optimizers_on_meta() -> Iterator[None]:
    """The replacement above (module docstring)."""
    import torchao.optim.adam as adam

    with patched(adam, "single_param_adam", _fused_step):
        yield
