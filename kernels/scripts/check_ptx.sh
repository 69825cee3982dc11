#!/usr/bin/env bash
# check_ptx.sh [OUT.ptx]
#
# Rebuilds kernels/ptx/sfsurgery.ptx with the exact command of the
# //go:generate directive in kernels/generate.go, writing OUT.ptx (default:
# a temporary file), and diffs it against the committed PTX. Needs nvcc
# (the committed file was built by nvcc 13.0). Exit status: 0 same, 1
# different, 2 could not build.
set -euo pipefail
kdir=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$(mktemp -d)/sfsurgery.ptx}
case $out in /*) ;; *) out=$PWD/$out ;; esac
cmd=$(sed -n 's#^//go:generate \(nvcc .*\)$#\1#p' "$kdir/generate.go")
if [[ -z $cmd || $cmd != *"-o ptx/sfsurgery.ptx"* ]]; then
	echo "check_ptx: no 'nvcc ... -o ptx/sfsurgery.ptx' go:generate directive in $kdir/generate.go" >&2
	exit 2
fi
cmd=${cmd/-o ptx\/sfsurgery.ptx/-o $out}
echo "check_ptx: (cd kernels && $cmd)"
(cd "$kdir" && eval "$cmd") || exit 2
echo "check_ptx: $(nvcc --version | tail -1); fresh PTX $(grep -m1 '^\.version' "$out"), $(grep -m1 '^\.target' "$out")"
if cmp -s "$kdir/ptx/sfsurgery.ptx" "$out"; then
	echo "check_ptx: OK, committed PTX matches the fresh build"
	exit 0
fi
diff "$kdir/ptx/sfsurgery.ptx" "$out" | head -40 || true
echo "check_ptx: DIFFERENT: committed kernels/ptx/sfsurgery.ptx does not match the fresh build" >&2
exit 1
