"""A torchvision model in a plain PyTorch training loop: forward and cross-entropy (under
`torch.autocast` for bf16-amp), `loss.backward()`, `optimizer.step()`,
`optimizer.zero_grad()` (set_to_none). With `zero_grad` `before-backward` the loop is
torchvision's classification reference (references/classification/train.py
`train_one_epoch`, without its data loader and logging), which calls `zero_grad()`
between the loss and `backward()`: the previous step's gradients live through the
forward.

Spec keys: `builder` (a torchvision model function, `torchvision.models.resnet50`),
`model` (headroom's zoo name for it, `resnet-50`), `precision` (`fp32`; `bf16-amp`:
fp32 weights, forward and loss under autocast to bf16), `batch`, `image_size` (px,
224), `optimizer` (`sgd`: torch.optim.SGD with momentum 0.9, the reference's default;
`adamw`: torch.optim.AdamW), `zero_grad` (`after-step`, default; `before-backward`),
`steps`. The model is in train mode: BatchNorm uses the
batch's statistics and updates its running mean and variance, buffers of the model.

Nothing of the step is replaced. The autocast is the batch's device's, as a loop names
it (`torch.autocast(images.device.type)`: "cuda" on a GPU, the CPU's standing in for
CUDA's here, cuda_autocast.py); the optimizers take their foreach implementation, as on
CUDA (cuda_shims.py `fused_optimizers_on_meta`). Convolutions and BatchNorm run aten's
meta kernels: what cuDNN allocates outside tensors (workspaces) is not seen, as for
every stack (README, "What the oracle cannot see").
"""

from __future__ import annotations

import importlib

import torch

from meta_recorder import Recorder, optimizer_state_tensors

PRECISIONS = ("fp32", "bf16-amp")
OPTIMIZERS = ("sgd", "adamw")


def build(spec: dict):
    """The builder's model, untrained, on meta at full size, in train mode."""
    module, _, name = spec.get("builder", "torchvision.models.resnet50").rpartition(".")
    builder = getattr(importlib.import_module(module), name)
    with torch.device("meta"):
        model = builder()
    return model.train()


def optimizer_of(model, spec: dict):
    """torch.optim's defaults otherwise (foreach None: torch picks it on CUDA)."""
    optimizer = spec.get("optimizer", "sgd")
    if optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    if optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-3)
    raise ValueError(f"torch-loop: optimizer '{optimizer}': expected one of {', '.join(OPTIMIZERS)}")


def batch_of(spec: dict) -> tuple:
    """What the reference's data loader yields: fp32 images, channels first, and labels."""
    side = spec.get("image_size", 224)
    images = torch.empty(spec["batch"], 3, side, side, dtype=torch.float32, device="meta")
    return images, torch.empty(spec["batch"], dtype=torch.long, device="meta")


def run(spec: dict, recorder: Recorder) -> dict:
    if spec["precision"] not in PRECISIONS:
        raise ValueError(f"torch-loop: precision '{spec['precision']}': expected one of {', '.join(PRECISIONS)}")
    if spec.get("method", "full") != "full":
        raise ValueError("torch-loop: method: expected full")
    if spec.get("zero_grad", "after-step") not in ("after-step", "before-backward"):
        raise ValueError("torch-loop: zero_grad: expected after-step or before-backward")
    model = build(spec)
    optimizer = optimizer_of(model, spec)
    _record_steps(spec, recorder, model, optimizer)
    return {}


def _record_steps(spec: dict, recorder: Recorder, model, optimizer) -> None:
    params = list(model.parameters())
    recorder.adopt_model(params, model.buffers())
    for p in params:
        p.register_post_accumulate_grad_hook(lambda q: recorder.mark("gradients", [q.grad]))
    criterion = torch.nn.CrossEntropyLoss()
    amp = spec["precision"] == "bf16-amp"
    before_backward = spec.get("zero_grad", "after-step") == "before-backward"
    recorder.begin("step0.start")
    for step in range(spec.get("steps", 2)):
        images, labels = batch_of(spec)
        recorder.adopt_batch([images, labels])
        recorder.phase = f"step{step}.forward_backward"
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=amp):
            output = model(images)
            loss = criterion(output, labels)
        if before_backward:
            optimizer.zero_grad()
        loss.backward()
        recorder.phase = f"step{step}.optimizer"
        optimizer.step()
        recorder.mark("optimizer_states", optimizer_state_tensors(optimizer))
        if not before_backward:
            recorder.phase = f"step{step}.zero_grad"
            optimizer.zero_grad()
        del output, loss, images, labels
        recorder.settle()
