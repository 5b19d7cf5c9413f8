"""TRL's SFTTrainer: one optimizer step as the Trainer's loop runs it (env `trl`).

What runs is TRL's own code at the pinned release: `SFTTrainer.__init__` (PEFT's
`get_peft_model` from `peft_config`, `enable_input_require_grads` under checkpointing,
QLoRA's adapters cast to bf16, the fused LM head `add_fused_lm_head` patches into the
model), `SFTTrainer.compute_loss` (the chunked log-probabilities of the fused head, and
the entropy and mean-token-accuracy metrics it computes beside them) inside the
Trainer's `training_step`, gradient clipping, the optimizer step and `zero_grad`,
through stacks/hf_trainer.py's loop. What the oracle replaces, and why:
- placement and the CPU accelerator, as stacks/hf_trainer.py;
- the tokenizer and the dataset: no hub, so a word-level tokenizer with pad and EOS
  tokens and a pre-tokenized dataset (`skip_prepare_dataset`) let the trainer be
  built; the step's batch is the one TRL's DataCollatorForLanguageModeling makes of
  full-length samples: input_ids, attention_mask (all ones), labels (a copy);
- the chunked log-probability kernels (trl/kernels/chunked_logprob.py): on CUDA a
  Triton kernel folds each [4096 x 32768] logits tile into per-token statistics
  in place and `torch.addmm(..., out_dtype=float32)` accumulates the gradient GEMMs;
  meta has neither, so the torch fallbacks would allocate fp32 copies of each tile.
  The shims write nothing and allocate nothing, as the kernels; the tiles, buffers
  and statistics are TRL's own allocations;
- the compact path: on CUDA the fused head scores only the positions whose label is
  not -100 (`hidden_states[mask]`, a copy); that choice is made for meta too, with
  every label valid (the boolean-mask index's `nonzero` answers every position);
- the metrics' value reads (`.item()` of entropy, accuracy and the token count) read
  0: they are logged, and decide no allocation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile

import torch
from cuda_shims import BooleanMaskIndex

from meta_recorder import Recorder, logged_values
from stacks import hf_trainer
from stacks.hf_models import build_model


def _tokenizer(vocab_size: int):
    """A word-level tokenizer with the pad and EOS tokens SFTTrainer asks for."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
                                   pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=vocab_size)


def _dataset(spec: dict):
    """One pre-tokenized full-length sample: SFTTrainer reads the first to tell its type."""
    from datasets import Dataset
    ids = [1] * spec["seq"]
    return Dataset.from_dict({"input_ids": [ids], "labels": [ids]})


def meta_config(config_class, spec: dict, output_dir: str, **extra):
    """A TRL trainer's config (SFTConfig, DPOConfig, RewardConfig) as the spec sets it, the
    model left where it is (meta); `extra`: the trainer's own fields."""

    class MetaConfig(config_class):
        @property
        def place_model_on_device(self) -> bool:
            return False

    checkpointing = spec.get("checkpointing", "none") != "none"
    # GRPOConfig has no max_length: its rows are prompt + max_completion_length (stacks/trl_grpo.py)
    if "max_length" in {field.name for field in dataclasses.fields(config_class)}:
        extra = {"max_length": spec["seq"], **extra}
    kwargs = {"use_reentrant": spec.get("checkpointing") == "reentrant"} if checkpointing else None
    return MetaConfig(
        output_dir=output_dir, per_device_train_batch_size=spec["batch"], report_to=[], use_cpu=True,
        bf16=spec["precision"] in ("bf16", "bf16-amp"),
        max_grad_norm=spec.get("max_grad_norm", 1.0), gradient_checkpointing=checkpointing,
        gradient_checkpointing_kwargs=kwargs, **({"optim": spec["optim"]} if "optim" in spec else {}), **extra)


def _config(spec: dict, output_dir: str):
    from trl import SFTConfig
    return meta_config(SFTConfig, spec, output_dir, dataset_kwargs={"skip_prepare_dataset": True})


