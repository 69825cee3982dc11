#!/usr/bin/env bash
# gpu_run.sh: everything the GPU machine runs for package kernels, in one
# call, from the repository root, with the test binary in .gpu/:
#
#   CGO_ENABLED=0 go test -c -o .gpu/kernels.test ./kernels   (on the Go machine)
#   OUT=/some/dir bash tools/gpu/gpu_run.sh [fresh] [bench]
#
# 1. nvidia-smi, nvcc version; 2. check_ptx.sh (fresh PTX into $OUT);
# 3. ptxas resource report; 4. cuBLASLt ABI check; 5. the tests (with
# "fresh", against the fresh PTX through SFSURGERY_TEST_PTX); 6.
# tools/gpu/sanitize.sh (memcheck, synccheck, racecheck) on the small-shape tests;
# 7. with "bench", the benchmarks. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:?set OUT}
fresh=0 bench=0
for a in "$@"; do case $a in fresh) fresh=1 ;; bench) bench=1 ;; esac; done
bin=$PWD/.gpu/kernels.test
# kt runs the test binary in the package directory, as go test does.
kt() { (cd kernels && "$bin" "$@"); }
status=0
note() { echo "== $*"; }

note "machine"
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nvcc --version | tail -2

note "check_ptx"
bash tools/gpu/check_ptx.sh "$OUT"; echo "check_ptx exit $?"

note "ptxas resource use"
for sm in sm_80 sm_90; do
	ptxas -arch=$sm -v "$OUT/sfsurgery.ptx" -o /dev/null 2>&1 | grep -E 'Compiling|registers|spill' | sed "s/^/$sm: /"
done >"$OUT/ptxas.txt"
cat "$OUT/ptxas.txt"

note "cuBLASLt ABI"
inc=$(dirname "$(find /opt /usr/local /usr/lib -name cublasLt.h 2>/dev/null | head -1)")
nvcc -x cu -I"$inc" -o /tmp/ltabi tools/abi/ltabi.c && /tmp/ltabi

note "CUDA driver ABI (cuLaunchKernelEx)"
nvcc -x cu -o /tmp/cuabi tools/abi/cuabi.c -lcuda && /tmp/cuabi || status=1

export SFSURGERY_SEED=${SFSURGERY_SEED:-$(date +%s)}
if [[ $fresh == 1 ]]; then export SFSURGERY_TEST_PTX=$OUT/sfsurgery.ptx SFSURGERY_TEST_PTX_SM90A=$OUT/sfsurgery_sm90a.ptx; fi
note "tests (SFSURGERY_TEST_PTX=${SFSURGERY_TEST_PTX:-embedded}, SFSURGERY_SEED=$SFSURGERY_SEED)"
start=$(date +%s)
kt -test.v -test.count=1 -test.timeout=400s >"$OUT/test.log" 2>&1 || status=1
echo "tests took $(( $(date +%s) - start ))s"
grep -E '^(=== RUN|\s+--- (PASS|SKIP))' -v "$OUT/test.log" | grep -vE 'sparse vs dense: rel|SFSURGERY_SEED' | tail -40
echo "largest sparse-vs-dense relative error: $(sed -nE 's/.*sparse vs dense: rel ([0-9.e+-]+) .*/\1/p' "$OUT/test.log" | sort -g | tail -1)"

note "sanitizers"
bash tools/gpu/sanitize.sh "$bin" 'TestGPUSmall|TestGPUDegenerate' || status=1

if [[ $bench == 1 ]]; then
	note "benchmarks"
	kt -test.run '^$' -test.bench . -test.benchtime 20x 2>&1 | grep -E 'Benchmark|ok|FAIL' | tee "$OUT/bench.log"
fi
note "done, status $status"
exit $status
