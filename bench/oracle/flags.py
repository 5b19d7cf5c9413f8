"""A run of the oracle as a user would give it to headroom: `fit` flags."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from stacks.deepspeed_config import config_json as deepspeed_json
from stacks.diffusers_flux_args import args_of as flux_args_of
from stacks.diffusers_sd3_args import args_of as sd3_args_of
from stacks.diffusers_sdxl_args import args_of as sdxl_args_of
from stacks.hf_tasks import task_of
from stacks.torchtune_config import recipe_config, to_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# transformers' `optim` names -> how optimizer.step() runs (torch/optim/adamw.py)
_OPTIMIZER_IMPL = {"adamw_torch_fused": "fused", "adamw_torch": "foreach"}
# transformers' `optim` names -> headroom's optimizer flags: bitsandbytes' optimizers
# (trainer_optimizer.py `_get_bitsandbytes_optimizer`: "8bit" in the name is optim_bits 8,
# "paged" is_paged; planner/configs/hf_trainer_import.cc maps the same names)
_OPTIM_FLAGS = {"adamw_bnb_8bit": ["--optimizer", "adamw-8bit"],
                "adamw_8bit": ["--optimizer", "adamw-8bit"],
                "paged_adamw_8bit": ["--optimizer", "adamw-8bit", "--paged-optimizer"],
                "paged_adamw_32bit": ["--optimizer", "adamw", "--paged-optimizer"],
                # transformers' own Adafactor (optimization.py), a loop per parameter
                "adafactor": ["--optimizer", "adafactor"],
                # torchao's AdamW8bit / AdamW4bit (`_get_torchao_optimizer`)
                "adamw_torch_8bit": ["--optimizer", "adamw-8bit-torchao"],
                "adamw_torch_4bit": ["--optimizer", "adamw-4bit"]}


def optim_flags(optim: str, optim_args: str = "") -> list:
    """The Trainer's `optim` (and its `optim_args`) as headroom's optimizer flags."""
    if optim == "sgd":
        # torch.optim.SGD, foreach; a state only with optim_args' momentum (`_get_sgd`)
        args = dict(pair.strip().split("=", 1) for pair in optim_args.split(",") if "=" in pair)
        kind = "sgd" if float(args.get("momentum", 0)) > 0 else "sgd-no-momentum"
        return ["--optimizer", kind, "--optimizer-impl", "foreach"]
    if optim in _OPTIM_FLAGS:
        return _OPTIM_FLAGS[optim]
    return ["--optimizer-impl", _OPTIMIZER_IMPL[optim]]


def model_path(spec: dict) -> str:
    """A config folder under the repository, from any cwd; a zoo name (no '/', as headroom
    tells a path from a name: `fit --help`) as it is."""
    if os.path.isabs(spec["model"]) or "/" not in spec["model"]:
        return spec["model"]
    return os.path.join(ROOT, spec["model"])


# The packages whose release headroom reads (planner/settings/versions.cc).
_RELEASED = ("transformers", "torch", "peft", "accelerate", "trl", "bitsandbytes", "torchtune")


def release_flags(spec: dict) -> list:
    """`--versions` with the environment's releases, as a user copies them from
    `pip freeze` (docs/stacks.md, "Releases")."""
    found = spec.get("versions", {})
    given = [f"{name}={found[name]}" for name in _RELEASED if name in found]
    return ["--versions", ",".join(given)] if given else []


def with_current_releases(command: list, versions: dict) -> list:
    """A recorded command with its `--versions` made again from the recorded releases, so a
    release headroom has learnt to read since the recording reaches it."""
    out = list(command)
    if "--versions" not in out:
        return out
    at = out.index("--versions")
    out[at:at + 2] = release_flags({"versions": versions})
    return out


def refreshed_command(row: dict) -> list:
    """A recorded row's `headroom fit` command as this checkout gives it: made again from
    the spec where nothing the oracle resolved goes into it (a plain loop, torchtune), else the
    recorded command with its releases made again (with_current_releases)."""
    if row["spec"]["stack"] in ("torch-loop", "torchtune"):
        spec = dict(row["spec"], versions=row.get("versions", {}))
        return ["headroom", "fit", *headroom_flags(spec), "--json"]
    command = with_current_releases(row["command"].split(" "), row.get("versions", {}))
    if _reentrant_trainer(row["spec"]) and "--recompute" not in command:
        command[-1:-1] = ["--recompute", "block-reentrant"]  # rows recorded before the flag
    return command


def _reentrant_trainer(spec: dict) -> bool:
    """A Trainer run (not sharded) under use_reentrant=True, which `headroom_flags` names."""
    return spec.get("checkpointing") == "reentrant" and "world_size" not in spec and \
        spec["stack"] in ("hf-trainer", "trl-sft")


def headroom_flags(spec: dict) -> list:
    if spec.get("zero_stage"):
        return deepspeed_flags(spec)
    if "world_size" in spec:
        return sharded_flags(spec)
    if spec["stack"] == "torchtune":
        return torchtune_flags(spec)
    if spec["stack"] == "diffusers-flux":
        return diffusers_flux_flags(spec)
    if spec["stack"] == "diffusers-sd3":
        return diffusers_sd3_flags(spec)
    if spec["stack"] == "diffusers-sdxl":
        return diffusers_sdxl_flags(spec)
    if spec["stack"] == "torch-loop":
        return torch_loop_flags(spec)
    # TRL's SFTTrainer is the Trainer's stack with TRL's release given (`--versions trl=X`);
    # its DPOTrainer the same with the recipe and the reference's treatment (stacks/trl_dpo.py),
    # its RewardTrainer with the reward recipe (stacks/trl_reward.py), its GRPOTrainer with
    # the GRPO recipe, the completion's length and the groups (stacks/trl_grpo.py)
    stack = "hf-trainer" if spec["stack"] in ("trl-sft", "trl-dpo", "trl-reward", "trl-grpo") else spec["stack"]
    flags = [model_path(spec), "--gpu", spec.get("gpu", "h200"), "--stack", stack,
             "--precision", spec["precision"], "--batch", str(spec["batch"]), *shape_flags(spec)]
    if spec["method"] in ("lora", "qlora"):
        flags += ["--mode", spec["method"], "--lora-rank", str(spec.get("lora_rank", 16)),
                  "--lora-targets", ",".join(headroom_module_names(spec, spec["lora_targets"])),
                  "--lora-dropout", str(spec.get("lora_dropout", 0.05))]
        if spec.get("use_dora", False):  # LoraConfig(use_dora=True)
            flags.append("--dora")
        for module in task_of(spec).trained_head:  # PEFT's modules_to_save
            flags += ["--train", module]
        if spec["stack"] == "trl-reward":  # task_type SEQ_CLS trains the reward head in full
            flags += ["--train", "score"]
    else:
        flags += ["--mode", "full"]
    if spec["method"] == "qlora":
        flags += ["--kbit-prep", spec.get("kbit_prep", "none")]
        if not spec.get("double_quant", True):
            flags.append("--no-double-quant")
    if spec.get("checkpointing", "none") != "none":
        flags += ["--checkpointing", "every"]
    if _reentrant_trainer(spec):  # use_reentrant=True: what trains can differ
        flags += ["--recompute", "block-reentrant"]
    if "optim" in spec:
        flags += optim_flags(spec["optim"], spec.get("optim_args", ""))
    if spec.get("grad_accum", 1) > 1:  # litgpt: global_batch_size // micro_batch_size
        flags += ["--grad-accum", str(spec["grad_accum"])]
    flags += release_flags(spec)
    if spec["stack"] == "trl-dpo":
        flags += ["--recipe", "dpo", "--reference", spec["ref"]]
    if spec["stack"] == "trl-reward":
        flags += ["--recipe", "reward"]
    if spec["stack"] == "trl-grpo":
        flags += grpo_flags(spec)
    if spec.get("attention", "sdpa") != "sdpa":
        flags += ["--attention", spec["attention"]]
    for pattern in spec.get("freeze", []):  # stacks/hf_models.py freeze_modules
        flags += ["--freeze", pattern]
    return flags + liger_flags(spec)


def liger_flags(spec: dict) -> list:
    """The Trainer's use_liger_kernel (`liger`: true or a liger_kernel_config): the fused linear
    cross-entropy unless the config turns it off, the RMSNorm, SwiGLU and RoPE kernels unless it
    turns them off (docs/config-import.md, use_liger_kernel)."""
    liger = spec.get("liger", False)
    if not liger:
        return []
    config = liger if isinstance(liger, dict) else {}
    flags = ["--loss", "fused-linear-ce"] if config.get("fused_linear_cross_entropy", True) else []
    if config.get("rms_norm", True):  # with swiglu: headroom takes the two together
        flags += ["--liger-kernels", "on"]
    return flags


def grpo_flags(spec: dict) -> list:
    """GRPOConfig's fields as headroom's flags; beta != 0 takes TRL's reference for the mode."""
    flags = ["--recipe", "grpo", "--completion-tokens", str(spec["completion"]),
             "--num-generations", str(spec["num_generations"])]
    if spec.get("beta", 0.0) != 0.0:
        flags += ["--reference", "copy" if spec["method"] == "full" else "adapter-disabled"]
    if "steps_per_generation" in spec:
        flags += ["--steps-per-generation", str(spec["steps_per_generation"])]
    return flags