def _peft_config(spec: dict, task_type: str = "CAUSAL_LM"):
    from peft import LoraConfig
    if spec["method"] not in ("lora", "qlora"):
        return None
    rank = spec.get("lora_rank", 16)
    return LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=spec["lora_targets"],
                      lora_dropout=spec.get("lora_dropout", 0.05), task_type=task_type)


def meta_trainer(trainer_class, recorder: Recorder):
    """A TRL trainer whose loss's metric reads the recorder answers, and whose batches
    already on meta are not moved."""

    class MetaTrainer(trainer_class):
        def compute_loss(self, *args, **kwargs):
            with logged_values(recorder):  # its metrics' .item() reads
                return super().compute_loss(*args, **kwargs)

        def _prepare_input(self, data):
            if isinstance(data, torch.Tensor) and data.device.type == "meta":
                return data
            return super()._prepare_input(data)

    return MetaTrainer


def _trainer_class(recorder: Recorder):
    from trl import SFTTrainer
    return meta_trainer(SFTTrainer, recorder)


def collated_batch(spec: dict) -> dict:
    """DataCollatorForLanguageModeling (padding_free False) over full-length samples."""
    ids = torch.empty(spec["batch"], spec["seq"], dtype=torch.long, device="meta")
    return {"input_ids": ids, "attention_mask": torch.empty_like(ids), "labels": ids.clone()}


def run(spec: dict, recorder: Recorder) -> dict:
    with tempfile.TemporaryDirectory() as output_dir, chunked_logprob_on_meta():
        model = build_model(spec)
        trainer = _trainer_class(recorder)(model=model, args=_config(spec, output_dir), train_dataset=_dataset(spec),
                                   processing_class=_tokenizer(model.config.vocab_size),
                                   peft_config=_peft_config(spec))
        trainer.accelerator.device_placement = False
        hf_trainer.enable_checkpointing(trainer)
        trainer.create_optimizer()
        prepared, optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
        hf_trainer.record_steps(spec, recorder, trainer, prepared, optimizer, batch_of=collated_batch)
        return {"optim": str(getattr(trainer.args.optim, "value", trainer.args.optim)),
                "adapter_dtype": _adapter_dtype(prepared)}


def _adapter_dtype(model) -> str:
    """The dtype the trained adapters ended in (TRL casts QLoRA's to bf16)."""
    for name, p in model.named_parameters():
        if p.requires_grad and "lora_" in name:
            return str(p.dtype).replace("torch.", "")
    return ""


def _no_fold(*args, **kwargs) -> None:
    """The Triton fold of a logits tile: statistics and the tile written in place."""


def _addmm_in_place(acc, a, b) -> None:
    """torch.addmm(acc, a, b, out_dtype=float32, out=acc): into the fp32 buffer, no copy."""


class _TorchAutocastOnMeta:
    """torch, where the kernels' autocast queries for "meta" answer for the CPU autocast
    that stands in for CUDA's (cuda_autocast.py): the tiles' compute dtype."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def is_autocast_enabled(device_type=None):
        return torch.is_autocast_enabled("cpu" if device_type == "meta" else device_type)

    @staticmethod
    def get_autocast_dtype(device_type):
        return torch.get_autocast_dtype("cpu" if device_type == "meta" else device_type)


@contextlib.contextmanager
def chunked_logprob_on_meta():
    """trl/kernels/chunked_logprob.py's CUDA kernels and device choice (module docstring)."""
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    saved = (chunked_logprob._forward_tile, chunked_logprob._backward_tile, chunked_logprob._addmm_fp32,
             utils._use_triton, chunked_logprob.torch)
    chunked_logprob.torch = _TorchAutocastOnMeta()
    chunked_logprob._forward_tile, chunked_logprob._backward_tile = _no_fold, _no_fold
    chunked_logprob._addmm_fp32 = _addmm_in_place
    utils._use_triton = lambda device: device.type in ("cuda", "xpu", "meta")
    try:
        with BooleanMaskIndex():
            yield
    finally:
        (chunked_logprob._forward_tile, chunked_logprob._backward_tile, chunked_logprob._addmm_fp32,
         utils._use_triton, chunked_logprob.torch) = saved
