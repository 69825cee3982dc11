#!/usr/bin/env bash
# racecheck_all.sh: compute-sanitizer's racecheck over all of
# TestGPUDecodeSmall, from the repository root:
#
#   OUT=/some/dir bash tools/gpu/racecheck_all.sh TEST-BINARY [test flags...]
#
# One run of tools/gpu/sanitize.sh per form and element type of its
# subtests (mma, wg, pair, hy × BF16, F16: eight racecheck processes at
# once on the one GPU, each with its own log), after one plain run of the test,
# which fills the driver's JIT cache so that each process starts in about
# a second. Each run has $SANITIZE_LIMIT seconds (default 540; on an H100
# wg/BF16 should be the slowest: its largest shape alone took 298 s beside
# eight other runs, the F16 half's other shapes 19-28 s each). A line per
# run here; the logs in $OUT/racecheck-all.tar.gz, a folder per run. A run
# that times out beside the others runs again alone, after them. Exit
# status 1 if a run found a race, failed a test, timed out (alone) or
# checked nothing.
set -uo pipefail
OUT=${OUT:?set OUT}
bin=${1:?test binary}
shift
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== plain run (JIT cache)"
(cd kernels && "$bin" -test.run '^TestGPUDecodeSmall$/^mma$/^BF16$' -test.count=1 "$@" 2>&1 | tail -1)
# deadlock_ms is racecheck's deadlock-detector timeout for a form: $SANITIZE_DEADLOCK_MS
# if set, else sanitize.sh's 2000 ms, but 200 for the hybrid, whose launches
# the detector stops on nearly every time (on an H100 with 2000 ms its
# run passed 414 s; with 200 it was clean in 13 s, 178 launches per type).
deadlock_ms() {
	if [[ -n ${SANITIZE_DEADLOCK_MS:-} ]]; then echo "$SANITIZE_DEADLOCK_MS"; elif [[ $1 == hy ]]; then echo 200; else echo 2000; fi
}
runs=()
for form in mma wg pair hy; do
	for dt in BF16 F16; do
		name=$form-$dt
		runs+=("$name")
		mkdir -p "$work/$name"
		OUT=$work/$name SANITIZE_TOOLS=racecheck SANITIZE_LIMIT=${SANITIZE_LIMIT:-540} SANITIZE_DEADLOCK_MS=$(deadlock_ms "$form") \
			bash "$(dirname "$0")/sanitize.sh" "$bin" "TestGPUDecodeSmall/$form/^$dt\$" "$@" \
			>"$work/$name/summary.txt" 2>&1 &
	done
done
wait
# A run that hit its limit beside the others runs again on its own (on
# an H100 pair/F16 once stalled past 480 s in one launch beside five other
# processes, and passed alone in 69 s); its verdict is the rerun's, and
# both logs are kept.
for name in "${runs[@]}"; do
	if grep -q '^racecheck: exit 124' "$work/$name/summary.txt"; then
		echo "racecheck $name: hit its limit beside the others, again on its own"
		mv "$work/$name" "$work/$name-parallel"
		mkdir -p "$work/$name"
		form=${name%-*} dt=${name#*-}
		OUT=$work/$name SANITIZE_TOOLS=racecheck SANITIZE_LIMIT=${SANITIZE_LIMIT:-540} SANITIZE_DEADLOCK_MS=$(deadlock_ms "$form") \
			bash "$(dirname "$0")/sanitize.sh" "$bin" "TestGPUDecodeSmall/$form/^$dt\$" "$@" \
			>"$work/$name/summary.txt" 2>&1
	fi
done
status=0
for name in "${runs[@]}"; do
	log=$work/$name/racecheck.log
	checked=$(grep -c ': checked' "$log" 2>/dev/null)
	other=$(sed -n 's/^racecheck: \([-0-9]*\) other reports.*/\1/p' "$work/$name/summary.txt")
	result=$(grep -m1 -E '^racecheck: exit' "$work/$name/summary.txt")
	verdict=clean
	if grep -q -- '--- FAIL' "$log" || ! grep -q '^PASS$' "$log" || [[ ${other:-0} != 0 || ${checked:-0} == 0 ]]; then
		verdict=FAILED status=1
	fi
	echo "racecheck $name: $verdict, ${checked:-0} launches checked, ${other:-0} reports beside the deadlock detector's, $(grep -c 'Deadlock detected' "$log" 2>/dev/null) possible-deadlock reports ($result)"
done
tar czf "$OUT/racecheck-all.tar.gz" -C "$work" .
exit $status
