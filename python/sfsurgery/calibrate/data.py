"""Calibration samples: the text tokenized by the model's tokenizer, then
`samples` windows of `seqlen` tokens at seeded random offsets
(sfsurgery.text.samples, as Wanda and SparseGPT sample C4).

The text is tokenized in pieces of about a mebibyte cut after a newline,
in batches (a fast tokenizer encodes a batch's pieces in parallel), without
special tokens; a text of one piece is tokenized exactly as a whole. The
text must hold samples × seqlen tokens, so that the samples are not the
same few tokens over and over. chunks and windows need only the standard
library; tokenize needs transformers.
"""

from array import array
from typing import List, Sequence

from .. import text
from ..errors import InputError

CHUNK_CHARS = 1 << 20
# Pieces encoded in one call: the ids of at most this many pieces are
# Python lists at a time.
BATCH_CHUNKS = 32


def chunks(s: str, size: int = CHUNK_CHARS) -> List[str]:
    """Cuts s into pieces of at most size characters, each ending after a
    newline where the piece has one; joined, they are s."""
    if size < 1:
        raise ValueError(f"chunk size {size}")
    out = []
    start = 0
    while start < len(s):
        end = min(len(s), start + size)
        if end < len(s):
            nl = s.rfind("\n", start, end)
            if nl >= start:
                end = nl + 1
        out.append(s[start:end])
        start = end
    return out


def tokenize(directory: str, s: str) -> Sequence[int]:
    """The token ids of s by the tokenizer in the model directory (no
    special tokens)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise InputError(f"calibrate needs transformers to tokenize the text: {e}") from None
    try:
        tok = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError, ImportError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"{directory}: cannot load the model's tokenizer: {first}") from None
    ids = array("q")
    pieces = chunks(s)
    for i in range(0, len(pieces), BATCH_CHUNKS):
        enc = tok(pieces[i : i + BATCH_CHUNKS], add_special_tokens=False, return_attention_mask=False, verbose=False)
        for piece in enc["input_ids"]:
            ids.extend(piece)
    return ids


def windows(ids: Sequence[int], samples: int, seqlen: int, seed: int, vocab: int, where: str) -> List[List[int]]:
    """samples windows of seqlen tokens of ids at seeded random offsets.
    Raises InputError naming where for a text of fewer than samples ×
    seqlen tokens or a token id outside the model's vocabulary."""
    if samples < 1 or seqlen < 1:
        raise InputError(f"{samples} samples of {seqlen} tokens: want at least one sample of at least 1 token")
    need = samples * seqlen
    if len(ids) < need:
        raise InputError(f"{where}: {len(ids)} tokens, fewer than the {samples} × {seqlen} = {need} the samples need")
    out = [list(ids[o : o + seqlen]) for o in text.samples(len(ids), seqlen, samples, seed)]
    for w in out:
        text.check_ids(w, vocab, where)
    return out


def calibration_ids(directory: str, t: text.Text, samples: int, seqlen: int, seed: int, vocab: int) -> List[List[int]]:
    """The calibration samples of text t for the model in directory."""
    return windows(tokenize(directory, t.text), samples, seqlen, seed, vocab, t.path)
