#!/usr/bin/env bash
# bench_candidates.sh: turns `sfsurgery bench --json` reports into the
# lines of kernels/launchplan/testdata/bench-candidates-*.txt.gz, which
# TestPlanAgainstBench replays: for each row of ours that timed
# several launch plans, "n k m" then " | plan = median µs" for each, in the
# planner's order. Needs jq.
#
#   bash tools/gpu/bench_candidates.sh "# header" a.json b.json | gzip -9 >kernels/launchplan/testdata/bench-candidates-h100.txt.gz
set -euo pipefail
header=$1
shift
echo "$header"
for f in "$@"; do
	jq -r '.rows[] | select(.backend == "ours" and .candidates)
		| "\(.n) \(.k) \(.m)" + ([.candidates[] | " | \(.plan) = \(.median_us)"] | join(""))' "$f"
done
