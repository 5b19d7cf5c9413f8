"""TRL's DPOTrainer: one optimizer step as the Trainer's loop runs it (env `trl`).

What runs is TRL's own code at the pinned release (trl/trainer/dpo_trainer.py, 1.16.0):
`DPOTrainer.__init__` (PEFT's `get_peft_model` from `peft_config`, the fused LM head
`add_fused_lm_head` patches into the policy and into a reference model, the reference
model prepared for evaluation) and `DPOTrainer._compute_loss` (the policy's forward over
chosen and rejected concatenated in one batch of 2 x `batch` rows, the reference forward
under `torch.no_grad()`, the sigmoid loss and its metrics) inside the Trainer's
`training_step`, through stacks/hf_trainer.py's loop. Spec key `ref`:
- `adapter-disabled` (LoRA, no `ref_model`): the reference is the policy's base with the
  adapters disabled (`use_adapter(model, None)`), no second copy;
- `copy` (full, `ref_model` given): a second model built as the policy is, frozen;
- `precomputed` (`precompute_ref_log_probs=True`): the batch carries `ref_chosen_logps`
  and `ref_rejected_logps`, the step runs no reference forward.
What the oracle replaces, and why, beside stacks/trl_sft.py's replacements (the chunked
log-probability kernels, the compact path with every label valid, the metrics' reads):
- the dataset pass that precomputes the reference log-probs before training (a pass of
  its own, not the step): the columns it adds are given, as zeros;
- the step's batch: what DataCollatorForPreference makes of full-length rows, prompt
  and completion together `seq` tokens, every token in the completion (completion_mask
  all ones: the fused head's compact copy at its largest).
"""

from __future__ import annotations

import tempfile

import torch

from meta_recorder import Recorder
from stacks import hf_trainer
from stacks.hf_models import build_model
from stacks.trl_sft import (_adapter_dtype, _peft_config, _tokenizer, chunked_logprob_on_meta, meta_config,
                             meta_trainer)


def _dataset(spec: dict):
    from datasets import Dataset
    return Dataset.from_dict({"prompt": ["p"], "chosen": ["c"], "rejected": ["r"]})


def _config(spec: dict, output_dir: str):
    from trl import DPOConfig
    return meta_config(DPOConfig, spec, output_dir, precompute_ref_log_probs=spec["ref"] == "precomputed")


def _trainer_class(recorder: Recorder):
    from trl import DPOTrainer

    class MetaDPOTrainer(meta_trainer(DPOTrainer, recorder)):
        def _precompute_ref_logps(self, dataset, name, batch_size):
            zeros = [0.0] * len(dataset)
            return dataset.add_column("ref_chosen_logps", zeros).add_column("ref_rejected_logps", zeros)

    return MetaDPOTrainer


def collated_batch(spec: dict) -> dict:
    """DataCollatorForPreference over full-length rows: chosen rows, then rejected rows."""
    rows = 2 * spec["batch"]
    ids = torch.empty(rows, spec["seq"], dtype=torch.long, device="meta")
    batch = {"input_ids": ids, "attention_mask": torch.empty_like(ids), "completion_mask": torch.empty_like(ids)}
    if spec["ref"] == "precomputed":
        batch["ref_chosen_logps"] = torch.empty(spec["batch"], device="meta")
        batch["ref_rejected_logps"] = torch.empty(spec["batch"], device="meta")
    return batch


def _models(spec: dict):
    """The policy and, for `copy`, the reference built as the policy is."""
    expected = {"lora": "adapter-disabled", "qlora": "adapter-disabled"}.get(spec["method"], "copy")
    if spec["ref"] not in (expected, "precomputed"):
        raise ValueError(f"ref '{spec['ref']}' with method {spec['method']}: expected {expected} or precomputed")
    model = build_model(spec)
    return model, build_model(spec) if spec["ref"] == "copy" else None


def _no_device_move(accelerator) -> None:
    """The reference's `prepare_model(evaluation_mode=True)` in __init__ moves it to the
    accelerator's device; the meta model stays where it is, as the policy does."""
    accelerator.device_placement = False


def run(spec: dict, recorder: Recorder) -> dict:
    from accelerate import Accelerator
    from trl.trainer import dpo_trainer

    saved_prepare, saved_hash = Accelerator.prepare_model, dpo_trainer.hash_module

    def prepare_model(self, model, device_placement=None, evaluation_mode=False):
        return saved_prepare(self, model, device_placement=False, evaluation_mode=evaluation_mode)

    Accelerator.prepare_model = prepare_model
    dpo_trainer.hash_module = lambda module: "meta"  # reads the weights' values; keys the skipped pass's cache
    try:
        with tempfile.TemporaryDirectory() as output_dir, chunked_logprob_on_meta():
            model, ref_model = _models(spec)
            trainer = _trainer_class(recorder)(model=model, ref_model=ref_model, args=_config(spec, output_dir),
                                               train_dataset=_dataset(spec),
                                               processing_class=_tokenizer(model.config.vocab_size),
                                               peft_config=_peft_config(spec))
            _no_device_move(trainer.accelerator)
            hf_trainer.enable_checkpointing(trainer)
            trainer.create_optimizer()
            prepared, optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
            if trainer.ref_model is not None:  # the frozen copy's weights, resident all step
                recorder.adopt(list(trainer.ref_model.parameters()), "parameter")
                recorder.mark("parameters", list(trainer.ref_model.parameters()))
            hf_trainer.record_steps(spec, recorder, trainer, prepared, optimizer, batch_of=collated_batch)
            return {"optim": str(getattr(trainer.args.optim, "value", trainer.args.optim)),
                    "adapter_dtype": _adapter_dtype(prepared), "ref": spec["ref"]}
    finally:
        Accelerator.prepare_model, dpo_trainer.hash_module = saved_prepare, saved_hash
