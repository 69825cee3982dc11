#!/usr/bin/env bash
# prefill_run.sh: the GPU-machine run for the prefill kernel
# (kernels/cuda/spmm_wg.cuh), in one call, from the repository root, with
# the test binary (and, for "python", the sfsurgery binary) in .gpu/:
#
#   CGO_ENABLED=0 go test -c -o .gpu/kernels.test ./kernels       (on the Go machine)
#   CGO_ENABLED=0 go build -o .gpu/sfsurgery ./cmd/sfsurgery
#   OUT=/some/dir bash tools/gpu/prefill_run.sh [fresh] [sanitize] [bench] [python] [probe] [ncu]
#
# A .gpu/NAME.gz stands for .gpu/NAME (gunzipped first, for smaller carries).
# Always: machine, check_ptx.sh (fresh PTX into $OUT/ptx), ptxas registers
# and spills of the prefill entry points (sm_90a), cluster_occupancy.cu
# (the clusters of each size that run at once: launchplan.PrefillClusterCTAs),
# and the prefill kernel's GPU tests ($TESTS). "fresh": the fresh PTX
# replaces kernels/ptx/ here (the Python package reads it there through
# python/sfsurgery/ptx) and the tests run against it (SFSURGERY_TEST_PTX*);
# the binary's embedded PTX is not replaced, so run bench with a binary
# built from the committed fresh PTX. "sanitize": compute-sanitizer
# memcheck (or the tools in $SANITIZE_TOOLS) over TestGPUPrefillOutput
# (-test.short: every tile and split count on two shapes). "bench": BenchmarkGPUPrefill, every candidate plan
# beside dense on the shapes nearest it (with "fresh", the fresh kernel),
# summarised into $OUT/prefill-bench.txt. "python": python/tests' test_gpu
# (needs torch and .gpu/sfsurgery, which only plans). "probe":
# tools/probes/splitk_probe.cu (the narrow shapes' plans beside dense and
# an empty launch, with per-CTA traces) built from this tree's kernel, and
# once more from each header in $PROBE_VARIANTS in place of spmm_wg.cuh
# (another commit's, or tools/probes/spmm_variants.py's ablations), all
# run in the same call ($SPLITK_PLANS picks plans), then
# tools/probes/dsmem_probe.cu (the split-K sum alone) and tma_probe.cu (the
# copies alone). "ncu": Nsight Compute
# on the launches of $NCU_BENCH's plans in BenchmarkGPUPrefill; with
# "probe" and no $NCU_BENCH, on the first timed launch of each probe plan
# in $NCU_PLANS (indices, default 0), with the stall samples of every
# SASS instruction; else on TestGPUPrefillOutput's launches of
# $NCU_KERNEL (default the split entry points). Logs land in $OUT, then in one $OUT/prefill-run.tgz (the
# device tool brings back at most 8 files; tar xzf it, the fresh PTX is
# its ptx/); the exit status is 1 if any part failed.
set -uo pipefail
OUT=${OUT:?set OUT}
fresh=0 sanitize=0 bench=0 python=0 probe=0 ncu=0
for a in "$@"; do
	case $a in fresh) fresh=1 ;; sanitize) sanitize=1 ;; bench) bench=1 ;; python) python=1 ;; probe) probe=1 ;; ncu) ncu=1 ;; esac
done
for z in .gpu/*.gz; do [[ -e $z ]] && gunzip -kf "$z"; done
chmod +x .gpu/* 2>/dev/null
bin=$PWD/.gpu/kernels.test
kt() { (cd kernels && "$bin" "$@"); }
TESTS=${TESTS:-'TestPTX|TestPrefill|TestGPU(PrefillOutput|Models|CorruptMeta|Degenerate)'}
status=0
note() { echo "== $*"; }

note "machine"
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nvcc --version | tail -2

note "check_ptx"
bash tools/gpu/check_ptx.sh "$OUT/ptx"; echo "check_ptx exit $? (1: the kernel source changed since the committed PTX)"

note "ptxas: the prefill entry points (sm_90a)"
# Registers and spills per entry point, and ptxas's wgmma advisories
# (C7517 injected waits, C7518 serialized wgmma), which cost the products
# their overlap (docs/kernels.md §2.6).
ptxas -arch=sm_90a -v "$OUT/ptx/sfsurgery_sm90a.ptx" -o /dev/null >"$OUT/ptxas.log" 2>&1 || { echo "ptxas failed"; status=1; }
awk '/Compiling entry function/ { e = $0; sub(/.*function ./, "", e); sub(/. for.*/, "", e); on = e ~ /^spmm_wg/ }
     on && /stack frame|registers/ { sub(/^ptxas info *: */, ""); print e ": " $0 }' "$OUT/ptxas.log" | tee "$OUT/ptxas-prefill.txt"