def shape_flags(spec: dict) -> list:
    """An image's side in pixels (`image_size`), or the tokens of a sample (GRPO: the
    prompt and the completion)."""
    if spec.get("task") == "image-text-to-text":  # an image and the LM's tokens (Qwen2.5-VL)
        return ["--resolution", str(spec["image_size"]), "--seq", str(spec["seq"])]
    if spec.get("task") == "seq2seq-lm":  # the encoder's tokens and the decoder's (T5)
        return ["--seq", str(spec["seq"]), "--target-seq", str(spec["target_seq"])]
    if "image_size" in spec:
        return ["--resolution", str(spec["image_size"])]
    if "completion" in spec:
        return ["--seq", str(spec["prompt"] + spec["completion"])]
    return ["--seq", str(spec["seq"])]


# Modules a transformers release renamed, as headroom's graph names them (the names of
# the releases it was built from). transformers 5 renamed ViT's attention linears
# (models/vit/modeling_vit.py ViTAttention: q_proj, k_proj, v_proj, o_proj; 4.x:
# ViTSelfAttention query, key, value and ViTSelfOutput dense); headroom's ViT graph
# keeps the 4.x names (models/torch/vit_module.cc).
_HEADROOM_NAMES = {"vit": {"q_proj": "query", "k_proj": "key", "v_proj": "value", "o_proj": "dense"}}


