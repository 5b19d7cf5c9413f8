#!/usr/bin/env bash
# CTest label oracle: the meta-device oracle (bench/oracle). SUITE is "recorder"
# (the recorder and its CUDA shims, torch only: .venv), "hf-trainer" (the
# Trainer's step on a tiny Llama beside headroom: .venv-oracle/hf5, made by
# bench/oracle/setup_env.sh hf5), "fsdp2" (fully_shard on the fake process group,
# a tiny Llama, hand-counted: .venv-oracle/hf5) or "torchtune" (torchtune's
# single-device recipes on a tiny Llama beside headroom: .venv-oracle/tt,
# bench/oracle/setup_env.sh tt), "diffusers-flux" (diffusers' Flux LoRA step on a
# tiny FluxTransformer2DModel, hand-counted: .venv-oracle/df), "litgpt" (litgpt's
# finetune step under Fabric on a tiny Llama: .venv-oracle/lg), "encoders" (the Trainer
# on BERT and ViT: .venv-oracle/hf5) or "torch-loop" (torchvision's ResNet-50 in a plain
# loop: .venv-oracle/vision), "trl" (TRL's SFTTrainer LoRA step on a tiny Llama beside
# headroom: .venv-oracle/trl), "trl-dpo" (TRL's DPOTrainer, each reference, the same env) or "bnb-old" (QLoRA under bitsandbytes 0.43.1, whose kernels
# bench/oracle/bnb_shims.py runs on meta: .venv-oracle/hf4bnb43); bench/oracle/setup_env.sh
# NAME makes each. Exit 77 (skip)
# when the environment is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
suite="$1"
case "$suite" in
  recorder)
    python="$root/.venv/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (scripts/setup_torch.sh)"; exit 77; }
    exec "$python" "$root/tests/oracle/test_recorder.py" ;;
  hf-trainer)
    python="$root/.venv-oracle/hf5/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh hf5)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_hf_trainer_tiny.py" ;;
  fsdp2)
    python="$root/.venv-oracle/hf5/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh hf5)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_fsdp2_tiny.py" ;;
  torchtune)
    python="$root/.venv-oracle/tt/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh tt)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_torchtune_tiny.py" ;;
  diffusers-flux)
    python="$root/.venv-oracle/df/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh df)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_diffusers_flux_tiny.py" ;;
  litgpt)
    python="$root/.venv-oracle/lg/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh lg)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_litgpt_tiny.py" ;;
  encoders)
    python="$root/.venv-oracle/hf5/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh hf5)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_encoders_tiny.py" ;;
  torch-loop)
    python="$root/.venv-oracle/vision/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh vision)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_torch_loop_tiny.py" ;;
  trl)
    python="$root/.venv-oracle/trl/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh trl)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_trl_sft_tiny.py" ;;
  trl-dpo)
    python="$root/.venv-oracle/trl/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh trl)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_trl_dpo_tiny.py" ;;
  bnb-old)
    python="$root/.venv-oracle/hf4bnb43/bin/python"
    [ -x "$python" ] || { echo "oracle: skipped: no $python (bench/oracle/setup_env.sh hf4bnb43)"; exit 77; }
    ORACLE_PYTHON="$python" HEADROOM="$2" exec python3 "$root/tests/oracle/test_bnb_old_tiny.py" ;;
  *) echo "run_oracle_tests: unknown suite '$suite' (recorder, hf-trainer, fsdp2, torchtune, diffusers-flux, litgpt, encoders, torch-loop, trl or bnb-old)" >&2; exit 2 ;;
esac
