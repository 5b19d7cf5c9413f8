"""Checking a live training run before its first step, and measuring it.

check() predicts a run from a live model (its transformers config, its PEFT
adapters) and the run's settings (a TrainingArguments, a settings dict), and
raises DoesNotFitError when the prediction does not fit. Watch measures each
step's peak memory and time and writes them in the measurement format
`headroom report --measurement` reads (docs/report.md), next to the plan the
prediction was made for. HeadroomCallback (headroom.integrations.transformers)
is these two attached to a transformers Trainer. docs/python.md.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import stat
import tempfile
import time
import warnings
from typing import Any, Mapping, Optional

from ._api import HeadroomError, HeadroomNote, SettingsError, fit

GIB = 1 << 30

# What a CPU run's "peaks" are (the measurement file's "measured" field).
CPU_MEASURED = ("cpu: bytes of the parameters, gradients and optimizer states alive at the end of each step "
                "(activations and transients are not seen, so a lower bound of the step's peak allocated; "
                "the CPU has no caching allocator, so reserved = allocated)")
CUDA_MEASURED = "cuda: torch.cuda.max_memory_allocated / max_memory_reserved over each step, reset at its start"


class DoesNotFitError(HeadroomError):
    """The run as launched does not fit: raised before its first step.
    `answer` is the `headroom fit --json` document of the prediction."""

    def __init__(self, message: str, answer: dict):
        super().__init__(message, 1)
        self.answer = answer


def write_json_atomic(path: str, document: Any) -> None:
    """Writes `document` as JSON to `path` through a temporary file in the same
    folder and a rename, so a reader never sees half a file. Refuses to replace
    anything but a regular file (a symlink, FIFO or device), as headroom's
    outputs do (DESIGN.md)."""
    text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise HeadroomError(f"{path}: not a regular file; refusing to replace it (expected a file path)")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _gib(count: int) -> str:
    return f"{count / GIB:.2f} GiB"


def _refusal(answer: dict) -> str:
    """The message of DoesNotFitError: the verdict, the peak and the budget in
    numbers, and what `headroom plan` found instead."""
    prediction = answer["as_given"]["prediction"]
    lines = [
        "headroom: this run does not fit; stopped before step 1.",
        f"  {answer['verdict']}",
        f"  predicted peak {_gib(prediction['gpu_total_bytes'])} (reserved {_gib(prediction['peak_reserved_bytes'])}"
        f" + CUDA context) against a budget of {_gib(prediction['gpu_budget_bytes'])}"
        f" ({answer['gpu']['name']}, {_gib(prediction['gpu_capacity_bytes'])} less the safety margin)",
    ]
    if not prediction["fits_host"]:
        lines.append(f"  host RAM: needs {_gib(prediction['host_ram_bytes'])} of "
                     f"{_gib(prediction['host_ram_budget_bytes'])}")
    if not prediction["fits_disk"]:
        lines.append(f"  disk: needs {prediction['disk_bytes']} bytes of {prediction['disk_budget_bytes']}")
    alternative = answer.get("alternative") or {}
    best = alternative.get("best")
    if alternative.get("found") and best:
        config = best["config"]
        checkpointed = sum(1 for block in best["blocks"] if block["choice"] == "checkpoint")
        offloaded = sum(1 for block in best["blocks"] if block["choice"] == "offload")
        lines.append(f"  what fits: ZeRO-{config['zero_stage']}, micro-batch {config['micro_batch']} x "
                     f"{config['grad_accum']} accumulation, {checkpointed} blocks checkpointed, {offloaded} offloaded, "
                     f"optimizer offload {config['offload_optimizer']} "
                     f"(peak {_gib(best['prediction']['gpu_total_bytes'])})")
    for suggestion in alternative.get("suggestions", [])[:3]:
        lines.append(f"  or: {suggestion['change']}: {suggestion['detail']}")
    return "\n".join(lines)


def _model_files(model, out_dir: str) -> tuple[Optional[str], Optional[str]]:
    """Writes a transformers model's config.json (and its active PEFT adapter's
    adapter_config.json) into `out_dir`; returns their paths (None for what the
    model does not have)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_json_string"):
        return None, None
    config_path = os.path.join(out_dir, "config.json")
    write_json_atomic(config_path, json.loads(config.to_json_string(use_diff=False)))
    peft_configs = getattr(model, "peft_config", None)
    if not isinstance(peft_configs, Mapping) or not peft_configs:
        return config_path, None
    active = getattr(model, "active_adapter", None)
    if isinstance(active, (list, tuple)):
        active = active[0] if active else None
    adapter = peft_configs.get(active) if active in peft_configs else next(iter(peft_configs.values()))
    document = adapter.to_dict() if hasattr(adapter, "to_dict") else dict(vars(adapter))
    adapter_path = os.path.join(out_dir, "adapter_config.json")
    # Sets (target_modules) as sorted lists, enums and other objects by their value or name.
    write_json_atomic(adapter_path, json.loads(json.dumps(document, default=_plain)))
    return config_path, adapter_path


