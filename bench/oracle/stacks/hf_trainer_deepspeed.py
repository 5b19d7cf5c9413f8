"""The Trainer with `deepspeed=` a ZeRO config, rank 0 of `world_size` (spec key
`zero_stage`: 2 or 3; the config is stacks/deepspeed_config.py's), or the spec's `rank`.

What runs is the Trainer's own `_prepare_for_training` (transformers' `deepspeed_init`:
the Trainer's optimizer, torch's AdamW, handed to DeepSpeed as a client optimizer),
accelerate's `_prepare_deepspeed` and `deepspeed.initialize`: the engine, ZeRO's
optimizer (stage_1_and_2.py, stage3.py), ZeRO-3's `zero.Init`-free conversion of the
module's parameters, every bucket, partition and hook. In the step, accelerate's
`backward` runs `engine.backward` and `engine.step` (clipping, the optimizer, zeroing).
What the oracle changes, besides fake_pg.py's process group:

- **DeepSpeed's accelerator** is meta_accelerator.py's: its device is meta, its
  streams and events do nothing, and it answers the GPU's `is_synchronized_device`.
- **the overflow check** reads 0, no inf or nan (`_finite_gradients`).
- **the ranks' agreement check** of ZeRO-3 is skipped (`_ranks_agree`).
- **the logged gradient norm** reads 0 (`_logged_norm`).
- **DeepSpeed's own meta tensors**: ZeRO-1/2 keep a meta copy of each 16-bit parameter for
  its shape (`round_robin_bit16_meta`); they hold no memory on a GPU and are not counted.
- **bf16 support**: TrainingArguments asks whether the GPU supports bf16 (`_bf16_gpu`).
- **state a process keeps**: DeepSpeed's cached groups, its comm backend and ZeRO-3's
  replacement of `torch.nn.functional.linear` are reset after each run (`_deepspeed_globals`):
  one oracle process runs several configurations, a real run is one.
- **accelerate's backend**: as stacks/hf_trainer_fsdp.py (("fake", MULTI_GPU), the
  device the CPU), with `use_cpu` off: accelerate turns DeepSpeed on only then
  (`AcceleratorState.__init__`). `deepspeed.comm` finds torch's fake group already
  initialized and wraps it (`comm.init_distributed`).
"""

from __future__ import annotations

import tempfile

import contextlib
import copy
from typing import Iterator

from fake_pg import fake_process_group
from meta_accelerator import meta_accelerator
from meta_recorder import logged_values
from patching import patched
from stacks import hf_trainer_fsdp
from stacks.deepspeed_config import deepspeed_config


def deepspeed_arguments(spec: dict) -> dict:
    """TrainingArguments' `deepspeed` (the config as a dict) and the device it needs."""
    return {"deepspeed": deepspeed_config(spec), "use_cpu": False}


def run(spec: dict, recorder, build_trainer, record_steps) -> dict:
    """The Trainer's own preparation under DeepSpeed, then `steps` optimizer steps."""
    with _deepspeed_globals(), fake_process_group(spec["world_size"], spec.get("rank", 0)), hf_trainer_fsdp.accelerate_on_fake_group(), \
            meta_accelerator(), _bf16_gpu(), _finite_gradients(recorder), _ranks_agree(), \
            _logged_norm(recorder):
        with tempfile.TemporaryDirectory() as output_dir:
            trainer = build_trainer(spec, output_dir)
            engine, _ = trainer._prepare_for_training(spec.get("steps", 2), None, None)
            # ZeRO-1/2's shape records of the 16-bit parameters, made on meta by DeepSpeed
            # itself (stage_1_and_2.py __init__, `round_robin_bit16_meta`): no GPU memory
            recorder.disown(t for group in getattr(engine.optimizer, "round_robin_bit16_meta", [])
                            for t in group)
            with engine_phases(recorder):
                record_steps(spec, recorder, trainer, engine, trainer.optimizer,
                             extra_params=zero_partitions(engine))
            return {"optim": str(getattr(trainer.args.optim, "value", trainer.args.optim))}


@contextlib.contextmanager
def _deepspeed_globals() -> Iterator[None]:
    """deepspeed.comm's backend (`comm.cdb`) and the groups deepspeed.utils.groups caches
    outlive a run, bound to its process group; each run of a batch (one process) starts
    from the state DeepSpeed had at import. So does `torch.nn.functional.linear`: ZeRO-3
    replaces it with its own (partition_parameters.py `_enable_mem_efficient_linear`,
    "This will persist unless manually reset"), which saves every linear's input; a
    ZeRO-2 run after it in the same process would keep it, where a real one has torch's."""
    import torch.nn.functional as F
    from deepspeed.comm import comm
    from deepspeed.utils import groups

    cached = [n for n in vars(groups) if n in ("mpu", "mesh_device") or (n.startswith("_") and n[1:2].isupper())]
    saved = {n: copy.copy(vars(groups)[n]) for n in cached}
    cdb = comm.cdb
    linear = F.linear
    try:
        yield
    finally:
        comm.cdb = cdb
        F.linear = linear
        for name, value in saved.items():
            setattr(groups, name, value)


