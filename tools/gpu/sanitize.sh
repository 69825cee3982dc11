#!/usr/bin/env bash
# sanitize.sh: compute-sanitizer's memcheck, synccheck and racecheck over
# some of package kernels' tests, from the repository root:
#
#   OUT=/some/dir bash tools/gpu/sanitize.sh TEST-BINARY RUN-PATTERN [test flags...]
#
# Each tool of $SANITIZE_TOOLS (default all three) runs for at most
# $SANITIZE_LIMIT seconds (default 240) with -test.v, and its log lands in
# $OUT/TOOL.log (TestGPUDecodeSmall logs each launch it has checked).
# $SANITIZE_ARGS adds compute-sanitizer options (--kernel-name
# kns=gemv_wg64: check only those kernels). The exit status is 1 if any
# tool reported an error, a test failed or a run timed out.
#
# racecheck runs with SFSURGERY_TEST_NO_PAIR=1: the decode tests then run
# each plan with the pair sum (two slices as a cluster, kernels/cuda/gemv_wg.cuh's
# finish_pair) as the same plan with tickets. racecheck does not follow the
# pair's st.async stores into another CTA's shared memory: it reports the
# pair kernels deadlocked in their wait for those stores, which every other
# run completes, and excluding them by name does not help
# (tools/probes/racecheck_pair.cu shows it on a small kernel). memcheck and synccheck check the pair kernels.
#
# racecheck also stalls a warpgroup-form launch whose ring holds
# zero-filled copies (a slice's last stage past K) until its deadlock
# detector fires, reports a "possible deadlock" and lets it go on; the
# launch then completes and its output checks right. The detector's
# timeout is $SANITIZE_DEADLOCK_MS (default 2000 ms): at 20000, each such
# launch took 20-40 s on an H100. racecheck exits 3 on
# those reports alone; the run counts as clean when its summary counts
# nothing else and the tests passed.
set -uo pipefail
OUT=${OUT:?set OUT}
bin=${1:?test binary}
run=${2:?-test.run pattern}
shift 2
status=0
for tool in ${SANITIZE_TOOLS:-memcheck synccheck racecheck}; do
	echo "== compute-sanitizer $tool"
	args=() nopair=
	if [[ $tool == racecheck ]]; then args=(--racecheck-deadlock-timeout "${SANITIZE_DEADLOCK_MS:-2000}") nopair=1; fi
	start=$(date +%s)
	# shellcheck disable=SC2086 # SANITIZE_ARGS is a word list
	(cd kernels && SFSURGERY_TEST_NO_PAIR=$nopair timeout "${SANITIZE_LIMIT:-240}" \
		compute-sanitizer --tool $tool --error-exitcode 3 "${args[@]}" ${SANITIZE_ARGS:-} \
		"$bin" -test.v -test.run "$run" -test.count=1 "$@") >"$OUT/$tool.log" 2>&1
	rc=$?
	echo "$tool: exit $rc in $(( $(date +%s) - start ))s"
	if [[ $tool == racecheck ]]; then
		# racecheck counts its deadlock detector's reports in its summary
		# ("N hazards displayed (E errors, W warnings)": each report an
		# error, each first one a warning). Anything beyond those is a
		# race; the run is clean without one and with every test passed.
		log=$OUT/$tool.log
		dead=$(grep -c 'Deadlock detected' "$log") warn=$(grep -c 'Detected possible deadlock' "$log")
		read -r errs warns < <(sed -n 's/.*RACECHECK SUMMARY:.*(\([0-9]*\) errors, \([0-9]*\) warnings).*/\1 \2/p' "$log" | tail -1)
		if [[ -n ${errs:-} ]]; then
			other=$(( errs - dead + warns - warn ))
		else
			other="no summary (cut short): unknown"
		fi
		echo "racecheck: $other other reports, $dead possible-deadlock reports"
		if [[ $rc == 3 && $other == 0 ]] && grep -q '^PASS$' "$log" && ! grep -q -- '--- FAIL' "$log"; then rc=0; fi
	fi
	[[ $rc == 0 ]] || status=1
	grep -E '^(--- FAIL|FAIL|ok|PASS)|SUMMARY' "$OUT/$tool.log" | tail -3
	[[ $rc == 124 ]] && grep -vE '^\s*$' "$OUT/$tool.log" | tail -2 | cut -c1-300
done
exit $status
