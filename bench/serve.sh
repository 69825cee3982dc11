#!/usr/bin/env bash
# serve.sh SHAPE [LAYERS]: the end-to-end serving benchmark (bench/serve.py)
# of a synthetic checkpoint of a model shape (llama3-8b, llama3-70b; LAYERS
# decoder layers, default the model's), dense against its ampere prune, on
# the GPU at hand. Needs the sfsurgery binary ($SFSURGERY_BIN, default
# sfsurgery on PATH), torch and transformers. Writes into $BENCH_DIR
# (default a temporary directory, removed at the end) and the result to
# ${OUT:-.}/serve-SHAPE[-LLAYERS].json. The arguments after SHAPE and
# LAYERS (LAYERS is a number; without it they follow SHAPE) go to serve.py
# (e.g. --batches 1,8). A BENCH_DIR that does not exist is made.
set -euo pipefail
shape=${1:?usage: serve.sh SHAPE [LAYERS] [serve.py args]}
shift
layers=
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
	layers=$1
	shift
elif [[ -n ${1:-} && ${1:-} != -* ]]; then
	echo "serve.sh: LAYERS $1: want a number of decoder layers" >&2
	exit 2
fi
bin=${SFSURGERY_BIN:-sfsurgery}
here=$(cd "$(dirname "$0")" && pwd)
dir=${BENCH_DIR:-}
if [[ -n $dir ]]; then
	mkdir -p "$dir"
else
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
fi
name=$shape${layers:+-${layers}l}
dense=$dir/$name-dense sparse=$dir/$name-2of4
export SFSURGERY_BIN=$bin
[[ -d $dense ]] || "$bin" synth --shape "$shape" ${layers:+--layers "$layers"} --workers 8 -o "$dense"
[[ -d $sparse ]] || "$bin" prune "$dense" -o "$sparse" --format ampere --quiet
python3 "$here/serve.py" --sparse "$sparse" --dense "$dense" --label "$name" --out "${OUT:-.}/serve-$name.json" "$@"
