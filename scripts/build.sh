#!/usr/bin/env bash
# Configures and builds headroom into build/ (Release, Ninja). When .venv holds
# LibTorch (scripts/setup_torch.sh), the executor is built too. Arguments name
# the targets to build (default: all); `headroom` brings the trainer with it.
# With ccache installed (scripts/setup.sh) compilations are cached across clones:
# CCACHE_BASEDIR makes the paths inside this checkout relative, so a fresh clone
# elsewhere on the machine hits what an earlier one compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
torch_flags=()
if prefix=$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
  # The wheel is the CUDA 13 build: point its CMake config at /usr/local/cuda, and
  # name the GPU architectures so it does not try to detect a GPU at configure time.
  torch_flags=(-DCMAKE_PREFIX_PATH="$prefix" -DCUDAToolkit_ROOT=/usr/local/cuda
               -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_STANDARD=17
               "-DTORCH_CUDA_ARCH_LIST=8.0;8.6;8.9;9.0")
fi
cache_flags=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  cache_flags=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${torch_flags[@]}" "${cache_flags[@]}" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build -j"$(nproc)" --target "$@"
else
  cmake --build build -j"$(nproc)"
fi