def headroom_module_names(spec: dict, modules: list) -> list:
    path = os.path.join(model_path(spec), "config.json")
    model_type = ""
    if os.path.isfile(path):
        with open(path) as f:
            model_type = json.load(f).get("model_type", "")
    renamed = _HEADROOM_NAMES.get(model_type, {})
    return [renamed.get(m, m) for m in modules]


# -- a plain loop (stacks/torch_loop.py) -------------------------------------------
def torch_loop_flags(spec: dict) -> list:
    """A torchvision model in a plain loop: headroom's zoo model and `--stack torch-amp`
    (a plain loop with torch.autocast where the precision says amp; foreach optimizer,
    the output kept through backward: docs/stacks.md). The zoo model is the spec's
    `model`, the builder's (resnet-50: torchvision resnet50, v1.5)."""
    through = "on" if spec.get("zero_grad", "after-step") == "before-backward" else "off"
    return [spec["model"], "--gpu", spec.get("gpu", "h200"), "--stack", "torch-amp",
            "--precision", spec["precision"], "--batch", str(spec["batch"]), *shape_flags(spec),
            "--mode", "full", "--optimizer", spec.get("optimizer", "sgd"),
            "--grads-through-forward", through, *release_flags(spec)]


# -- sharded runs (stacks/fsdp2.py; hf-trainer with `sharding`) -------------------
# The plain fully_shard loop is no stack headroom names (torchtitan's keeps its last
# layer unsharded, torchtune's loss is chunked), so it is `unspecified` with each
# mechanism the loop pins given: torch.optim.AdamW as `optim` says, transformers'
# loss with the outputs dropped before backward, PEFT's fp32 adapters, no autocast.
_SHARDED_STACK = {"fsdp2": "unspecified", "hf-trainer": "hf-trainer"}


