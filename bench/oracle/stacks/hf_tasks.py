"""What a transformers run trains for (spec key `task`): the Auto class that builds the
model from its config.json, how PEFT wraps it, and the batch the Trainer is given.

- `causal-lm` (default): AutoModelForCausalLM, PEFT task_type CAUSAL_LM, token ids
  with labels (causal_lm_batch).
- `sequence-classification` (BERT): AutoModelForSequenceClassification (num_labels
  from the config, 2 without id2label: PretrainedConfig's default), PEFT task_type
  SEQ_CLS, which trains the head in full beside the adapters (peft/peft_model.py
  PeftModelForSequenceClassification: modules_to_save += ["classifier", "score"]);
  the batch a BERT tokenizer and DataCollatorWithPadding give: input_ids,
  token_type_ids, attention_mask, and one label a sample.
- `image-classification` (ViT): AutoModelForImageClassification, LoRA as PEFT's image
  classification guide sets it (no task_type, modules_to_save=["classifier"]); the
  batch an image processor gives: fp32 pixel_values at `image_size` px, one label a
  sample.
- `contrastive` (CLIP, both towers): AutoModel (CLIPModel) with its own contrastive loss; the
  batch transformers' examples/pytorch/contrastive-image-text/run_clip.py collates:
  pixel_values, input_ids and attention_mask of `seq` tokens (the text tower's positions),
  return_loss=True. LoRA without a task type or a trained head.
- `image-text-to-text` (Qwen2.5-VL): AutoModelForImageTextToText, PEFT task_type
  CAUSAL_LM; the batch Qwen2_5_VLProcessor gives for one `image_size` x `image_size`
  image a sample (a multiple of 28: smart_resize leaves it as it is): float32
  pixel_values [patches, 3 * 2 * 14 * 14] for all samples, image_grid_thw (1, side/14,
  side/14) per image, and `seq` token ids with labels, the image's placeholders among
  them (a meta tensor has no values: the placeholder check reads True). No
  mm_token_type_ids: the text model then takes 1-D positions (the M-RoPE index is
  integer bookkeeping of [3, B, S]).
- `seq2seq-lm` (T5, Flan-T5): AutoModelForSeq2SeqLM, PEFT task_type SEQ_2_SEQ_LM; the
  batch DataCollatorForSeq2Seq gives without padding: `seq` encoder token ids and
  `target_seq` labels, from which T5ForConditionalGeneration makes decoder_input_ids
  (_shift_right, modeling_t5.py 5.23.0). No attention_mask: the encoder's mask is then None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple


def causal_lm_batch(spec: dict) -> dict:
    """An unpadded batch of full-length samples, as a packing or fixed-length collator gives."""
    import torch  # here: flags.py reads TASKS without torch
    ids = torch.empty(spec["batch"], spec["seq"], dtype=torch.long, device="meta")
    return {"input_ids": ids, "labels": ids.clone()}


def sequence_classification_batch(spec: dict) -> dict:
    """An unpadded batch of `seq` tokens a sample (the mask is all ones: meta_recorder
    answers transformers' all-ones check True, so no mask is built)."""
    import torch
    shape = (spec["batch"], spec["seq"])
    tokens = {name: torch.empty(shape, dtype=torch.long, device="meta")
              for name in ("input_ids", "token_type_ids", "attention_mask")}
    return dict(tokens, labels=torch.empty(spec["batch"], dtype=torch.long, device="meta"))


def image_classification_batch(spec: dict) -> dict:
    """ViTImageProcessor's output (float32 pixel_values, channels first) and labels."""
    import torch
    side = spec.get("image_size", 224)
    pixels = torch.empty(spec["batch"], 3, side, side, dtype=torch.float32, device="meta")
    return {"pixel_values": pixels, "labels": torch.empty(spec["batch"], dtype=torch.long, device="meta")}


def contrastive_batch(spec: dict) -> dict:
    """run_clip.py `collate_fn`: images and captions, and return_loss=True (no labels)."""
    import torch
    text = {name: torch.empty(spec["batch"], spec["seq"], dtype=torch.long, device="meta")
            for name in ("input_ids", "attention_mask")}
    return dict(text, pixel_values=image_classification_batch(spec)["pixel_values"], return_loss=True)


def image_text_batch(spec: dict) -> dict:
    """Qwen2_5_VLProcessor's output for one square image and `seq` tokens a sample.
    image_grid_thw stays on the CPU (the Trainer's accelerator is the CPU)."""
    import torch
    side = spec["image_size"] // 14
    pixels = torch.empty(spec["batch"] * side * side, 3 * 2 * 14 * 14, dtype=torch.float32, device="meta")
    grid = torch.tensor([[1, side, side]] * spec["batch"], dtype=torch.long)
    return dict(causal_lm_batch(spec), pixel_values=pixels, image_grid_thw=grid)


def seq2seq_batch(spec: dict) -> dict:
    """`seq` source tokens and `target_seq` labels a sample, unpadded."""
    import torch
    ids = torch.empty(spec["batch"], spec["seq"], dtype=torch.long, device="meta")
    labels = torch.empty(spec["batch"], spec["target_seq"], dtype=torch.long, device="meta")
    return {"input_ids": ids, "labels": labels}


@dataclass(frozen=True)
class Task:
    auto_class: str  # the transformers Auto class that builds the model from its config
    batch: Callable[[dict], dict]
    peft_task_type: Optional[str]  # LoraConfig(task_type=...)
    modules_to_save: Tuple[str, ...] = ()  # LoraConfig(modules_to_save=...), where given by hand
    trained_head: Tuple[str, ...] = ()  # modules PEFT trains in full: headroom's --train


TASKS = {
    "causal-lm": Task("AutoModelForCausalLM", causal_lm_batch, "CAUSAL_LM"),
    "sequence-classification": Task("AutoModelForSequenceClassification", sequence_classification_batch,
                                    "SEQ_CLS", trained_head=("classifier",)),
    "image-classification": Task("AutoModelForImageClassification", image_classification_batch, None,
                                 modules_to_save=("classifier",), trained_head=("classifier",)),
    "contrastive": Task("AutoModel", contrastive_batch, None),
    "image-text-to-text": Task("AutoModelForImageTextToText", image_text_batch, "CAUSAL_LM"),
    "seq2seq-lm": Task("AutoModelForSeq2SeqLM", seq2seq_batch, "SEQ_2_SEQ_LM"),
}


def task_of(spec: dict) -> Task:
    name = spec.get("task", "causal-lm")
    if name not in TASKS:
        raise ValueError(f"task '{name}': expected one of {', '.join(TASKS)}")
    return TASKS[name]
