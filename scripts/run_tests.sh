#!/usr/bin/env bash
# Builds everything and runs every test suite: graph, models, planner, reports,
# cli, the HTML report in headless Chromium, the LibTorch executor on CPU, and the
# PyTorch exporter against the builders (label exporter), and the meta-device
# oracle (label oracle).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-browser
if ! scripts/setup_torch.sh >/dev/null 2>.venv-setup.log; then
  echo "run_tests: WARNING: LibTorch could not be installed (see .venv-setup.log); the executor is not built or tested" >&2
fi
# The exporter's packages and the oracle's environments are needed by the tests only,
# not by the build: they are made while it compiles (mostly waiting on the disk and
# the package index, about two minutes from a fresh clone), one after another.
python_envs() {
  if ! scripts/setup_exporter.sh >/dev/null 2>>.venv-setup.log; then
    echo "run_tests: WARNING: the exporter's packages could not be installed (see .venv-setup.log); its tests are skipped" >&2
  fi
  for env in hf5 tt lg df vision trl hf4bnb43 ds liger; do  # the oracle's stacks: Trainer, torchtune, litgpt, diffusers, torchvision, TRL, bitsandbytes 0.43.1, DeepSpeed, Liger (bench/oracle/envs/)
    if ! bench/oracle/setup_env.sh "$env" >/dev/null 2>>.venv-setup.log; then
      echo "run_tests: WARNING: the oracle's pinned environment $env could not be made (see .venv-setup.log); its tests are skipped" >&2
    fi
  done
}
python_envs &
envs=$!
if ! scripts/build.sh; then
  wait "$envs" || true
  exit 1
fi
wait "$envs"
ctest --test-dir build --output-on-failure -j"$(nproc)"
