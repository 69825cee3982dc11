# decode_table.awk: summarises BenchmarkGPUDecode's output (go test -bench
# lines) as one line per shape and token count: for each variant, the GPU
# µs per product and, in parentheses, the percentage of the copy bandwidth
# its bytes represent.
#
#   awk -f kernels/scripts/decode_table.awk bench.log
/^BenchmarkGPUDecode\// && !/copy-16/ {
  n = split($1, a, "/"); v = a[n]; sub(/-16$/, "", v); m = a[n-1]; shape = a[2] "/" a[4];
  us = ""; pc = "";
  for (i = 3; i < NF; i++) { if ($(i+1) == "gpu-us/op") us = $i; if ($(i+1) == "%copy") pc = $i }
  key = shape " " m; if (!(key in seen)) { order[++k] = key; seen[key] = 1 }
  val[key, v] = sprintf("%.1f(%d)", us, pc); vars[v] = 1
}
END {
  split("decode decode-sc4 decode-s*2 decode-w2 decode-w4 decode-w8 general dense", vs, " ");
  nv = 8;
  printf "%-30s %-5s", "shape", "m"; for (j = 1; j <= nv; j++) printf " %11s", vs[j]; printf "\n";
  for (i = 1; i <= k; i++) { split(order[i], p, " "); printf "%-30s %-5s", p[1], p[2];
    for (j = 1; j <= nv; j++) printf " %11s", ((order[i], vs[j]) in val) ? val[order[i], vs[j]] : "-"; printf "\n" }
}
