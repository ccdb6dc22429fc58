#!/usr/bin/env bash
# Download into .gpu-wheels/ (git-ignored) the wheels the GPU check needs beyond what a GPU machine has.
#
# A GPU machine brings Python, torch, transformers, sentence-transformers, accelerate, numpy, pandas, scipy,
# pyarrow, pyyaml, click, filelock, psutil, xxhash, matplotlib and pytest, and no network. What the project
# imports on the GPU check's paths besides those travels as wheels, at the versions of this checkout's .venv
# (the ones the project is tested with); scripts/gpu_check.sh installs them there without an index.
#   pure Python: pydantic, annotated-types, typing-inspection, typing-extensions (xdistill.config),
#                ruamel.yaml (xdistill.params_file), datasets, dill (the reference trainer's data),
#                multiprocess (a py3XX-tagged pure wheel)
#   binary:      pydantic-core (pydantic's compiled half) and faiss-cpu (the trainer's dev retrieval,
#                xdistill.mining.knn), manylinux x86_64 for the GPU machine's CPython (GPU_PYTHON, default 3.12)
# About 35 MiB; the device tool carries at most 64 MiB with the working tree.
# Usage: scripts/gpu_check_wheels.sh   (GPU_PYTHON=3.11 for a machine with another Python;
#        GPU_CHECK_WHEELS=folder for another folder than .gpu-wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
GPU_PYTHON="${GPU_PYTHON:-3.12}"
DEST="${GPU_CHECK_WHEELS:-.gpu-wheels}"

PURE=(pydantic annotated-types typing-inspection typing-extensions ruamel.yaml datasets dill multiprocess)
BINARY=(pydantic-core faiss-cpu)

version_of() { "$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

rm -rf "$DEST"
mkdir -p "$DEST"
for name in "${PURE[@]}" "${BINARY[@]}"; do
    spec="$name==$(version_of "$name")"
    echo "downloading $spec (CPython $GPU_PYTHON, manylinux x86_64)"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$DEST" \
        --python-version "$GPU_PYTHON" --implementation cp --abi "cp${GPU_PYTHON/./}" --abi abi3 --abi none \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any \
        "$spec"
done
du -sh "$DEST"
ls "$DEST"
