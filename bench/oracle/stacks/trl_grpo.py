"""TRL's GRPOTrainer: generation and one optimizer step as the Trainer's loop runs them (env `trl`).

What runs is TRL's own code at the pinned release (trl/trainer/grpo_trainer.py, 1.16.0):
`GRPOTrainer.__init__` (PEFT's `get_peft_model` from `peft_config`, the fused LM head
`add_fused_lm_head` patches into the policy with log-probs and entropy, a reference copy when
`beta` is not 0 and the policy is not PEFT's), `_prepare_inputs` (generation once per
`steps_per_generation` micro-steps, the generation batch shuffled and split into micro-batches),
and `_compute_loss` (the policy's forward over prompt + completion, log-probs of the completion
only, the clipped ratio loss, the KL term when `beta` is not 0) inside the Trainer's
`training_step`, through stacks/hf_trainer.py's loop. Spec keys beside the Trainer's: `prompt`
and `completion` (tokens: every prompt `prompt` long, every completion `max_completion_length`,
the length a user plans for), `num_generations`, `beta` (TRL's default 0: no reference),
`steps_per_generation` (TRL's default: the accumulation steps, 1). `batch` is
`per_device_train_batch_size`, completions per micro-step; the generation batch is
`batch x steps_per_generation` completions, `batch x steps_per_generation / num_generations`
prompts each repeated `num_generations` times.
What the oracle replaces, and why, beside stacks/trl_sft.py's replacements (the chunked
log-probability kernels, the metrics' reads):
- `_generate_and_score_completions` around the generation: its tokenizing of the prompts, the
  rewards, the advantages and the logging read values (strings, rewards, EOS positions) that meta
  has not. What it allocates on the GPU is kept: the left-padded prompt batch, transformers'
  `generate` under TRL's `unwrap_model_for_generation` and `torch.no_grad()` (the model's own
  prefill, KV cache (DynamicCache), logits and sampling), the completion ids and masks, the
  old and reference log-probs under `torch.no_grad()` and `disable_gradient_checkpointing`
  as TRL computes them (`_get_per_token_logps_and_entropies` in micro-batches), one advantage
  per completion;
- generate's stop check (StopCheck reads `unfinished_sequences.max() == 0`): no completion
  ends early, every one runs to `max_completion_length`;
- the fused head's compact path scores the completion's positions (labels -100 elsewhere): the
  boolean-mask index's `nonzero` answers the completion's positions of each row.
"""

from __future__ import annotations

import contextlib
import tempfile

import torch
from cuda_shims import BooleanMaskIndex

from meta_recorder import Recorder
from stacks import hf_trainer
from stacks.hf_models import build_model
from stacks.trl_sft import _adapter_dtype, _peft_config, _tokenizer, chunked_logprob_on_meta, meta_config, meta_trainer


def generation_rows(spec: dict) -> int:
    return spec["batch"] * spec.get("steps_per_generation", 1)


def _dataset(spec: dict):
    from datasets import Dataset
    return Dataset.from_dict({"prompt": ["p"] * generation_rows(spec)})


def _zero_reward(prompts, completions, **kwargs):
    return [0.0] * len(prompts)


def _config(spec: dict, output_dir: str):
    from trl import GRPOConfig
    extra = {"steps_per_generation": spec["steps_per_generation"]} if "steps_per_generation" in spec else {}
    config = meta_config(GRPOConfig, spec, output_dir,
                         num_generations=spec["num_generations"], max_completion_length=spec["completion"],
                         beta=spec.get("beta", 0.0), num_iterations=spec.get("num_iterations", 1), **extra)
    return config


@contextlib.contextmanager
def _fixed_length_generation(length: int):
    """generate's StopCheck answers from the length alone: no completion ends before `length`."""
    from transformers.generation import utils

    saved = utils.StopCheck.__call__
    utils.StopCheck.__call__ = lambda self, unfinished, tokens, current: current >= length
    try:
        yield
    finally:
        utils.StopCheck.__call__ = saved


class _GenerationDone(Exception):
    pass


