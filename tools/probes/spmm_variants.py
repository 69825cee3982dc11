#!/usr/bin/env python3
"""spmm_variants.py: ablations of the prefill kernel for splitk_probe.cu.

    python3 tools/probes/spmm_variants.py OUTDIR [NAME ...]

Writes OUTDIR/NAME.cuh for each variant (all without NAME): a copy of
kernels/cuda/spmm_wg.cuh with one part of the work taken out, its results
wrong on purpose, so that the probe's time beside the kernel's shows what
that part costs. tools/gpu/prefill_run.sh builds the probe once per header
in $PROBE_VARIANTS and runs each in the same call:

    python3 tools/probes/spmm_variants.py .gpu/var
    PROBE_VARIANTS="$(ls .gpu/var/*.cuh)" OUT=... bash tools/gpu/prefill_run.sh probe

Each variant is a list of exact replacements; a replacement whose text is
not in the kernel exactly once stops the script (exit status 2, one line
naming the variant), so the variants cannot silently drift from the
kernel. python/tests/test_spmm_variants.py holds that they apply to the
committed kernel.
"""

import os
import sys
from typing import Dict, List, Tuple

KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "cuda", "spmm_wg.cuh")

_PRODUCT = "mma<0>(T{}, acc[h], adesc<C>(st + S::kBBytes + arows + h * 64 * C + p * 32), bd, e[p][h]);"
_STORE_PLAIN = "if (tok < M) gemv::put1<T>(out, static_cast<size_t>(tok) * N + row0 + 8 * (i >> 1), v[4 * j + i] + bias[i >> 1]);"
_STORE_SUM = "gemv::put1<T>(out, static_cast<size_t>(tt) * N + rr, vals[i] + b);"
_STORE_STAGED = ('asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\\n" ::"l"(y), "r"(v0), "r"(v1), "r"(v2), "r"(v3) '
                 ': "memory");')
_EXPECT = "gemv::mbar_expect(full, S::kStageBytes);"
_COPY_X = "#pragma unroll\n      for (int j = 0; j < C / 64; ++j) tma2d(st + j * BN * 128, tx, C * kc + 64 * j, m0, full);\n"
_COPY_PACKED = "      tma2d(st + S::kBBytes, tp, C / 2 * kc, n0, full);\n"
_COPY_META = "      tma2d(st + S::kBBytes + S::kABytes, tu, n0, S::kKTiles * kc, full);\n"
# A value no sum or meta word takes: the guarded work is compiled, with its
# operands computed, but never done.
_NEVER_F = "1.2345e30f"
_NEVER_U = "0x12345678u"  # nibbles 1, 2, 3, 5, 6, 7: no valid 2:4 meta

# name -> (what it takes out, replacements)
VARIANTS: Dict[str, Tuple[str, List[Tuple[str, str]]]] = {
    "nomma": ("the products (wgmma.sp never issued)",
              [(_PRODUCT, f"if (e[p][h] == {_NEVER_U}) " + _PRODUCT)]),
    "nostores": ("the output stores (sums computed, never stored)",
                 [(_STORE_PLAIN, _STORE_PLAIN.replace("if (tok < M)", f"if (tok < M && v[4 * j + i] == {_NEVER_F})")),
                  (_STORE_SUM, f"if (vals[i] == {_NEVER_F}) " + _STORE_SUM),
                  (_STORE_STAGED, f"if (v0 == {_NEVER_U}) " + _STORE_STAGED)]),
    "nox": ("the activations' copies (their bytes not expected)",
            [(_EXPECT, "gemv::mbar_expect(full, S::kStageBytes - S::kBBytes);"), (_COPY_X, "")]),
    "nopacked": ("the packed values' copies (their bytes not expected)",
                 [(_EXPECT, "gemv::mbar_expect(full, S::kStageBytes - S::kABytes);"), (_COPY_PACKED, "")]),
    "oneweight": ("the weight stream from memory: every CTA copies row tile 0's packed values and meta",
                  [(_COPY_PACKED, _COPY_PACKED.replace("n0, full", "0, full")),
                   (_COPY_META, _COPY_META.replace("n0, S::kKTiles", "0, S::kKTiles"))]),
    "onex": ("the activations from memory: every CTA copies token tile 0's",
             [(_COPY_X, _COPY_X.replace("m0, full", "0, full"))]),
}


class VariantError(Exception):
    """A variant's replacement does not apply to the kernel."""


def apply(src: str, name: str) -> str:
    """Returns src with variant name's replacements made, each of whose
    text must occur exactly once."""
    out = src
    for old, new in VARIANTS[name][1]:
        n = out.count(old)
        if n != 1:
            raise VariantError(f"variant {name}: {old.strip()[:60]!r} occurs {n} times in the kernel, want 1")
        out = out.replace(old, new)
    return out


def main(argv: List[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    outdir, names = argv[0], argv[1:] or list(VARIANTS)
    for n in names:
        if n not in VARIANTS:
            print(f"spmm_variants: no variant {n!r} (have {', '.join(VARIANTS)})", file=sys.stderr)
            return 2
    try:
        with open(KERNEL, encoding="utf-8") as f:
            src = f.read()
        made = {n: apply(src, n) for n in names}
    except (OSError, VariantError) as e:
        print(f"spmm_variants: {e}", file=sys.stderr)
        return 2
    os.makedirs(outdir, exist_ok=True)
    for n, text in made.items():
        path = os.path.join(outdir, n + ".cuh")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        print(f"{path}: without {VARIANTS[n][0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
