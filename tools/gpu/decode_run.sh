#!/usr/bin/env bash
# decode_run.sh: the GPU-machine run for the decode kernel (kernels/cuda/gemv.cuh),
# in one call, from the repository root, with the test binary in .gpu/:
#
#   CGO_ENABLED=0 go test -c -o .gpu/decode.test ./kernels   (on the Go machine)
#   OUT=/some/dir bash tools/gpu/decode_run.sh [fresh] [tests|quick] [sanitize] [bench] [sweep] [ncu]
#
# Always: machine, check_ptx.sh (fresh PTX into $OUT), ptxas report and SASS
# instruction counts of the decode kernels (both forms). "fresh": everything below runs
# against the fresh PTX (through SFSURGERY_TEST_PTX) instead of the
# embedded one. "tests": the decode kernel's tests, $TESTS; "quick": only
# its small ones. "sanitize": see below. "bench": BenchmarkGPUDecode, summarised by
# tools/gpu/decode_table.awk. "sweep": BenchmarkGPUDecodeSweep,
# summarised by tools/gpu/decode_sweep.awk. "ncu": Nsight Compute on
# one decode launch (Llama-3-8B gate_up, m = $NCU_M, default 1). Logs land
# in $OUT. "sanitize": tools/gpu/sanitize.sh's memcheck and synccheck over
# the small decode tests and tools/gpu/racecheck_all.sh's racecheck (the
# pair sums run as tickets) over all of TestGPUDecodeSmall (its parts
# took up to about 6 minutes on an H100); or, with $SANITIZE_RUN (a -test.run pattern), all
# three tools of sanitize.sh over that alone. $SANITIZE_TEST adds test
# flags (-test.short: two shapes and three token counts of
# TestGPUDecodeSmall).
set -uo pipefail
OUT=${OUT:?set OUT}
fresh=0 tests=0 sanitize=0 bench=0 sweep=0 ncu=0
for a in "$@"; do
	case $a in
	fresh) fresh=1 ;; tests) tests=1 ;; quick) tests=1 TESTS='TestGPUDecode(Small|Degenerate|Deterministic|CorruptMeta)' ;;
	sanitize) sanitize=1 ;; bench) bench=1 ;; sweep) sweep=1 ;; ncu) ncu=1 ;;
	esac
done
bin=$PWD/.gpu/decode.test
# kt runs the test binary in the package directory, as go test does.
kt() { (cd kernels && "$bin" "$@"); }
# The decode kernel's tests and the PTX checks (gpu_run.sh runs the rest).
TESTS=${TESTS:-'TestPTX|TestGPU(CopyFrom|Info|Decode)'}
status=0
note() { echo "== $*"; }

note "machine"
nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; nvcc --version | tail -1

note "check_ptx"
bash tools/gpu/check_ptx.sh "$OUT" >"$OUT/check_ptx.log" 2>&1
echo "check_ptx exit $?"; grep -v '^[<>]' "$OUT/check_ptx.log" | tail -3

note "ptxas sm_90 (decode kernels) and SASS counts"
ptxas -arch=sm_90a -v "$OUT/sfsurgery_sm90a.ptx" -o /tmp/wg.cubin >"$OUT/ptxas_sm90a.log" 2>&1
echo "ptxas sm_90a exit $?: $(grep -c 'Compiling entry' "$OUT/ptxas_sm90a.log") kernels; $(grep -ciE 'warning|C75' "$OUT/ptxas_sm90a.log") warnings"
cat "$OUT/ptxas_sm90a.log" | grep -E 'warning|C75' | sort | uniq -c | head -5
{ ptxas -arch=sm_90 -v "$OUT/sfsurgery.ptx" -o /tmp/k.cubin 2>&1; cat "$OUT/ptxas_sm90a.log"; } | awk '
	/Compiling entry function/ {f = $0; sub(/.*function .?/, "", f); sub(/.? for .*/, "", f)}
	/Used [0-9]+ registers/ && f ~ /^(gemv|spmm)/ {r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r); reg[f] = r}
	/spill/ && f ~ /^(gemv|spmm)/ {sp[f] = $0; sub(/.*stack frame, /, "", sp[f])}
	END {for (f in reg) printf "%-16s %3s registers, %s\n", f, reg[f], sp[f]}' | sort
{ cuobjdump -sass /tmp/k.cubin; cuobjdump -sass /tmp/wg.cubin; } >/tmp/k.sass
awk '/Function : gemv/ {f=$3} /Function : / && !/gemv/ {f=""}
	f!="" && /\/\*[0-9a-f]+\*\// {n[f]++; if(/LDG.E.128/)g[f]++; if(/LDG.E /||/LDG.E.CONSTANT /)g4[f]++; if(/LDS.128/)s[f]++;
	if(/HMMA|HGMMA/)h[f]++; if(/SHFL/)x[f]++; if(/LDL|STL/)l[f]++; if(/RED|ATOM/)r[f]++}
	END {for (f in n) printf "%-14s instr %4d LDG.128 %3d LDG.32 %3d LDS.128 %3d HMMA %3d SHFL %3d RED %3d local %d\n",
	f, n[f], g[f], g4[f], s[f], h[f], x[f], r[f], l[f]}' /tmp/k.sass | sort