@contextlib.contextmanager
def _bf16_gpu() -> Iterator[None]:
    """TrainingArguments refuses `bf16` without `use_cpu` unless a GPU supports it
    (`is_torch_bf16_gpu_available`); the GPU the run stands for, an H200, does."""
    import transformers.training_args as training_args

    with patched(training_args, "is_torch_bf16_gpu_available", lambda: True):
        yield


@contextlib.contextmanager
def _finite_gradients(recorder) -> Iterator[None]:
    """ZeRO's `has_overflow` reads whether any gradient is inf or nan (`.item()` of the
    reduced flag), and `is_invalid_grad_norm` (runtime/utils.py) whether the norm is, to
    skip the step; a meta tensor has no value, and a finite step is the one a run takes:
    the flag reads 0 (the check's own tensors are still ZeRO's), the norm is valid (its
    check is a few scalars; the recorder would read the bool as True, a skipped step)."""
    from deepspeed.runtime.zero import stage3, stage_1_and_2
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    def finite(original):
        def has_overflow(self, *args, **kwargs):
            with logged_values(recorder):
                return original(self, *args, **kwargs)
        return has_overflow

    with patched(DeepSpeedZeroOptimizer, "has_overflow", finite(DeepSpeedZeroOptimizer.has_overflow)), \
            patched(DeepSpeedZeroOptimizer_Stage3, "has_overflow",
                    finite(DeepSpeedZeroOptimizer_Stage3.has_overflow)), \
            patched(stage_1_and_2, "is_invalid_grad_norm", lambda norm: False), \
            patched(stage3, "is_invalid_grad_norm", lambda norm: False):
        yield


@contextlib.contextmanager
def _logged_norm(recorder) -> Iterator[None]:
    """The Trainer's `_clip_grad_norm` under DeepSpeed only reads the engine's gradient
    norm for its log (accelerate's `DeepSpeedEngineWrapper.get_global_grad_norm`,
    `.item()`): it reads 0, as TRL's logged metrics do (meta_recorder.logged_values)."""
    from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

    original = DeepSpeedEngineWrapper.get_global_grad_norm

    def get_global_grad_norm(self):
        with logged_values(recorder):
            return original(self)

    with patched(DeepSpeedEngineWrapper, "get_global_grad_norm", get_global_grad_norm):
        yield


@contextlib.contextmanager
def _ranks_agree() -> Iterator[None]:
    """ZeRO-3 checks that every rank traced the same modules and parameters
    (`assert_ints_same_as_other_ranks`: rank 0's list broadcast and read with `.item()`).
    One process plays every rank, and the fake group's broadcast carries no data, so
    the check is skipped; it allocates a few integers."""
    from deepspeed.runtime.zero import partition_parameters, partitioned_param_coordinator, stage3, utils

    agree = lambda ints: None  # noqa: E731
    with patched(utils, "assert_ints_same_as_other_ranks", agree), \
            patched(partition_parameters, "assert_ints_same_as_other_ranks", agree), \
            patched(partitioned_param_coordinator, "assert_ints_same_as_other_ranks", agree), \
            patched(stage3, "assert_ints_same_as_other_ranks", agree):
        yield


def zero_partitions(engine) -> list:
    """What ZeRO keeps that `model.parameters()` does not list: ZeRO-1/2's fp32 partitions
    (`single_partition_of_fp32_groups`), ZeRO-3's fp32 partitions
    (`fp32_partitioned_groups_flat`) and every parameter's 16-bit partition, frozen ones
    included (`ds_tensor`; the parameter itself is empty between gathers)."""
    found = list(getattr(engine.optimizer, "single_partition_of_fp32_groups", []))
    found += list(getattr(engine.optimizer, "fp32_partitioned_groups_flat", []))
    found += [p.ds_tensor for p in engine.module.parameters() if getattr(p, "ds_tensor", None) is not None]
    return found


@contextlib.contextmanager
def engine_phases(recorder) -> Iterator[None]:
    """The recorder's phase names the engine's part of accelerate's `backward`:
    `engine.backward` (the backward pass, ZeRO's reduction hooks) and `engine.step`
    (clipping, the optimizer, the all-gather of updated partitions)."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    def in_phase(original, part):
        def method(self, *args, **kwargs):
            outer = recorder.phase
            recorder.phase = outer.replace("forward_backward", part)
            try:
                return original(self, *args, **kwargs)
            finally:
                recorder.phase = outer
        return method

    with patched(DeepSpeedEngine, "backward", in_phase(DeepSpeedEngine.backward, "backward")), \
            patched(DeepSpeedEngine, "step", in_phase(DeepSpeedEngine.step, "engine_step")):
        yield
