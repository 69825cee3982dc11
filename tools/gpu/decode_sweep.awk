# decode_sweep.awk: summarises BenchmarkGPUDecodeSweep's log: per shape and
# token count, the default plan's time, the best plan's and the three best.
#
#   awk -f tools/gpu/decode_sweep.awk bench.log
$1 == "default" || $1 == "sweep" {
  key = $2 " " $3; us = $NF; sub(/^us=/, "", us); us += 0;
  plan = $4; for (f = 5; f < NF; f++) plan = plan " " $f;
  if (!(key in seen)) { order[++k] = key; seen[key] = 1 }
  if ($1 == "default") { def[key] = us; dplan[key] = plan; next }
  n[key]++; tm[key, n[key]] = us; pl[key, n[key]] = plan
}
END {
  printf "%-32s %-5s %26s %8s | %s\n", "shape", "m", "default plan", "µs", "best three (µs)";
  for (i = 1; i <= k; i++) {
    key = order[i]; split(key, q, " ");
    for (r = 1; r <= 3; r++) { b[r] = 0 }
    for (j = 1; j <= n[key]; j++) {
      if (b[1] == 0 || tm[key, j] < tm[key, b[1]]) { b[3] = b[2]; b[2] = b[1]; b[1] = j }
      else if (b[2] == 0 || tm[key, j] < tm[key, b[2]]) { b[3] = b[2]; b[2] = j }
      else if (b[3] == 0 || tm[key, j] < tm[key, b[3]]) { b[3] = j }
    }
    printf "%-32s %-5s %26s %8.1f |", q[1], q[2], dplan[key], def[key];
    for (r = 1; r <= 3; r++) if (b[r]) printf " %s %.1f;", pl[key, b[r]], tm[key, b[r]];
    printf "\n"
  }
}
