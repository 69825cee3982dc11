#!/usr/bin/env bash
# bench/rewrite.sh: checkpoint rewrite throughput against cp of the same
# bytes, side by side on this machine, with peak RSS.
#
#   bench/rewrite.sh [BYTES]      default $SFSURGERY_BENCH_BYTES, else 1 GiB
#
# Builds a synthetic checkpoint (TinyLlama-shaped layers, 512 MiB
# shards, index, config.json; package synth) with bench/rewrite under $BENCH_DIR (default:
# a temp dir, removed afterwards), warms the page cache with one read of it,
# then times each of these twice and reports the second run:
#   cp          cp -r of the directory (page cache only, nothing synced)
#   cp+sync     the same, then sync of the copied files (durable, as ours)
#   rewrite     Open + WriteDir, FileRange sources by copy_file_range, fsync
#   generic     the same through FileRange.WriteTo (pread into pwrite)
# GB/s counts tensor bytes. Peak RSS is /usr/bin/time's maximum resident
# set size (Debian package `time`), else the program's own VmHWM.
set -euo pipefail
bytes=${1:-${SFSURGERY_BENCH_BYTES:-1073741824}}
cd "$(dirname "$0")/.."
dir=${BENCH_DIR:-$(mktemp -d)}
bin=$dir/rewrite
go build -o "$bin" ./bench/rewrite
in=$dir/in
rm -rf "$in" "$dir/out"
"$bin" -build "$in" -bytes "$bytes"
cat "$in"/* >/dev/null
have_time=0
[ -x /usr/bin/time ] && have_time=1
timeit() { # name, command...
  local name=$1; shift
  local secs rss=""
  for run in 1 2; do
    rm -rf "$dir/out"
    sync
    local t0 t1
    t0=$(date +%s.%N)
    if [ $have_time = 1 ]; then
      /usr/bin/time -f %M -o "$dir/rss" "$@" >"$dir/log"
    else
      "$@" >"$dir/log"
    fi
    t1=$(date +%s.%N)
    secs=$(echo "$t1 - $t0" | bc -l)
  done
  if [ $have_time = 1 ]; then
    rss="$(( $(tail -1 "$dir/rss") / 1024 )) MiB"
  else
    rss=$(sed -n 's/.*VmHWM) //p' "$dir/log")
    rss=${rss:-unknown}
  fi
  local gbs
  gbs=$(echo "$bytes / $secs / 1000000000" | bc -l)
  printf '%-8s %7.3f s  %6.2f GB/s  peak RSS %s\n' "$name" "$secs" "$gbs" "$rss"
  echo "$gbs" >"$dir/$name.gbs"
}
echo "input: $(numfmt --to=iec "$bytes") of tensors in $(ls "$in"/*.safetensors | wc -l) shard(s), $(nproc) cores, $(df -T "$dir" | awk 'NR==2{print $2}') at $dir"
timeit cp cp -r "$in" "$dir/out"
timeit cp+sync bash -c 'cp -r "$1" "$2" && sync "$2"/* "$2"' _ "$in" "$dir/out"
timeit rewrite "$bin" -in "$in" -out "$dir/out"
timeit generic "$bin" -in "$in" -out "$dir/out" -generic
for f in rewrite generic; do
  printf '%s / cp = %.2f   %s / cp+sync = %.2f\n' "$f" \
    "$(echo "$(cat "$dir/$f.gbs") / $(cat "$dir/cp.gbs")" | bc -l)" \
    "$f" "$(echo "$(cat "$dir/$f.gbs") / $(cat "$dir/cp+sync.gbs")" | bc -l)"
done
[ -z "${BENCH_DIR:-}" ] && rm -rf "$dir"
exit 0
