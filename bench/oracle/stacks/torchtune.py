"""torchtune's single-device recipes: `FullFinetuneRecipeSingleDevice` and
`LoRAFinetuneRecipeSingleDevice` (recipes/full_finetune_single_device.py,
recipes/lora_finetune_single_device.py of the pinned release), built from a
config made in code (stacks/torchtune_config.py) and run by their own `setup`
and `train`.

What runs is the recipe's code: the model builder under
`training.set_default_dtype` and the device, `set_trainable_params` for LoRA,
`training.set_activation_checkpointing`, `load_state_dict`, the activation
offloading context, the optimizer (in backward through
`register_optim_in_bwd_hooks`), the loss with `set_num_output_chunks`, the data
loader with `padded_collate_sft`, and `train()`: `_loss_step`, the token-count
scaling, `backward`, `scale_grads`, `clip_grad_norm_`, `step`,
`zero_grad(set_to_none=True)`, the scheduler. What the oracle replaces, and why:
- the device is meta (`device: meta`): the recipe builds the model there at full
  size; `verify_bf16_support` says yes (the GPU's answer), and the CUDA memory
  statistics the recipe logs are zeros (no allocator on meta);
- the checkpoint: `load_checkpoint` gives a state dict of meta tensors of the
  builder's own shapes (a second meta model), `save_checkpoint` saves nothing;
- the tokenizer and the dataset: `pad_id` only, and `samples` rows of `seq`
  token ids, every row full (the collate pads nothing);
- RoPE: `Llama3ScaledRoPE.rope_init` returns early on meta (its scaling reads the
  frequencies' values), so the cache is built by the module's own
  `build_rope_cache` from the unscaled frequencies: same shape and dtype;
- the logged loss: `train()` reads `running_loss.item()` for its progress bar and
  metric log; that one read, from `train` itself, answers NaN;
- activation offloading (stacks/torchtune_offload.py): the recipe refuses it off
  CUDA, so it is switched on after `__init__`; its CUDA streams, pinned host copies
  and copies back are replaced there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import tempfile

import torch
from omegaconf import OmegaConf

import torchtune
from torchtune import config as tt_config
from torchtune import training
from torchtune.modules.peft import get_adapter_params

from meta_recorder import Recorder, optimizer_state_tensors, tensors_of
from patching import patched
from stacks.torchtune_config import recipe_config, recipe_name
from stacks.torchtune_offload import offloading_on_meta

_RECIPE_CLASSES = {"full_finetune_single_device": "FullFinetuneRecipeSingleDevice",
                   "lora_finetune_single_device": "LoRAFinetuneRecipeSingleDevice"}


def _recipe_class(name: str):
    """The recipe class from the release's recipes/ folder (installed beside the
    package; its __init__ refuses being imported as a package, so by path)."""
    module_name = f"torchtune_recipes_{name}"
    if module_name not in sys.modules:
        path = os.path.join(os.path.dirname(torchtune.__path__[0]), "recipes", f"{name}.py")
        found = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(found)
        sys.modules[module_name] = module
        found.loader.exec_module(module)
    return getattr(sys.modules[module_name], _RECIPE_CLASSES[name])


# -- the data: components the config names ------------------------------------
class MetaTokenizer:
    """What the recipe reads of its tokenizer: the padding id for the collate."""

    def __init__(self, max_seq_len=None):
        self.pad_id = 0
        self.max_seq_len = max_seq_len


def meta_dataset(tokenizer, samples: int, seq: int, packed: bool = False) -> list:
    """A map-style dataset of `samples` rows of `seq` tokens, as an SFT dataset's
    items ({"tokens", "labels"}); every row is full, so no padding is made."""
    del tokenizer, packed
    return [{"tokens": [1] * seq, "labels": [1] * seq} for _ in range(samples)]


def oracle_config(spec: dict, output_dir: str) -> dict:
    """The run's recipe config with the oracle's replacements (module docstring)."""
    config = recipe_config(spec)
    config.update({
        "output_dir": output_dir,
        "device": "meta",
        "tokenizer": {"_component_": "stacks.torchtune.MetaTokenizer", "max_seq_len": None},
        "dataset": {"_component_": "stacks.torchtune.meta_dataset",
                    "samples": spec["batch"] * spec.get("steps", 2), "seq": spec["seq"], "packed": False},
        "checkpointer": {"model_type": "LLAMA3"},  # read only for a log hint; load_checkpoint is replaced
        "metric_logger": {"_component_": "torchtune.training.metric_logging.DiskLogger", "log_dir": output_dir},
        "log_every_n_steps": 1,
        "log_peak_memory_stats": False,
    })
    return config


# -- the model's dimensions against the config.json headroom is given ---------
def _dimensions(state: dict) -> dict:
    hidden = state["tok_embeddings.weight"].shape[1]
    return {"vocab_size": state["tok_embeddings.weight"].shape[0], "hidden_size": hidden,
            "num_hidden_layers": len({k.split(".")[1] for k in state if k.startswith("layers.")}),
            "q_rows": state["layers.0.attn.q_proj.weight"].shape[0],
            "kv_rows": state["layers.0.attn.k_proj.weight"].shape[0],
            "intermediate_size": state["layers.0.mlp.w1.weight"].shape[0],
            "tie_word_embeddings": "output.weight" not in state,
            "attention_bias": "layers.0.attn.q_proj.bias" in state}


def _hf_dimensions(folder: str) -> dict:
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    return {"vocab_size": hf["vocab_size"], "hidden_size": hf["hidden_size"],
            "num_hidden_layers": hf["num_hidden_layers"], "q_rows": hf["num_attention_heads"] * head_dim,
            "kv_rows": hf.get("num_key_value_heads", hf["num_attention_heads"]) * head_dim,
            "intermediate_size": hf["intermediate_size"],
            "tie_word_embeddings": hf.get("tie_word_embeddings", False),
            "attention_bias": hf.get("attention_bias", hf["model_type"] == "qwen2")}


def check_dimensions(state: dict, folder: str) -> None:
    """The builder's model must be the config.json headroom is given (flags.py)."""
    built, given = _dimensions(state), _hf_dimensions(folder)
    wrong = {k: (built[k], given[k]) for k in built if built[k] != given[k]}
    if wrong:
        raise ValueError(f"torchtune builder and {folder}/config.json differ (builder, config): {wrong}")


