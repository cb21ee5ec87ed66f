#!/usr/bin/env bash
# tdsl on an NVIDIA GPU, in one command: the full CUDA correctness suite (every standard-library
# op, built by nvcc and run on the GPU against its numpy reference at awkward sizes, with its
# GPU schedule and with random tiles and bindings; the GPU lowering and error tests), then a
# short benchmark (matmul 1024/4096 and ResNet-18's 3x3 conv2d layers, kernel times with the
# data on the device, beside PyTorch's cuBLAS/cuDNN when PyTorch with CUDA is installed).
#
#     bash scripts/gpu_check.sh            # from anywhere; about 2-4 minutes
#     bash scripts/gpu_check.sh --dry-run  # no GPU: every build step (nvcc for sm_90 and its
#                                          # PTX), the runs skipped ("no CUDA device"), and
#                                          # nothing installed (tdsl from this checkout)
#
#     TDSL_GPU_WHEELS=DIR bash scripts/gpu_check.sh   # a machine with no package registry:
#                                          # tdsl's missing dependencies from wheels in DIR
#                                          # (`pip download lark cffi pycparser -d DIR`), tdsl
#                                          # from this checkout
#
# Needs: an NVIDIA GPU with its driver, python3 with pip, gcc. nvcc is used from PATH (or
# /usr/local/cuda/bin); without one, the CUDA toolkit's pip wheels are installed (the CUDA
# 13 ones for a driver of CUDA 13 or later, else the CUDA 12 ones), and nvcc finds the
# runtime's headers and libraries through CPATH and LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
start=$(date +%s)
say() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - start ))"; }

say "the GPU"
if [ "$dry" = 1 ]; then
    echo "dry run: no GPU needed; building for sm_90"
    cap=90
    driver_cuda=""
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    if ! command -v nvidia-smi >/dev/null; then
        echo "nvidia-smi not found: this script needs an NVIDIA GPU and its driver" \
             "(or --dry-run)" >&2
        exit 2
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
    driver_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -1)
    echo "compute capability sm_${cap}; the driver supports CUDA ${driver_cuda:-?}"

    say "Python packages"
    if [ -n "${TDSL_GPU_WHEELS:-}" ]; then
        python3 -m pip install --quiet --disable-pip-version-check --no-index \
            --find-links "$TDSL_GPU_WHEELS" "$TDSL_GPU_WHEELS"/*.whl
        export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    else
        python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
    fi
fi

say "nvcc"
export PATH="$PATH:/usr/local/cuda/bin"
if ! command -v nvcc >/dev/null; then
    [ "$dry" = 1 ] && { echo "dry run: nvcc not found (nothing is installed in a dry run)" >&2; exit 2; }
    if [ "${driver_cuda:-13}" -ge 13 ]; then
        wheels="nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl"
    else
        wheels="nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-cccl-cu12"
    fi
    python3 -m pip install --quiet --disable-pip-version-check $wheels
    root=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))')/nvidia
    nvcc_bin=$(find "$root" -type f -name nvcc | head -1)
    [ -n "$nvcc_bin" ] || { echo "no nvcc in the pip wheels under $root" >&2; exit 2; }
    export PATH="$(dirname "$nvcc_bin"):$PATH"
    for d in $(find "$root" -type d -name include); do export CPATH="$d${CPATH:+:$CPATH}"; done
    for d in $(find "$root" -type d \( -name lib -o -name lib64 \)); do
        export LIBRARY_PATH="$d${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
fi
nvcc --version | tail -2
target="cuda -arch=sm_${cap}"
python3 -m tdsl target "$target"

say "CUDA correctness suite"
export TDSL_CACHE_DIR="${TDSL_CACHE_DIR:-$PWD/.tdsl-gpu-cache}"
export TDSL_TEST_CUDA_TARGET="$target"
# nvcc builds dominate: one test process per core (pytest-xdist)
workers=$(python3 -c 'import os; print(max(1, min(16, len(os.sched_getaffinity(0)))))')
[ "$dry" = 1 ] && workers=${TDSL_GPU_CHECK_WORKERS:-2}
python3 -m pytest -q -p no:cacheprovider -n "$workers" -rs tests/test_stdlib_cuda.py \
    tests/test_gpu_lowering.py tests/test_gpu_reductions.py \
    "tests/test_one_semantics.py::test_float_to_int_casts_saturate_under_cuda"

say "CUDA benchmark"
python3 benchmarks/bench_ops.py --target "$target" matmul conv2d

say "done"
