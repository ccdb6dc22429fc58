#!/usr/bin/env bash
# The GPU check in one go, on a GPU machine that has torch, transformers and sentence-transformers but no
# network and no project install: installs the wheels of .gpu-wheels/ (scripts/gpu_check_wheels.sh makes
# them) into a throwaway folder, puts it and src/ on PYTHONPATH, then runs
#   1. tests/test_gpu.py: every `gpu` test (fp16/bf16 teacher encoding vs fp32, training on cuda in fp32,
#      bf16 and fp16, a 1-GPU DDP run under torch.distributed.run) and its CPU-side checks;
#   2. python -m bench.perf.gpu_check: training pairs/s and teacher encoding sentences/s, ours vs
#      sentence-transformers, fp32 vs half precision.
# Logs and gpu_check.json go to $OUT (the device tool's folder) or ./gpu-check-out. Each step has a timeout;
# the whole check takes a few minutes on an H100 (under 8). Without CUDA it runs the CPU-possible parts (the
# tests' CPU checks, the benchmark's --device cpu --tiny run) and exits 3 saying so.
# Usage: scripts/gpu_check.sh   (or `make gpu-check`; PYTHON=... for another interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
WHEELS="${GPU_CHECK_WHEELS:-.gpu-wheels}"
OUT_DIR="${OUT:-$PWD/gpu-check-out}"
TEST_TIMEOUT="${GPU_CHECK_TEST_TIMEOUT:-240}"
BENCH_TIMEOUT="${GPU_CHECK_BENCH_TIMEOUT:-330}"
mkdir -p "$OUT_DIR"
SITE="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-site.XXXXXX")"
trap 'rm -rf "$SITE"' EXIT

if compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
        --target "$SITE" "$WHEELS"/*.whl || { echo "error: installing the wheels of $WHEELS failed" >&2; exit 1; }
else
    echo "note: no wheels in $WHEELS (scripts/gpu_check_wheels.sh makes them): using what is installed"
fi
export PYTHONPATH="$SITE:$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export XDISTILL_CACHE_DIR="${XDISTILL_CACHE_DIR:-$SITE/xdistill-cache}"

"$PYTHON" - <<'PY' 2>&1 | tee "$OUT_DIR/environment.txt"
import platform, torch, transformers, sentence_transformers
print(f"Python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"transformers {transformers.__version__}, sentence-transformers {sentence_transformers.__version__}")
print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device")
import xdistill.training.trainer, xdistill.teacher.embed, xdistill.evaluation.pipeline  # the import closure
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "error: the project does not import here (see above)" >&2; exit 1; }

if "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    CUDA=1
else
    CUDA=0
    echo "*** no CUDA device: running the CPU-possible parts only"
fi

status=0
echo "=== tests/test_gpu.py (timeout ${TEST_TIMEOUT}s)"
timeout "$TEST_TIMEOUT" "$PYTHON" -m pytest tests/test_gpu.py -p no:cacheprovider -q -ra --durations=15 \
    2>&1 | tee "$OUT_DIR/pytest.log"
test_status=${PIPESTATUS[0]}
[ "$test_status" -eq 0 ] || { echo "*** tests failed (exit $test_status)"; status=1; }

echo "=== python -m bench.perf.gpu_check (timeout ${BENCH_TIMEOUT}s)"
if [ "$CUDA" = 1 ]; then
    bench_args=(--json "$OUT_DIR/gpu_check.json")
else
    bench_args=(--device cpu --tiny --json "$OUT_DIR/gpu_check.json")
fi
timeout "$BENCH_TIMEOUT" "$PYTHON" -m bench.perf.gpu_check "${bench_args[@]}" 2>&1 | tee "$OUT_DIR/bench.log"
bench_status=${PIPESTATUS[0]}
[ "$bench_status" -eq 0 ] || { echo "*** benchmark failed (exit $bench_status)"; status=1; }

if [ "$CUDA" = 0 ]; then
    echo "*** no CUDA device: the gpu tests were skipped and the benchmark ran tiny on the CPU (exit 3)"
    exit 3
fi
echo "=== results in $OUT_DIR (tests exit $test_status, benchmark exit $bench_status)"
exit $status
