# decode_table.awk: summarises BenchmarkGPUDecode's output (go test -bench
# lines). First one line per shape and token count with, for each variant,
# the GPU µs per product and, in parentheses, the percentage of the copy
# bandwidth its bytes represent; then a markdown table of SparseMatmul's
# choice (auto) against DenseMatmul.
#
#   awk -f tools/gpu/decode_table.awk bench.log
/^BenchmarkGPUDecode\// && !/\/copy-[0-9]+ / {
  n = split($1, a, "/"); v = a[n]; sub(/-[0-9]+$/, "", v); m = a[n-1]; sub(/^m=/, "", m);
  shape = a[2] " " a[3] "/" a[4];
  us = ""; pc = "";
  for (i = 3; i < NF; i++) { if ($(i+1) == "gpu-us/op") us = $i; if ($(i+1) == "%copy") pc = $i }
  key = shape SUBSEP m; if (!(key in seen)) { order[++k] = key; seen[key] = 1 }
  t[key, v] = us; p[key, v] = pc
}
END {
  nv = split("auto mma wg wg-tickets decode-whole general memcpy dense", vs, " ");
  printf "%-34s %-3s", "shape", "m"; for (j = 1; j <= nv; j++) printf " %11s", vs[j]; printf "\n";
  for (i = 1; i <= k; i++) { split(order[i], q, SUBSEP); printf "%-34s %-3s", q[1], q[2];
    for (j = 1; j <= nv; j++) printf " %11s", ((order[i], vs[j]) in t) ? sprintf("%.1f(%d)", t[order[i], vs[j]], p[order[i], vs[j]]) : "-";
    printf "\n" }
  printf "\n| dtype shape | m | ours µs | %% of copy | same-bytes memcpy µs | memcpy/ours | dense µs | dense/ours | whole µs | general µs |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (i = 1; i <= k; i++) { split(order[i], q, SUBSEP); o = t[order[i], "auto"]; dn = t[order[i], "dense"]; mc = t[order[i], "memcpy"];
    printf "| %s | %s | %.1f | %.0f%% | %.1f | %.0f%% | %.1f | %.2fx | %.1f | %.1f |\n", q[1], q[2], o, p[order[i], "auto"], mc,
      (o > 0 ? 100 * mc / o : 0), dn, (o > 0 ? dn / o : 0), t[order[i], "decode-whole"], t[order[i], "general"] }
}
