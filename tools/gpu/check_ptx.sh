#!/usr/bin/env bash
# check_ptx.sh [OUTDIR]
#
# Rebuilds every kernels/ptx/*.ptx with the exact commands of the
# //go:generate directives in kernels/generate.go, writing each into OUTDIR
# (default: a temporary directory) under its own name, and diffs them
# against the committed PTX. Needs nvcc (the committed files were built by
# nvcc 13.0). Exit status: 0 all the same, 1 one differs, 2 could not build.
set -euo pipefail
kdir=$(cd "$(dirname "$0")/../../kernels" && pwd)
out=${1:-$(mktemp -d)}
case $out in /*) ;; *) out=$PWD/$out ;; esac
mkdir -p "$out"
mapfile -t cmds < <(sed -n 's#^//go:generate \(nvcc .* -o ptx/[a-z0-9_]*\.ptx .*\)$#\1#p' "$kdir/generate.go")
if [[ ${#cmds[@]} == 0 ]]; then
	echo "check_ptx: no 'nvcc ... -o ptx/NAME.ptx' go:generate directive in $kdir/generate.go" >&2
	exit 2
fi
status=0
for cmd in "${cmds[@]}"; do
	name=$(sed -n 's#.* -o ptx/\([a-z0-9_]*\.ptx\) .*#\1#p' <<<"$cmd")
	fresh=$out/$name
	cmd=${cmd/-o ptx\/$name/-o $fresh}
	echo "check_ptx: (cd kernels && $cmd)"
	(cd "$kdir" && eval "$cmd") || exit 2
	echo "check_ptx: $(nvcc --version | tail -1); fresh $name $(grep -m1 '^\.version' "$fresh"), $(grep -m1 '^\.target' "$fresh")"
	if cmp -s "$kdir/ptx/$name" "$fresh"; then
		echo "check_ptx: OK, committed ptx/$name matches the fresh build"
		continue
	fi
	diff "$kdir/ptx/$name" "$fresh" | head -40 || true
	echo "check_ptx: DIFFERENT: committed kernels/ptx/$name does not match the fresh build" >&2
	status=1
done
exit $status
