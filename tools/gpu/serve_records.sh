#!/usr/bin/env bash
# serve_records.sh [load]: the serving package's launch-record and
# checkpoint-reader checks on a GPU host (docs/serve.md, "Launch records").
#
# Runs, from python/tests, the package's tests that need the GPU to judge
# where records come from (test_gpu_records: the checkpoint's own records
# checked by this GPU's planner load and run, every tampering refused at
# load; the real planner in test_discover and test_layout; transformers
# loading and capture in test_gpu), then test_gpu_records again under
# compute-sanitizer's memcheck. `load` adds bench/serve_load.py on a
# Llama-3-8B-shaped checkpoint: from_pretrained with this package against
# the package in $BASELINE (a directory holding an earlier sfsurgery/,
# which reads the checkpoint's sfsurgery-launches.json). Needs OUT and
# SFSURGERY_BIN; `load` needs BASELINE and writes BENCH_DIR (default a
# temporary directory, removed at the end; 25 GB).
set -euo pipefail
: "${OUT:?set OUT to a folder for the logs}" "${SFSURGERY_BIN:?set SFSURGERY_BIN to the sfsurgery binary}"
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
cd "$root/python/tests"
export PYTHONPATH=$root/python PYTHONUNBUFFERED=1
python3 -m unittest -v test_gpu_records test_discover test_layout test_gpu.TransformersTest test_gpu.CaptureTest \
	test_gpu.OpTest.test_refusals test_gpu.OpTest.test_records_with_a_gap 2>&1 | tee "$OUT/records-tests.log"
echo "== memcheck over test_gpu_records"
status=0
compute-sanitizer --tool memcheck --error-exitcode 9 --log-file "$OUT/memcheck.log" \
	python3 -m unittest test_gpu_records >"$OUT/memcheck-tests.log" 2>&1 || status=$?
tail -3 "$OUT/memcheck-tests.log"
tail -2 "$OUT/memcheck.log"
echo "memcheck exit $status"
if [[ ${1:-} == load ]]; then
	: "${BASELINE:?set BASELINE to the directory of the baseline package}"
	dir=${BENCH_DIR:-}
	if [[ -z $dir ]]; then
		dir=$(mktemp -d)
		trap 'rm -rf "$dir"' EXIT
	fi
	mkdir -p "$dir"
	"$SFSURGERY_BIN" synth --shape llama3-8b --workers 16 -o "$dir/l8"
	"$SFSURGERY_BIN" prune "$dir/l8" -o "$dir/l8a" --format ampere --quiet
	rm -rf "$dir/l8"
	"$SFSURGERY_BIN" plan "$dir/l8a" --fuse --json >"$dir/l8a/sfsurgery-launches.json"
	python3 "$root/bench/serve_load.py" --model "$dir/l8a" --baseline "$BASELINE" --runs 3 --out "$OUT/serve-load.json"
fi
exit $status