def _live_quantization(model) -> tuple[dict, Optional[str], Optional[str]]:
    """A bitsandbytes 4-bit model as the live model holds it: the settings it
    implies (QLoRA, its double quantization), the dtype its unquantized weights
    are in when 16-bit, and what the script did to them (kbit_prep, meaningful
    under the Trainer's bf16 autocast without DeepSpeed); ({}, None, None) for any
    other model. docs/stacks.md, "QLoRA preparation"."""
    quant = getattr(getattr(model, "config", None), "quantization_config", None)
    if quant is None:
        return {}, None, None
    quant = quant.to_dict() if hasattr(quant, "to_dict") else dict(quant)
    if quant.get("quant_method") != "bitsandbytes" or not quant.get("load_in_4bit"):
        return {}, None, None
    settings = {"mode": "qlora", "nf4_double_quant": bool(quant.get("bnb_4bit_use_double_quant", False))}
    import torch

    try:
        weight = model.get_input_embeddings().weight
    except (AttributeError, NotImplementedError):  # no embedding layer to read
        return settings, None, None
    if weight.dtype not in (torch.bfloat16, torch.float16):
        # fp32 embeddings: PEFT's prepare_model_for_kbit_training (or an fp32 load), which the
        # Trainer's bf16 prices as autocast over fp32 weights already.
        return settings, None, None
    # A 16-bit model (fp16, transformers 4's default for a 4-bit load, priced as bf16: the
    # same bytes). Its norms tell TRL's upcast (every nn.LayerNorm and module named
    # "norm") or LLaMA-Factory's from none.
    norms_fp32 = any(
        getattr(module, "weight", None) is not None and module.weight.dtype == torch.float32
        and ("norm" in name.lower() or "Norm" in type(module).__name__)
        for name, module in model.named_modules())
    return settings, "bfloat16", "norms-fp32" if norms_fp32 else "none"


def _plain(value):
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "value"):
        return value.value
    return str(value)


