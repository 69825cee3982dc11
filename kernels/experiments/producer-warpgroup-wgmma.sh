#!/usr/bin/env bash
# producer-warpgroup-wgmma.sh: the checks variant 11 (kernels/notes.md)
# needs before it ships, on the GPU machine, in a checkout where
# producer-warpgroup-wgmma.patch is applied to a copy of the sources:
#
#   mkdir -p .gpu/v && git show HEAD:kernels/cuda/gemv.cuh > .gpu/v/base.cuh
#   git apply kernels/experiments/producer-warpgroup-wgmma.patch
#   OUT=$OUT bash kernels/experiments/producer-warpgroup-wgmma.sh
#
# It builds the probe twice (the kept kernel from .gpu/v/base.cuh, and the
# patched gemv.cuh for sm_90a), alternates processes on q_o m = 1 (plan 0)
# and gate_up m = 32 (plan 3) to catch the slow runs seen in session 4, and
# runs memcheck, racecheck and synccheck on one launch of plans 0, 3 and 6.
set -u
OUT=${OUT:?set OUT}
nvcc -arch=sm_90 -O3 -std=c++17 -Ikernels/cuda -DGEMV_CUH="\"$PWD/.gpu/v/base.cuh\"" \
	-o /tmp/p_base kernels/scripts/gemv_probe.cu >"$OUT/b_base.log" 2>&1 &
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Ikernels/cuda -DEXTRA_WARPS=1 -DWG_LAYOUT \
	-o /tmp/p_wsw kernels/scripts/gemv_probe.cu >"$OUT/b_wsw.log" 2>&1 &
wait
grep -i error "$OUT"/b_*.log | head -5
echo "== alternating processes: kept q_o m1, variant q_o m1, variant gate_up m32"
for i in 1 2 3 4 5 6; do
	echo "$(PROBE_ONLY=0 /tmp/p_base plans | grep -o '[0-9.]* us') | $(PROBE_ONLY=0 /tmp/p_wsw plans | grep -o '[0-9.]* us') | $(PROBE_ONLY=3 /tmp/p_wsw plans | grep -o '[0-9.]* us')"
done
for tool in memcheck racecheck synccheck; do
	for pl in 0 3 6; do
		echo "== $tool plan $pl: $(PROBE_ONCE=1 PROBE_ONLY=$pl timeout 100 compute-sanitizer --tool $tool /tmp/p_wsw plans 2>&1 |
			grep -E 'once|ERROR SUMMARY|RACECHECK SUMMARY|hazard' | tr '\n' ' ')"
	done
done