export SFSURGERY_SEED=${SFSURGERY_SEED:-$(date +%s)}
if [[ $fresh == 1 ]]; then export SFSURGERY_TEST_PTX=$OUT/sfsurgery.ptx SFSURGERY_TEST_PTX_SM90A=$OUT/sfsurgery_sm90a.ptx; fi
if [[ $tests == 1 ]]; then
	note "tests (SFSURGERY_TEST_PTX=${SFSURGERY_TEST_PTX:-embedded}, SFSURGERY_SEED=$SFSURGERY_SEED)"
	start=$(date +%s)
	kt -test.v -test.count=1 -test.timeout=400s -test.run "$TESTS" >"$OUT/test.log" 2>&1 || status=1
	echo "tests took $(( $(date +%s) - start ))s"
	grep -E -- '^(--- FAIL|FAIL|ok|PASS|panic)|_test.go:[0-9]+: .*(error|differs|not detected|=)' "$OUT/test.log" |
		grep -vE 'decode vs dense: rel|sparse vs dense: rel|SFSURGERY_SEED|no CUDA' | head -40
	echo "largest decode-vs-dense relative error: $(sed -nE 's/.*decode vs dense: rel ([0-9.e+-]+) .*/\1/p' "$OUT/test.log" | sort -g | tail -1)"
fi
if [[ $bench == 1 ]]; then
	note "benchmarks"
	start=$(date +%s)
	kt -test.run '^$' -test.bench '^BenchmarkGPUDecode$' -test.benchtime 5x >"$OUT/bench.log" 2>&1 || status=1
	echo "benchmarks took $(( $(date +%s) - start ))s"
	grep -E '^(FAIL|panic)|--- FAIL|copy-' "$OUT/bench.log"
	awk -f tools/gpu/decode_table.awk "$OUT/bench.log" >"$OUT/table.txt"
	sed -n '/^| dtype/,$p' "$OUT/table.txt"
fi
if [[ $sweep == 1 ]]; then
	note "plan sweep"
	start=$(date +%s)
	# -test.v: without it the testing package keeps only 10 lines of a
	# benchmark's log.
	kt -test.v -test.run '^$' -test.bench '^BenchmarkGPUDecodeSweep$' -test.benchtime 1x >"$OUT/sweep.log" 2>&1 || status=1
	echo "sweep took $(( $(date +%s) - start ))s"
	grep -E '^(FAIL|panic)|--- FAIL|plans$' "$OUT/sweep.log"
	awk -f tools/gpu/decode_sweep.awk "$OUT/sweep.log" >"$OUT/sweep.txt"
	cut -c1-150 "$OUT/sweep.txt" | head -60
fi
if [[ $ncu == 1 ]]; then
	# NCU_M: the token counts to profile (default 1).
	for m in ${NCU_M:-1}; do
		note "ncu: gate_up 14336x4096, m = $m, default plan"
		(cd kernels && ncu --clock-control none --kernel-name regex:'gemv|spmm' --launch-count 1 --section SpeedOfLight \
			--section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
			--section InstructionStats --section LaunchStats --section Occupancy \
			"$bin" -test.run '^$' -test.bench "BenchmarkGPUDecode/BF16/llama3-8b/gate_up_14336x4096/m=$m/auto\$" \
			-test.benchtime 1x) >"$OUT/ncu-m$m.txt" 2>&1
		grep -E 'gemv|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Stall|Warp Cycles|Achieved Occupancy|Registers|Shared Memory Config|Waves|L2 Hit|Mem Busy|Max Bandwidth|Issued Warp|Pipe|Executed Ipc|Block Size|Grid Size|Shared Memory' "$OUT/ncu-m$m.txt" | head -50
	done
fi
if [[ $sanitize == 1 ]]; then
	note "sanitizers"
	if [[ -n ${SANITIZE_RUN:-} ]]; then
		# shellcheck disable=SC2086 # SANITIZE_TEST is a word list
		bash tools/gpu/sanitize.sh "$bin" "$SANITIZE_RUN" ${SANITIZE_TEST:-} || status=1
	else
		SANITIZE_TOOLS="memcheck synccheck" bash tools/gpu/sanitize.sh "$bin" \
			'TestGPUDecode(Small|Degenerate|Deterministic)' || status=1
		note "racecheck over TestGPUDecodeSmall"
		# shellcheck disable=SC2086 # SANITIZE_TEST is a word list
		bash tools/gpu/racecheck_all.sh "$bin" ${SANITIZE_TEST:-} || status=1
	fi
fi
note "done, status $status"
exit $status