# -- the recipe, with the oracle's replacements -------------------------------
def _build_rope_caches(model: torch.nn.Module) -> None:
    for module in model.modules():
        if getattr(module, "is_cache_built", True) is False and hasattr(module, "build_rope_cache"):
            steps = torch.arange(0, module.dim, 2, device="meta")[: module.dim // 2].float()
            theta = 1.0 / (module.base ** (steps / module.dim))
            module.register_buffer("theta", theta, persistent=False)
            module.build_rope_cache(module.max_seq_len)
            module.is_cache_built = True


def _meta_recipe(base: type, spec: dict, recorder: Recorder) -> type:
    class MetaRecipe(base):
        def __init__(self, cfg):
            # The recipe refuses offloading off CUDA; stacks/torchtune_offload.py runs it on meta.
            offload = cfg.enable_activation_offloading
            cfg.enable_activation_offloading = False
            super().__init__(cfg)
            cfg.enable_activation_offloading = offload
            self._enable_activation_offloading = offload
            self._oracle_cfg = cfg

        def load_checkpoint(self, cfg_checkpointer):
            """A state dict of the builder's own shapes, on meta, as the checkpointer
            would load it (the base weights only, for LoRA)."""
            with training.set_default_dtype(self._dtype), torch.device("meta"):
                model = tt_config.instantiate(self._oracle_cfg.model)
            adapters = get_adapter_params(model) if spec["method"] == "lora" else {}
            state = {k: v for k, v in model.state_dict().items() if k not in adapters}
            check_dimensions(state, spec["model"])
            return {training.MODEL_KEY: state}

        def save_checkpoint(self, epoch: int) -> None:
            pass  # after the steps; a meta tensor has nothing to save

        def _setup_model(self, *args, **kwargs):
            model = super()._setup_model(*args, **kwargs)
            _build_rope_caches(model)
            return model

        def _setup_optimizer(self, *args, **kwargs):
            # Before the optimizer's own hooks: with optimizer_in_bwd they step and free
            # each gradient as it is accumulated, and hooks run in registration order.
            for p in self._model.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(lambda q: recorder.mark("gradients", [q.grad]))
            return super()._setup_optimizer(*args, **kwargs)

        def _loss_step(self, batch):
            recorder.mark("inputs", tensors_of(batch))
            return super()._loss_step(batch)

    return MetaRecipe


class _Steps:
    """The recipe's data loader, naming the recorder's phase by step."""

    def __init__(self, loader, recorder: Recorder) -> None:
        self.loader, self.recorder, self.step = loader, recorder, 0

    @property
    def sampler(self):
        return self.loader.sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for self.step, batch in enumerate(self.loader):
            self.recorder.phase = f"step{self.step}.forward_backward"
            yield batch

    def enter(self, name: str) -> None:
        self.recorder.phase = f"step{self.step}.{name}"


@contextlib.contextmanager
def _device_answers():
    """What the recipe asks of the device that meta cannot answer (module docstring)."""
    zeros = {"peak_memory_active": 0.0, "peak_memory_alloc": 0.0, "peak_memory_reserved": 0.0}
    with patched(training.precision, "verify_bf16_support", lambda: True), \
            patched(training, "get_memory_stats", lambda device, reset_stats=True: dict(zeros)):
        yield


@contextlib.contextmanager
def _loss_read_for_logging(train):
    """`train()`'s one value read, the loss it logs, answers NaN (module docstring);
    any other read of a meta value still stops the run (meta_recorder)."""
    original = torch.Tensor.item

    def item(self):
        if self.device.type == "meta" and sys._getframe(1).f_code is train.__code__:
            return float("nan")
        return original(self)

    with patched(torch.Tensor, "item", item):
        yield


@contextlib.contextmanager
def _phases(recipe, steps: _Steps):
    """Phase names at the optimizer (scale_grads starts it) and at zero_grad."""
    scale_grads = training.scale_grads

    def scale(model, scaler):
        steps.enter("optimizer")
        return scale_grads(model, scaler)

    with patched(training, "scale_grads", scale):
        optimizer = getattr(recipe, "_optimizer", None)
        if optimizer is not None:
            zero_grad = optimizer.zero_grad

            def zero(*args, **kwargs):
                steps.enter("zero_grad")
                return zero_grad(*args, **kwargs)

            optimizer.zero_grad = zero
        yield


def _optimizer_states(recipe) -> list:
    wrapper = getattr(recipe, "_optim_ckpt_wrapper", None)
    optimizers = list(wrapper.optim_map.values()) if wrapper is not None else [recipe._optimizer]
    return [t for o in optimizers for t in optimizer_state_tensors(o)]


def run(spec: dict, recorder: Recorder) -> dict:
    """Sets the recipe up and records its `train()` over `spec["steps"]` steps."""
    name = recipe_name(spec)
    recipe_class = _meta_recipe(_recipe_class(name), spec, recorder)
    # the recipe's prints (DiskLogger's "Writing logs to") are not run_oracle's JSON
    with contextlib.redirect_stdout(sys.stderr), tempfile.TemporaryDirectory() as output_dir, \
            _device_answers(), offloading_on_meta(recorder, enabled=bool(spec.get("offload", False))):
        cfg = OmegaConf.create(oracle_config(spec, output_dir))
        recipe = recipe_class(cfg)
        recipe.setup(cfg)
        recorder.adopt_model(list(recipe._model.parameters()), recipe._model.buffers())
        steps = _Steps(recipe._dataloader, recorder)
        recipe._dataloader = steps
        recorder.begin("step0.start")
        with _phases(recipe, steps), _loss_read_for_logging(recipe_class.train):
            recipe.train()
        recorder.mark("optimizer_states", _optimizer_states(recipe))
        recipe.cleanup()
    return {"recipe": name}
