#!/usr/bin/env bash
# test.sh: the Python package's tests. Builds the sfsurgery binary the
# tests run (unless $SFSURGERY_BIN names one), then runs every test under
# python/tests with the standard library's unittest. Tests that need torch
# and a CUDA GPU skip themselves elsewhere; on the GPU host they run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ -z ${SFSURGERY_BIN:-} ]]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$here/.." && CGO_ENABLED=0 go build -o "$tmp/sfsurgery" ./cmd/sfsurgery)
	export SFSURGERY_BIN=$tmp/sfsurgery
fi
cd "$here/tests"
PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} python3 -m unittest discover -v -s . -p 'test_*.py' "$@"