def check(model=None, settings: Optional[Mapping[str, Any]] = None, *, gpu: Optional[str] = None,
          gpu_memory_bytes: Optional[int] = None, seq_len: Optional[int] = None, training_args=None,
          out_dir: str = "headroom", refuse_tight: bool = False, notes: Optional[list] = None,
          **configs) -> dict:
    """Predicts a run before it starts and raises DoesNotFitError when it does not fit.

    model: a live transformers model (its config and PEFT adapters are read), or
        a zoo name / config.json / layer-graph path, or None with settings["model"].
    settings: RunSettings keys (docs/cli-json.md), the base the configs refine.
    gpu: a catalogue id or name; default: torch.cuda's device name, required on the CPU.
    gpu_memory_bytes: the GPU budget; default: torch.cuda's total memory when on a GPU.
    seq_len: tokens per sample (TrainingArguments do not say; SFTConfig's max_length does).
    training_args: a transformers TrainingArguments, read as `--hf-args` reads its JSON.
    configs: hf_args=, peft=, deepspeed=, accelerate=, ... paths, as for headroom.fit().
    Writes into out_dir: config.json, training_args.json, adapter_config.json (as
    found), fit.json (the answer) and plan.json (the run as given, for
    `headroom report plan.json --measurement measurement.json`).
    Returns the `headroom fit --json` document.
    """
    os.makedirs(out_dir, exist_ok=True)
    request = dict(settings or {})
    model_path = None
    load_dtype = kbit_prep = None
    if model is not None and not isinstance(model, (str, os.PathLike)):
        quantized, load_dtype, kbit_prep = _live_quantization(model)
        for key, value in quantized.items():
            request.setdefault(key, value)
        model_path, adapter_path = _model_files(model, out_dir)
        if model_path is None and "model" not in request:
            raise SettingsError("model: has no transformers config (expected a transformers model, or "
                                "settings['model'] naming a zoo model or a layer-graph file)", 2)
        if adapter_path is not None and configs.get("peft") is None:
            configs["peft"] = adapter_path
    elif model is not None:
        model_path = os.fspath(model)
    if training_args is not None and configs.get("hf_args") is None:
        args_path = os.path.join(out_dir, "training_args.json")
        arguments = json.loads(training_args.to_json_string())
        # A CPU run (a test, a dry run) is predicted as the same run on the GPU named:
        # the importer refuses use_cpu, which says where it trains, not what it needs.
        for key in ("use_cpu", "no_cuda"):
            if arguments.get(key):
                arguments[key] = False
                note = f"TrainingArguments: {key} is true; predicted as the same run on the GPU"
                if notes is not None:
                    notes.append(note)
                else:
                    warnings.warn(note, HeadroomNote, stacklevel=2)
        # The dtype the live model's unquantized weights were loaded in (TRL's ModelConfig
        # key): under bf16 the Trainer autocasts over them as they are.
        # DeepSpeed's engine casts the module to 16 bits itself, and sharded QLoRA is not
        # prepared: nothing to read then.
        if (load_dtype is not None and arguments.get("bf16") and "torch_dtype" not in arguments
                and not arguments.get("deepspeed") and not arguments.get("fsdp")):
            arguments["torch_dtype"] = load_dtype
            # The base settings are checked alone before the arguments refine them.
            request.setdefault("precision", "bf16")
            request.setdefault("kbit_prep", kbit_prep)
        write_json_atomic(args_path, arguments)
        configs["hf_args"] = args_path
        world = int(getattr(training_args, "world_size", 1) or 1)
        if world > 1 and "gpus_per_node" not in request:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            request["gpus_per_node"] = local
            request.setdefault("nodes", max(1, world // local))
    _resolve_gpu(request, gpu, gpu_memory_bytes)
    if seq_len is not None:
        request["seq_len"] = int(seq_len)
    answer = fit(os.path.abspath(model_path) if model_path else None, request, notes=notes, **configs)
    write_json_atomic(os.path.join(out_dir, "fit.json"), answer)
    write_json_atomic(os.path.join(out_dir, "plan.json"), answer["as_given"])
    if not answer["fits"] or (refuse_tight and answer.get("tight")):
        raise DoesNotFitError(_refusal(answer), answer)
    return answer


def _resolve_gpu(request: dict, gpu: Optional[str], gpu_memory_bytes: Optional[int]) -> None:
    import torch

    if gpu is not None:
        request["gpu"] = gpu
    if gpu_memory_bytes is not None:
        request["gpu_memory_bytes"] = int(gpu_memory_bytes)
    if torch.cuda.is_available():
        device = torch.cuda.current_device()
        request.setdefault("gpu", torch.cuda.get_device_name(device))
        request.setdefault("gpu_memory_bytes", int(torch.cuda.get_device_properties(device).total_memory))
    elif "gpu" not in request:
        raise SettingsError("gpu: no CUDA device to read it from (expected gpu='a6000' or another id of "
                            "`headroom gpus`, and gpu_memory_bytes for the budget)", 2)


def _state_bytes(model, optimizer) -> int:
    """Bytes of the distinct storages of the parameters, their gradients and the
    optimizer's state tensors."""
    import torch

    seen = {}
    tensors = []
    if model is not None:
        for parameter in model.parameters():
            tensors.append(parameter)
            if parameter.grad is not None:
                tensors.append(parameter.grad)
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors.extend(value for value in state.values() if isinstance(value, torch.Tensor))
    for tensor in tensors:
        storage = tensor.untyped_storage()
        seen[(storage.device.type, storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


class Watch:
    """Measures each training step and writes the measurement file.

    with headroom.watch(model, {"micro_batch": 4, ...}, gpu="4090", seq_len=2048,
                        out_dir="run") as watch:      # check(): raises before step 1
        for batch in data:
            with watch.step() as step:
                loss = model(**batch).loss; loss.backward(); optimizer.step(); optimizer.zero_grad()
                step.loss = loss.item()
    # run/measurement.json: headroom report run/plan.json -o r.html --measurement run/measurement.json

    On a GPU each step's peaks are torch.cuda.max_memory_allocated/reserved; on
    the CPU see CPU_MEASURED. The file is written when the block ends, an
    exception included (an out-of-memory is worth its measurement).
    """

    def __init__(self, model=None, settings: Optional[Mapping[str, Any]] = None, *, optimizer=None,
                 out_dir: str = "headroom", measurement_path: Optional[str] = None, **check_arguments):
        self.model = model
        self.optimizer = optimizer
        self.out_dir = out_dir
        self.measurement_path = measurement_path or os.path.join(out_dir, "measurement.json")
        self._settings = settings
        self._check_arguments = check_arguments
        self.answer: Optional[dict] = None
        self.steps: list = []
        self._started = None
        self._loss = None

    def check(self) -> dict:
        """check() on what this Watch was given; raises DoesNotFitError."""
        self.answer = check(self.model, self._settings, out_dir=self.out_dir, **self._check_arguments)
        return self.answer

    def step_begin(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self._loss = None
        self._started = time.perf_counter()

    def step_end(self, step: Optional[int] = None, loss: Optional[float] = None) -> None:
        import torch

        if self._started is None:
            raise HeadroomError("step_end: no step_begin before it (expected step_begin() at the start of a step)")
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            allocated = int(torch.cuda.max_memory_allocated())
            reserved = int(torch.cuda.max_memory_reserved())
        else:
            allocated = reserved = _state_bytes(self.model, self.optimizer)
        record = {"step": int(step if step is not None else len(self.steps) + 1),
                  "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved,
                  "step_ms": (time.perf_counter() - self._started) * 1000.0}
        loss = loss if loss is not None else self._loss
        if loss is not None and math.isfinite(float(loss)):
            record["loss"] = float(loss)
        self.steps.append(record)
        self._started = None

    @contextlib.contextmanager
    def step(self, step: Optional[int] = None):
        """A block that is one optimizer step; set `.loss` on what it yields to record it."""
        self.step_begin()
        try:
            yield self
        finally:  # a step that ran out of memory is measured too
            self.step_end(step)

    @property
    def loss(self):
        return self._loss

    @loss.setter
    def loss(self, value):
        self._loss = float(value)

    def measurement(self) -> dict:
        """The headroom.measurement document of the steps so far, with the prediction beside it."""
        import torch

        cuda = torch.cuda.is_available()
        document = {
            "format": "headroom.measurement",
            "version": 1,
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "torch_version": torch.__version__,
            "date": datetime.date.today().isoformat(),
            "measured": CUDA_MEASURED if cuda else CPU_MEASURED,
            "steps": self.steps,
        }
        if self.answer is not None:
            prediction = self.answer["as_given"]["prediction"]
            document["prediction"] = {
                "plan": "plan.json",
                "verdict": self.answer["verdict"],
                "peak_allocated_bytes": prediction["peak_allocated_bytes"],
                "peak_reserved_bytes": prediction["peak_reserved_bytes"],
                "gpu_total_bytes": prediction["gpu_total_bytes"],
                "gpu_budget_bytes": prediction["gpu_budget_bytes"],
                "step_ms": prediction["time"]["step_ms"],
            }
        return document

    def write(self) -> Optional[str]:
        """Writes the measurement file (atomically); None when no step was measured,
        since the format needs at least one."""
        if not self.steps:
            return None
        write_json_atomic(self.measurement_path, self.measurement())
        return self.measurement_path

    def __enter__(self) -> "Watch":
        self.check()
        return self

    def __exit__(self, *exc_info) -> None:
        self.write()


def watch(model=None, settings: Optional[Mapping[str, Any]] = None, **arguments) -> Watch:
    """A Watch: `with headroom.watch(model, settings, gpu=..., out_dir=...) as w:`."""
    return Watch(model, settings, **arguments)