def _trainer_class(recorder: Recorder, spec: dict):
    from trl import GRPOTrainer
    from trl.models import unwrap_model_for_generation
    from trl.models.utils import disable_gradient_checkpointing

    class MetaGRPOTrainer(meta_trainer(GRPOTrainer, recorder)):
        def _generate_and_score_completions(self, inputs):
            phase = recorder.phase
            recorder.phase = phase.split(".")[0] + ".generation"
            rows, prompt = len(inputs), spec["prompt"]
            prompt_ids = torch.ones(rows, prompt, dtype=torch.long, device="meta")
            prompt_mask = torch.ones_like(prompt_ids)
            with (
                unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                            gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                                            generation_kwargs=self.generation_kwargs,
                                            gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs)
                as unwrapped_model,
                torch.no_grad(),
            ):
                prompt_completion_ids = unwrapped_model.generate(input_ids=prompt_ids, attention_mask=prompt_mask,
                                                                 generation_config=self.generation_config)
            completion_ids = prompt_completion_ids[:, prompt:]
            del prompt_completion_ids
            completion_mask = torch.ones_like(completion_ids, dtype=torch.int)
            output = self._logps_after_generation(prompt_ids, prompt_mask, completion_ids, completion_mask)
            if spec.get("generation_only"):  # a diagnostic: the generation phase's own peak
                raise _GenerationDone
            recorder.phase = phase
            return output

        def _logps_after_generation(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
            """The old and reference log-probs as _generate_and_score_completions computes them."""
            prompt_completion_ids = torch.cat([prompt_ids, completion_ids], dim=1)
            attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
            logits_to_keep = completion_ids.size(1)
            batch_size = self.args.per_device_train_batch_size
            old, ref = None, None
            with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
                generate_every = self.args.steps_per_generation * self.num_iterations
                if self.args.gradient_accumulation_steps % generate_every != 0:
                    old, _, _ = self._get_per_token_logps_and_entropies(
                        self.model, prompt_completion_ids, attention_mask, logits_to_keep, batch_size=batch_size)
                if self.beta != 0.0:
                    ref = self._reference_logps(prompt_completion_ids, attention_mask, logits_to_keep, batch_size)
            output = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                      "completion_mask": completion_mask,
                      "advantages": torch.zeros(prompt_ids.size(0), device="meta"),
                      "num_items_in_batch": completion_mask.sum()}
            if old is not None:
                output["old_per_token_logps"] = old
            if ref is not None:
                output["ref_per_token_logps"] = ref
            return output

        def _reference_logps(self, ids, attention_mask, logits_to_keep, batch_size):
            from trl.trainer.grpo_trainer import use_adapter
            if self.ref_model is not None:
                return self._get_per_token_logps_and_entropies(self.ref_model, ids, attention_mask, logits_to_keep,
                                                               batch_size=batch_size)[0]
            model = self.accelerator.unwrap_model(self.model)
            with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                return self._get_per_token_logps_and_entropies(self.model, ids, attention_mask, logits_to_keep,
                                                               batch_size=batch_size)[0]

    return MetaGRPOTrainer


def prompt_batch(spec: dict) -> list:
    """What the dataloader gives `_prepare_inputs`: the generation batch's rows (prompts
    repeated num_generations times by the sampler)."""
    return [{"prompt": "p"} for _ in range(generation_rows(spec))]


def run(spec: dict, recorder: Recorder) -> dict:
    from accelerate import Accelerator

    saved_prepare = Accelerator.prepare_model

    def prepare_model(self, model, device_placement=None, evaluation_mode=False):
        return saved_prepare(self, model, device_placement=False, evaluation_mode=evaluation_mode)

    Accelerator.prepare_model = prepare_model
    try:
        with (tempfile.TemporaryDirectory() as output_dir, chunked_logprob_on_meta(),
              BooleanMaskIndex(spec["completion"]), _fixed_length_generation(spec["prompt"] + spec["completion"])):
            model = build_model(spec)
            trainer = _trainer_class(recorder, spec)(model=model, reward_funcs=_zero_reward,
                                                     args=_config(spec, output_dir), train_dataset=_dataset(spec),
                                                     processing_class=_tokenizer(model.config.vocab_size),
                                                     peft_config=_peft_config(spec))
            trainer.accelerator.device_placement = False
            hf_trainer.enable_checkpointing(trainer)
            trainer.create_optimizer()
            prepared, optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
            if trainer.ref_model is not None:  # the frozen copy's weights, resident all step
                recorder.adopt(list(trainer.ref_model.parameters()), "parameter")
                recorder.mark("parameters", list(trainer.ref_model.parameters()))
            with contextlib.suppress(_GenerationDone):
                hf_trainer.record_steps(spec, recorder, trainer, prepared, optimizer, batch_of=prompt_batch)
            return {"optim": str(getattr(trainer.args.optim, "value", trainer.args.optim)),
                    "adapter_dtype": _adapter_dtype(prepared)}
    finally:
        Accelerator.prepare_model = saved_prepare