grep -oE "\(C751[78]\).*function '[^']*'" "$OUT/ptxas.log" | sed -E "s/\(([^)]*)\).*function '([^']*)'/\1 \2/" | sort | uniq -c |
	tee "$OUT/ptxas-advisories.txt"
echo "ptxas wgmma advisories: $(wc -l <"$OUT/ptxas-advisories.txt") entry point(s)"

note "cluster occupancy"
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/cluster_occupancy tools/probes/cluster_occupancy.cu &&
	/tmp/cluster_occupancy | tee "$OUT/cluster-occupancy.txt"

if [[ $fresh == 1 ]]; then
	cp "$OUT"/ptx/*.ptx kernels/ptx/
	export SFSURGERY_TEST_PTX=$PWD/kernels/ptx/sfsurgery.ptx SFSURGERY_TEST_PTX_SM90A=$PWD/kernels/ptx/sfsurgery_sm90a.ptx
fi
export SFSURGERY_SEED=${SFSURGERY_SEED:-$(date +%s)}
note "tests $TESTS (PTX ${SFSURGERY_TEST_PTX_SM90A:-embedded}, SFSURGERY_SEED=$SFSURGERY_SEED)"
start=$(date +%s)
kt -test.v -test.count=1 -test.timeout=300s -test.run "$TESTS" >"$OUT/prefill-test.log" 2>&1 || status=1
echo "tests took $(($(date +%s) - start))s"
grep -E '^(--- FAIL|FAIL|ok|PASS)|panic|prefill_test|gpu_prefill' "$OUT/prefill-test.log" | tail -40

if [[ $sanitize == 1 ]]; then
	note "memcheck"
	SANITIZE_TOOLS=${SANITIZE_TOOLS:-memcheck} bash tools/gpu/sanitize.sh "$bin" 'TestGPUPrefillOutput' -test.short || status=1
fi

if [[ $bench == 1 ]]; then
	note "BenchmarkGPUPrefill"
	kt -test.run '^$' -test.bench BenchmarkGPUPrefill -test.benchtime 20x >"$OUT/prefill-bench.log" 2>&1 || status=1
	# One line per plan: shape/m/plan, GPU µs, x-dense (the dense rows: µs).
	awk '/^BenchmarkGPUPrefill\// { name = $1; sub(/^BenchmarkGPUPrefill\//, "", name); sub(/-[0-9]+$/, "", name)
		us = ""; x = ""; for (i = 2; i < NF; i++) { if ($(i+1) == "gpu-us/op") us = $i; if ($(i+1) == "x-dense") x = $i }
		printf "%-70s %9s us %6s\n", name, us, x }' "$OUT/prefill-bench.log" | tee "$OUT/prefill-bench.txt"
	grep -E '^(FAIL|panic|---)' "$OUT/prefill-bench.log" | head
fi

if [[ $python == 1 ]]; then
	note "python test_gpu"
	(cd python/tests && SFSURGERY_BIN=$PWD/../../.gpu/sfsurgery PYTHONPATH=.. PYTHONUNBUFFERED=1 \
		timeout 420 python3 -m unittest test_gpu) >"$OUT/test_gpu.log" 2>&1 || status=1
	tail -25 "$OUT/test_gpu.log"
fi

if [[ $probe == 1 ]]; then
	note "splitk_probe"
	nvflags=(-gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -lcublasLt -lcuda)
	nvcc "${nvflags[@]}" -o /tmp/splitk tools/probes/splitk_probe.cu && /tmp/splitk | tee "$OUT/splitk-probe.txt" || status=1
	note "dsmem_probe"
	nvcc "${nvflags[@]}" -o /tmp/dsmem tools/probes/dsmem_probe.cu && /tmp/dsmem | tee "$OUT/dsmem-probe.txt" || status=1
	note "tma_probe"
	nvcc "${nvflags[@]}" -o /tmp/tma tools/probes/tma_probe.cu && /tmp/tma | tee "$OUT/tma-probe.txt" || status=1
	# Each header of $PROBE_VARIANTS in place of spmm_wg.cuh, built at once,
	# then run one after the other: splitk-probe-NAME.txt.
	for v in ${PROBE_VARIANTS:-}; do
		name=$(basename "$v" .cuh) tree=/tmp/variant-$(basename "$v" .cuh)
		mkdir -p "$tree/kernels" "$tree/tools"
		cp -r kernels/cuda "$tree/kernels/" && cp -r tools/probes "$tree/tools/" && cp "$v" "$tree/kernels/cuda/spmm_wg.cuh"
		nvcc "${nvflags[@]}" -o "/tmp/splitk-$name" "$tree/tools/probes/splitk_probe.cu" >"$OUT/build-$name.log" 2>&1 &
	done
	wait
	for v in ${PROBE_VARIANTS:-}; do
		name=$(basename "$v" .cuh)
		note "splitk_probe with $v"
		/tmp/splitk-$name | tee "$OUT/splitk-probe-$name.txt" | grep -v trace || status=1
	done
fi

if [[ $ncu == 1 && $probe == 1 && -z ${NCU_BENCH:-} ]]; then
	# Per plan of $NCU_PLANS (the probe's indices, default 0): its first
	# timed launch, with the warp stall samples per SASS instruction
	# (ncu-source-PLAN.csv).
	for plan in ${NCU_PLANS:-0}; do
		note "ncu (splitk_probe plan $plan)"
		SPLITK_PLANS=$plan ncu --kernel-name regex:plan_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
			--section SchedulerStats --section WarpStateStats --section SourceCounters -f -o "$OUT/ncu-$plan" /tmp/splitk \
			>"$OUT/ncu-$plan.log" 2>&1 || status=1
		ncu -i "$OUT/ncu-$plan.ncu-rep" --page details >>"$OUT/ncu-$plan.log" 2>&1
		ncu -i "$OUT/ncu-$plan.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-source-$plan.csv" 2>&1 || status=1
		grep -E 'plan_kernel|Duration|Warp Cycles|Issued' "$OUT/ncu-$plan.log" | head -8
		head -c 600 "$OUT/ncu-source-$plan.csv"; echo
		rm -f "$OUT/ncu-$plan.ncu-rep"
	done
elif [[ $ncu == 1 ]]; then
	note "ncu"
	# $NCU_BENCH, a -test.bench pattern of BenchmarkGPUPrefill (e.g.
	# 'BenchmarkGPUPrefill/llama3-8b/k_v_1024x4096/m=128$/^0_', its first
	# plan), profiles those plans' launches with the warp stall sections; else
	# TestGPUPrefillOutput's launches of $NCU_KERNEL.
	sections=(--section SpeedOfLight --section LaunchStats --section Occupancy)
	if [[ -n ${NCU_BENCH:-} ]]; then
		(cd kernels && ncu --kernel-name "regex:${NCU_KERNEL:-spmm_wg_.*}" --launch-skip 2 --launch-count "${NCU_COUNT:-8}" \
			"${sections[@]}" --section SchedulerStats --section WarpStateStats \
			"$bin" -test.run '^$' -test.bench "$NCU_BENCH" -test.benchtime 3x) >"$OUT/ncu.log" 2>&1 || status=1
	else
		(cd kernels && ncu --kernel-name "regex:${NCU_KERNEL:-spmm_wg_.*_splitk}" --launch-count 4 "${sections[@]}" \
			"$bin" -test.run TestGPUPrefillOutput -test.count=1) >"$OUT/ncu.log" 2>&1 || status=1
	fi
	grep -E 'spmm_wg|Duration|SM Busy|Compute \(SM\)|Memory Throughput|Registers|Achieved Occupancy|Stall|Cluster' "$OUT/ncu.log" | head -80
fi
note "done, status $status"
(cd "$OUT" && tar czf prefill-run.tgz --exclude prefill-run.tgz ./* && find . -mindepth 1 ! -name prefill-run.tgz -delete)
exit $status
