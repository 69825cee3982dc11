#!/usr/bin/env bash
# bench/prune.sh: prune throughput against `cp` of the same bytes, side by
# side on this machine, with peak RSS.
#
#   bench/prune.sh [SHAPE [LAYERS]]     e.g. bench/prune.sh tinyllama 12   (≈1 GiB)
#                                            bench/prune.sh llama3-8b       (≈16 GB)
#
# Writes a synthetic checkpoint (real LLaMA tensor shapes, random bf16
# weights) under $BENCH_DIR (default: a temp dir), warms the page cache
# with one read, then times, each twice (the second run is reported):
#   cp -r of the checkpoint directory
#   sfsurgery prune --format dense
#   sfsurgery prune --format ampere
# GB/s counts the input's bytes. Needs /usr/bin/time (Debian package
# `time`) for peak RSS. SFSURGERY_BIN names a built binary to time instead
# of building one (for a machine without Go).
set -euo pipefail
shape=${1:-tinyllama}
layers=${2:-0}
cd "$(dirname "$0")/.."
dir=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$dir"
bin=${SFSURGERY_BIN:-$dir/sfsurgery}
[ -n "${SFSURGERY_BIN:-}" ] || go build -o "$bin" ./cmd/sfsurgery
in=$dir/model
rm -rf "$in"
args=(synth --shape "$shape" -o "$in")
[ "$layers" != 0 ] && args+=(--layers "$layers")
"$bin" "${args[@]}"
bytes=$(du -sb "$in" | cut -f1)
cat "$in"/*.safetensors >/dev/null
timeit() { # name, command...
  local name=$1; shift
  local best=""
  for i in 1 2; do
    rm -rf "$dir/out"
    sync
    local t0 t1
    t0=$(date +%s.%N)
    /usr/bin/time -f "%M" -o "$dir/rss" "$@" >/dev/null
    t1=$(date +%s.%N)
    best=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
  done
  local gbs
  gbs=$(awk -v n="$bytes" -v t="$best" 'BEGIN { print n / t / 1e9 }')
  printf '%-14s %7.2f s  %6.2f GB/s  peak RSS %6d MiB\n' "$name" "$best" "$gbs" "$(( $(cat "$dir/rss") / 1024 ))"
  echo "$gbs" >"$dir/$name.gbs"
}
echo "input: $shape, $(numfmt --to=iec "$bytes") in $(ls "$in"/*.safetensors | wc -l) shard(s), $(nproc) cores"
timeit cp cp -r "$in" "$dir/out"
timeit prune-dense "$bin" prune "$in" -o "$dir/out" --format dense --quiet
timeit prune-ampere "$bin" prune "$in" -o "$dir/out" --format ampere --quiet
for f in prune-dense prune-ampere; do
  printf '%s / cp = %.2f\n' "$f" "$(awk -v a="$(cat "$dir/$f.gbs")" -v b="$(cat "$dir/cp.gbs")" 'BEGIN { print a / b }')"
done
[ -z "${BENCH_DIR:-}" ] && rm -rf "$dir"
exit 0
