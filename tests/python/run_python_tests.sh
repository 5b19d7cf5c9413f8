#!/usr/bin/env bash
# CTest test python/package (label python): the Python package as a user gets it.
#   1. a fresh venv in WORK, `pip install REPO` (the one install command of docs/python.md),
#      timed, with no torch in it;
#   2. pytest from PyPI, and, when the project's .venv has torch and transformers
#      (scripts/setup_torch.sh, setup_exporter.sh), those made visible to the venv
#      through a .pth line rather than downloaded again, and peft from PyPI;
#   3. pytest tests/python against HEADROOM_CLI, the build's `headroom`.
# Without torch the callback tests skip and say so (as run_tests.sh treats the
# executor); the fit/plan tests always run.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
work="$1"
export HEADROOM_CLI="$2"
rm -rf "$work"
mkdir -p "$work"
python3 -m venv "$work/venv"
python="$work/venv/bin/python"
# One build directory for the wheel, kept between runs (pyproject.toml's
# build-dir), so a second run rebuilds only what changed.
# ccache (scripts/setup.sh) keeps the wheel's compilations between fresh clones,
# with paths inside the checkout made relative (as scripts/build.sh does); the
# main build's objects are the same commands (CMakeLists.txt: position-independent
# code, build-wheel/ at build/'s depth), so this install hits what it compiled.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$repo" CCACHE_NOHASHDIR=1
  # The main build's compiler by the name it was called: ccache keys on that name
  # (c++ and g++ are one GCC but two keys), and scikit-build-core would otherwise
  # take Python's sysconfig CXX (g++) and miss every object. $2 is BUILD/cli/headroom.
  main_cache="$(dirname "$(dirname "$HEADROOM_CLI")")/CMakeCache.txt"
  main_cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' "$main_cache" 2>/dev/null || true)
  if [ -n "$main_cxx" ]; then export CXX="$main_cxx"; fi
fi
start=$(date +%s)
"$python" -m pip install -q "$repo"
echo "run_python_tests: pip install of the package took $(( $(date +%s) - start )) s"
"$python" -m pip install -q "pytest>=7"
project_python="$repo/.venv/bin/python"
if [ -x "$project_python" ] && "$project_python" -c 'import torch, transformers' 2>/dev/null; then
  site=$("$project_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  own=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # After the venv's own packages: the package under test is the one just installed.
  echo "$site" > "$own/zz_headroom_project_venv.pth"
  "$python" -m pip install -q accelerate peft  # the Trainer needs accelerate; the LoRA test peft
else
  echo "run_python_tests: no torch/transformers in $repo/.venv (scripts/setup_torch.sh, setup_exporter.sh): the callback tests are skipped"
fi
cd "$work"  # import headroom from the venv, never from the source tree
start=$(date +%s)
"$python" -m pytest -q -rs -p no:cacheprovider "$repo/tests/python"
echo "run_python_tests: pytest took $(( $(date +%s) - start )) s"