def sharded_flags(spec: dict) -> list:
    """`--gpus N --zero 3 --sharding fsdp2|fsdp1` and what the stack pins. FSDP2's
    reshard_after_forward False is ZeRO-2's layout, as headroom reads it from an
    accelerate or torchtune config (docs/config-import.md)."""
    one = {k: v for k, v in spec.items() if k != "world_size"}
    one["stack"] = _SHARDED_STACK[spec["stack"]]
    flags = headroom_flags(one)
    zero = "3" if spec.get("reshard_after_forward", True) else "2"
    flags += ["--gpus", str(spec["world_size"]), "--zero", zero,
              "--sharding", spec.get("sharding", "fsdp2")]
    if spec["stack"] == "fsdp2":
        flags += ["--loss", "full", "--adapter-dtype", "fp32",
                  "--reduce-dtype", "fp32" if spec["precision"] == "bf16-mixed" else "param"]
        if zero == "3" or spec["precision"] == "bf16":  # where headroom has autocast to pin
            flags += ["--autocast", "off"]
    return flags


# -- DeepSpeed ZeRO under the Trainer (stacks/hf_trainer_deepspeed.py) -------------
def deepspeed_flags(spec: dict) -> list:
    """The Trainer's flags on N GPUs with the DeepSpeed JSON the run used (`--deepspeed`,
    which headroom reads for the stage, buckets and precision), `--zero` as it says."""
    one = {k: v for k, v in spec.items() if k not in ("world_size", "zero_stage")}
    flags = headroom_flags(one)
    flags += ["--gpus", str(spec["world_size"]), "--zero", str(spec["zero_stage"]),
              "--deepspeed", _written(deepspeed_json(spec), "deepspeed", ".json")]
    if spec["zero_stage"] == 3:
        flags += ["--sharding", "deepspeed"]
    return flags


# -- torchtune ---------------------------------------------------------------------
# torchtune's LoRA module names as the HF config folders name them (headroom's
# importer maps them so for --torchtune: planner/configs/torchtune_import.cc read_lora)
_TORCHTUNE_LORA = {"q_proj": ["q_proj"], "k_proj": ["k_proj"], "v_proj": ["v_proj"], "output_proj": ["o_proj"]}
_TORCHTUNE_MLP = ["gate_proj", "up_proj", "down_proj"]  # apply_lora_to_mlp: w1, w3, w2


def config_text(spec: dict):
    """The config file a run gives headroom besides its flags (a torchtune YAML), or None."""
    if spec["stack"] == "torchtune" and spec.get("via", "yaml") == "yaml":
        return torchtune_yaml(spec)
    if spec.get("zero_stage"):
        return deepspeed_json(spec)
    return None


def torchtune_yaml(spec: dict) -> str:
    """The recipe config of the run, as the user writes it (stacks/torchtune_config.py)."""
    return to_yaml(recipe_config(spec)) + "\n"


def _written(text: str, kind: str = "torchtune", suffix: str = ".yaml") -> str:
    """A file holding `text`, named by its content (runs in parallel never clash)."""
    folder = os.path.join(tempfile.gettempdir(), "headroom-oracle")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}{suffix}")
    if not os.path.exists(path):
        with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
            f.write(text)
        os.replace(f.name, path)
    return path


