#!/usr/bin/env bash
# tools/gpu/gpu_sweep.sh: the sparse-vs-dense sweep of `sfsurgery bench`, on
# the GPU machine, in one call. Builds nothing there (no Go): build here
# first and carry .gpu/:
#
#   CGO_ENABLED=0 go build -o .gpu/sfsurgery ./cmd/sfsurgery
#   CGO_ENABLED=0 go test -c -o .gpu/kernels.test ./kernels      (for "check")
#
# then on the GPU machine (device tool, carry [".gpu"]):
#
#   OUT=$OUT bash tools/gpu/gpu_sweep.sh [check] [quick]
#
# BIN and TEST name other binaries (default .gpu/sfsurgery and
# .gpu/kernels.test).
#
# check: first the GPU tests of cuSPARSELt, the cuBLASLt candidates and
#        the event timing, and the cuSPARSELt header's ABI facts; if the
#        cuSPARSELt test fails, the sweep runs without it.
# quick: Llama-3-8B shapes at M = 1, 64, 4096 instead of the full sweep.
#
# The full sweep measures TinyLlama, Llama-3-8B and Llama-3-70B shapes at
# M = 1 … 16384 and writes into $OUT: bench-<gpu>.md (the document for
# docs/), bench-<gpu>.png (the plot), bench-<gpu>-policy.json, bench-<gpu>.json
# and bench-<gpu>.log. Copy the first three into docs/ as they are.
set -uo pipefail
OUT=${OUT:?set OUT}
cd "$(dirname "$0")/../.."
BIN=${BIN:-.gpu/sfsurgery} TEST=${TEST:-.gpu/kernels.test}
check=0 quick=0
for a in "$@"; do case $a in check) check=1 ;; quick) quick=1 ;; esac; done
note() { echo "== $*"; }

note "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h100|h200|a100|l40s|l4|a10' | head -1 | tr 'A-Z' 'a-z')
gpu=${gpu:-gpu}
lib=$(find / -name 'libcusparseLt.so.0' -not -path '/proc/*' 2>/dev/null | head -1)
echo "libcusparseLt: ${lib:-not found}"

noLt=()
if [[ $check == 1 ]]; then
	inc=$(find / -name cusparseLt.h -not -path '/proc/*' 2>/dev/null | head -1)
	if [[ -n $inc ]]; then
		note "cuSPARSELt ABI ($inc)"
		nvcc -x cu -I"$(dirname "$inc")" -o /tmp/spabi tools/abi/cusparselt_abi.c && /tmp/spabi
	fi
	note "GPU tests"
	"$TEST" -test.v -test.count=1 -test.run 'TestGPUSparseLt|TestGPUDenseCandidates|TestGPUElapsedEach|TestGPUInfo' \
		>"$OUT/tests.log" 2>&1
	st=$?
	grep -E '^(--- |=== RUN|ok|FAIL|PASS)|rel |cuSPARSELt|candidates|skip|panic|SIG' "$OUT/tests.log" | grep -v '=== RUN' | head -40
	if [[ $st != 0 ]] && ! grep -q -- '--- PASS: TestGPUSparseLt' "$OUT/tests.log"; then
		echo "cuSPARSELt test failed: sweeping without it"
		noLt=(--no-cusparselt)
	fi
fi

shapes=tinyllama,llama3-8b,llama3-70b ms=1,16,64,256,1024,4096,16384
if [[ $quick == 1 ]]; then shapes=llama3-8b ms=1,64,4096; fi
note "sweep: $shapes at M=$ms"
start=$(date +%s)
bin=$(realpath "$BIN")
(cd "$OUT" && "$bin" bench --shapes "$shapes" --m "$ms" "${noLt[@]}" --plot "bench-$gpu.png" \
	--policy "bench-$gpu-policy.json" --markdown "bench-$gpu.md" --json >"bench-$gpu.json" 2>"bench-$gpu.log")
echo "bench exit $? after $(($(date +%s) - start)) s"
grep -vE '^bench: \[' "$OUT/bench-$gpu.log" | tail -20
sed -n '/^## Headline/,/^## Dispatch policy/p' "$OUT/bench-$gpu.md"
