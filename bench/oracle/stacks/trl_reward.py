"""TRL's RewardTrainer: one optimizer step as the Trainer's loop runs it (env `trl`).

What runs is TRL's own code at the pinned release (trl/trainer/reward_trainer.py, 1.16.0):
`RewardTrainer.__init__` (PEFT's `get_peft_model` from `peft_config`, dropout disabled,
the pad token written into the model's config) and `RewardTrainer.compute_loss` (one
forward of the sequence-classification model over chosen and rejected rows concatenated
in one batch of 2 x `batch` rows, `torch.chunk` of the rewards, `-logsigmoid` of their
difference), inside the Trainer's `training_step`, through stacks/hf_trainer.py's loop.
The model is what `RewardTrainer` builds from a model name:
`AutoModelForSequenceClassification` with `num_labels=1` (transformers' generic
`...ForSequenceClassification`: the decoder, then `score`, a bias-free linear from the
hidden size to one reward, pooled at each row's last non-pad token). With LoRA the
`peft_config` is `task_type="SEQ_CLS"`, which trains `score` in full beside the adapters
(PEFT's modules_to_save), as TRL's reward modelling examples configure it.
What the oracle replaces, beside stacks/trl_sft.py's replacements (the metrics' reads):
- the step's batch: what DataCollatorForPreference makes of full-length rows, chosen then
  rejected, `seq` tokens each, every position a real token (the last one is pooled).
"""

from __future__ import annotations

import tempfile

import torch

from meta_recorder import Recorder
from stacks import hf_trainer
from stacks.hf_models import transformers_at_least, weight_dtype
from stacks.trl_sft import _adapter_dtype, _peft_config, _tokenizer, meta_config, meta_trainer

PAD_TOKEN_ID = 0  # stacks/trl_sft.py's tokenizer: "<pad>"


def _dataset(spec: dict):
    from datasets import Dataset
    return Dataset.from_dict({"chosen": ["c"], "rejected": ["r"]})


def _config(spec: dict, output_dir: str):
    from trl import RewardConfig
    return meta_config(RewardConfig, spec, output_dir)


def _trainer_class(recorder: Recorder):
    from trl import RewardTrainer
    return meta_trainer(RewardTrainer, recorder)


def build_reward_model(spec: dict):
    """AutoModelForSequenceClassification over the config with one label, on meta."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    config = AutoConfig.from_pretrained(spec["model"], num_labels=1)
    config._attn_implementation = spec.get("attention", "sdpa")
    config.pad_token_id = PAD_TOKEN_ID
    with torch.device("meta"):
        key = "dtype" if transformers_at_least("4.56") else "torch_dtype"
        return AutoModelForSequenceClassification.from_config(config, **{key: weight_dtype(spec["precision"])})


def collated_batch(spec: dict) -> dict:
    """DataCollatorForPreference over full-length rows: chosen rows, then rejected rows."""
    ids = torch.empty(2 * spec["batch"], spec["seq"], dtype=torch.long, device="meta")
    return {"input_ids": ids, "attention_mask": torch.empty_like(ids)}


def run(spec: dict, recorder: Recorder) -> dict:
    if spec["method"] not in ("lora", "full"):
        raise ValueError(f"method '{spec['method']}': expected lora or full")
    with tempfile.TemporaryDirectory() as output_dir:
        model = build_reward_model(spec)
        trainer = _trainer_class(recorder)(model=model, args=_config(spec, output_dir),
                                           train_dataset=_dataset(spec),
                                           processing_class=_tokenizer(model.config.vocab_size),
                                           peft_config=_peft_config(spec, task_type="SEQ_CLS"))
        trainer.accelerator.device_placement = False  # the meta model stays where it is
        hf_trainer.enable_checkpointing(trainer)
        trainer.create_optimizer()
        prepared, optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
        hf_trainer.record_steps(spec, recorder, trainer, prepared, optimizer, batch_of=collated_batch)
        return {"optim": str(getattr(trainer.args.optim, "value", trainer.args.optim)),
                "adapter_dtype": _adapter_dtype(prepared)}