def torchtune_flags(spec: dict) -> list:
    """`headroom fit` for a torchtune run. `via: yaml` (default): the recipe config,
    read by headroom's importer (`--torchtune`), the model its builder, and --seq
    (the configs leave tokenizer.max_seq_len null: the data decides). `via: flags`,
    for builders headroom's importer does not know (Qwen2.5, the tiny test model):
    the config.json folder with the builder's dimensions (stacks/torchtune.py checks
    them) and the flags a torchtune user gives."""
    tail = ["--gpu", spec.get("gpu", "h200"), "--seq", str(spec["seq"]), *release_flags(spec)]
    if spec.get("via", "yaml") == "yaml":
        return ["--torchtune", _written(torchtune_yaml(spec)), *tail]
    flags = [model_path(spec), *tail, "--stack", "torchtune", "--precision", "bf16",
             "--batch", str(spec["batch"]), "--mode", spec["method"]]
    if spec["method"] == "lora":
        targets = [name for t in spec["lora_targets"] for name in _TORCHTUNE_LORA[t]]
        targets += _TORCHTUNE_MLP if spec.get("lora_mlp", False) else []
        flags += ["--lora-rank", str(spec.get("lora_rank", 16)), "--lora-targets", ",".join(targets),
                  "--lora-dropout", str(spec.get("lora_dropout", 0.0))]
    if spec.get("checkpointing", "none") != "none":
        flags += ["--checkpointing", "every"]
    if spec.get("offload", False):
        flags.append("--offload-checkpoint-inputs")
    flags += ["--optimizer-impl", spec.get("optimizer", "fused")]
    loss = spec.get("loss", "chunked")
    flags += ["--loss", f"chunked:{spec.get('num_output_chunks', 8)}" if loss == "chunked" else "full"]
    return flags


# -- diffusers' Flux LoRA script (stacks/diffusers_flux.py) ------------------------
# headroom names no diffusers stack: `unspecified`, with what the script pins given.
# Accelerate's bf16 autocast over the bf16 transformer (`--autocast on`); torch.optim.AdamW
# without `fused` (foreach on CUDA); the adapters' dtype as the run resolved it (bf16:
# diffusers' add_adapter leaves them in the base layer's dtype); the loss is the model's
# (`--loss full` only closes the band an LM loss would open).
_ADAPTER_DTYPE = {"float32": "fp32", "bfloat16": "model", "float16": "model"}


def _diffusers_lora_flags(spec: dict, args: dict, text_flags: list) -> list:
    """A diffusers LoRA script's run as headroom's flags: the unspecified stack under autocast,
    `text_flags` the text length where the model takes one."""
    flags = [model_path(spec), "--gpu", spec.get("gpu", "h200"), "--stack", "unspecified",
             "--precision", "bf16", "--autocast", "on", "--resolution", str(spec["resolution"]),
             "--batch", str(spec["batch"]), *text_flags,
             "--mode", "lora", "--lora-rank", str(args["lora_rank"]),
             "--lora-targets", ",".join(args["lora_targets"]), "--lora-dropout", str(args["lora_dropout"]),
             "--adapter-dtype", _ADAPTER_DTYPE[spec.get("adapter_dtype", "bfloat16")],
             "--optimizer-impl", _OPTIMIZER_IMPL[spec.get("optim", "adamw_torch")], "--loss", "full"]
    if args["checkpointing"] != "none":
        flags += ["--checkpointing", "every"]
    return flags + release_flags(spec)


def diffusers_flux_flags(spec: dict) -> list:
    args = flux_args_of(spec)
    return _diffusers_lora_flags(spec, args, ["--text-tokens", str(args["max_sequence_length"])])


def diffusers_sd3_flags(spec: dict) -> list:
    """train_dreambooth_lora_sd3.py (stacks/diffusers_sd3.py) as diffusers_flux_flags gives
    Flux's: `--text-tokens` is the T5 length; headroom adds the 77 CLIP tokens."""
    args = sd3_args_of(spec)
    keys = ("lora_targets", "max_sequence_length", "lora_rank")
    return diffusers_flux_flags(dict(spec, **{k: args[k] for k in keys}))


def diffusers_sdxl_flags(spec: dict) -> list:
    """train_text_to_image_lora_sdxl.py (stacks/diffusers_sdxl.py) as diffusers_flux_flags gives
    Flux's, less `--text-tokens`: the UNet's 77 text tokens are fixed; with `encoders` (the
    script's resident VAE and text encoders) `--resident-encoders`."""
    return _diffusers_lora_flags(spec, sdxl_args_of(spec), ["--resident-encoders"] if "encoders" in spec else [])
