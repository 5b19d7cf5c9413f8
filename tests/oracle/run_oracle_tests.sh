#!/usr/bin/env bash
# CTest label oracle: the meta-device oracle (bench/oracle). SUITE names a test
# file and the pinned environment it runs in (bench/oracle/envs/ENV.txt, made by
# bench/oracle/setup_env.sh ENV):
#   recorder        the recorder and its CUDA shims, torch only (.venv)
#   hf-trainer      the Trainer's step on a tiny Llama beside headroom (hf5)
#   fsdp2           fully_shard on the fake process group, hand-counted (hf5)
#   torchtune       torchtune's single-device recipes on a tiny Llama (tt)
#   diffusers-flux  diffusers' Flux LoRA step, hand-counted (df)
#   diffusers-sd3   diffusers' SD3 LoRA step, hand-counted (df)
#   diffusers-sdxl  diffusers' SDXL UNet LoRA step, hand-counted (df)
#   litgpt          litgpt's finetune step under Fabric (lg)
#   encoders        the Trainer on BERT and ViT (hf5)
#   qwen-vl         the Trainer on Qwen2.5-VL with pixel_values and image_grid_thw (hf5)
#   torch-loop      torchvision's ResNet-50 in a plain loop (vision)
#   trl, trl-dpo    TRL's SFTTrainer and DPOTrainer (trl)
#   trl-reward      TRL's RewardTrainer (trl)
#   bnb-gemm        bitsandbytes 0.50.2's gemm_4bit dispatch on meta, hand-counted (hf5)
#   bnb-old         QLoRA under bitsandbytes 0.43.1 and its meta shims (hf4bnb43)
#   deepspeed       the Trainer under DeepSpeed ZeRO-2/3 on the meta accelerator (ds)
#   liger           the Trainer with use_liger_kernel, Liger's kernels shimmed on meta (liger)
# Exit 77 (skip) when the environment is missing or was left half-made: setup_env.sh
# stamps an environment only once every pin is installed (a failed pip, a full disk,
# leaves a venv without torch, which must read as "not there", not as a failure).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
suite="$1"
case "$suite" in
  recorder)       env=base;     test=test_recorder.py ;;
  hf-trainer)     env=hf5;      test=test_hf_trainer_tiny.py ;;
  fsdp2)          env=hf5;      test=test_fsdp2_tiny.py ;;
  torchtune)      env=tt;       test=test_torchtune_tiny.py ;;
  diffusers-flux) env=df;       test=test_diffusers_flux_tiny.py ;;
  diffusers-sd3)  env=df;       test=test_diffusers_sd3_tiny.py ;;
  diffusers-sdxl) env=df;       test=test_diffusers_sdxl_tiny.py ;;
  litgpt)         env=lg;       test=test_litgpt_tiny.py ;;
  encoders)       env=hf5;      test=test_encoders_tiny.py ;;
  qwen-vl)        env=hf5;      test=test_qwen_vl_tiny.py ;;
  torch-loop)     env=vision;   test=test_torch_loop_tiny.py ;;
  trl)            env=trl;      test=test_trl_sft_tiny.py ;;
  trl-dpo)        env=trl;      test=test_trl_dpo_tiny.py ;;
  trl-reward)     env=trl;      test=test_trl_reward_tiny.py ;;
  bnb-gemm)       env=hf5;      test=test_bnb_gemm.py ;;
  bnb-old)        env=hf4bnb43; test=test_bnb_old_tiny.py ;;
  bnb-optim)      env=hf5;      test=test_bnb_optim_tiny.py ;;
  deepspeed)      env=ds;       test=test_deepspeed_tiny.py ;;
  liger)          env=liger;    test=test_liger_tiny.py ;;
  *) echo "run_oracle_tests: unknown suite '$suite' (recorder, hf-trainer, fsdp2, torchtune, diffusers-flux, diffusers-sd3, diffusers-sdxl, litgpt, encoders, qwen-vl, torch-loop, trl, trl-dpo, trl-reward, bnb-gemm, bnb-old, bnb-optim, deepspeed or liger)" >&2; exit 2 ;;
esac
if [ "$env" = base ]; then
  python="$root/.venv/bin/python"
  "$python" -c 'import torch' 2>/dev/null \
    || { echo "oracle: skipped: no torch in $root/.venv (scripts/setup_torch.sh)"; exit 77; }
  exec "$python" "$root/tests/oracle/$test"
fi
python="$root/.venv-oracle/$env/bin/python"
stamp="$root/.venv-oracle/$env/headroom-pins.txt"
if ! cmp -s "$stamp" "$root/bench/oracle/envs/$env.txt"; then
  echo "oracle: skipped: .venv-oracle/$env is missing or not made from today's pins (bench/oracle/setup_env.sh $env)"
  exit 77
fi
if [ "$suite" = bnb-gemm ]; then
  exec "$python" "$root/tests/oracle/$test"  # imports torch and bitsandbytes itself
fi
ORACLE_PYTHON="$python" HEADROOM="${2:?usage: run_oracle_tests.sh SUITE HEADROOM}" \
  exec python3 "$root/tests/oracle/$test"
