"""Evaluation and calibration text: reading it, naming it, and cutting it
into windows of tokens.

A text file is either plain text (used as it is) or JSON Lines whose
every non-blank line is an object with a string field "text" (the
records joined by a blank line, as the papers join WikiText and C4
documents). Which one is decided by the content, not the name: a file
whose first non-blank line parses as a JSON object is JSON Lines, and
then every line must. Standard library only: the package's CPU tests run
it in CI.
"""

import hashlib
import json
import os
import random
from dataclasses import dataclass
from typing import List, Sequence

from .errors import InputError

# Records of a JSON Lines file are joined with this.
JSONL_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Text:
    """A text read from a file: its path, the SHA-256 of the file's bytes
    (hex), whether it was JSON Lines, and the text itself."""

    path: str
    sha256: str
    jsonl: bool
    text: str


def read(path: str) -> Text:
    """Reads a plain-text or JSON Lines file (module doc). Raises
    InputError, one line naming the file (and the line for JSON Lines),
    for a missing, unreadable, non-UTF-8 or empty file, and for JSON Lines
    with a line that is not an object with a string "text"."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None
    digest = hashlib.sha256(raw).hexdigest()
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: byte {e.start}: not UTF-8 text") from None
    if not s.strip():
        raise InputError(f"{path}: empty text")
    lines = s.splitlines()
    first = next(line for line in lines if line.strip())
    if not _is_object(first):
        return Text(path, digest, False, s)
    parts = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}: line {i}: not JSON ({e.msg}); a JSON Lines file needs an object on every line") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise InputError(f'{path}: line {i}: want an object with a string "text" field')
        parts.append(obj["text"])
    text = JSONL_SEPARATOR.join(parts)
    if not text.strip():
        raise InputError(f'{path}: every "text" field is empty')
    return Text(path, digest, True, text)


def _is_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def windows(tokens: int, seqlen: int, limit: int = 0) -> List[int]:
    """Returns the start offsets of the non-overlapping windows of seqlen
    tokens in a text of that many tokens, in order: tokens // seqlen of
    them (the tail is dropped), or the first limit where 0 < limit is
    fewer. Raises InputError for a text shorter than one window."""
    if seqlen < 1:
        raise InputError(f"seqlen {seqlen}: want at least 1 token")
    if limit < 0:
        raise InputError(f"windows {limit}: want 0 (all) or more")
    count = tokens // seqlen
    if count == 0:
        raise InputError(f"the text has {tokens} tokens, fewer than one window of {seqlen}")
    if limit:
        count = min(count, limit)
    return [i * seqlen for i in range(count)]


def samples(tokens: int, seqlen: int, count: int, seed: int) -> List[int]:
    """Returns count start offsets of windows of seqlen tokens drawn at
    random, seeded, from a text of that many tokens (each start uniform
    in [0, tokens - seqlen], as Wanda and SparseGPT sample C4; windows may
    overlap). Raises InputError for a text shorter than one window or a
    count below 1."""
    if seqlen < 1 or count < 1:
        raise InputError(f"{count} samples of {seqlen} tokens: want at least one sample of at least 1 token")
    if tokens < seqlen:
        raise InputError(f"the text has {tokens} tokens, fewer than one sample of {seqlen}")
    rng = random.Random(seed)
    return [rng.randint(0, tokens - seqlen) for _ in range(count)]


def describe(t: Text) -> dict:
    """The text's identity for a JSON result or report: file name, SHA-256
    and kind."""
    return {"file": os.path.basename(t.path), "sha256": t.sha256, "kind": "jsonl" if t.jsonl else "plain"}


def check_ids(ids: Sequence[int], vocab: int, where: str) -> None:
    """Raises InputError when a token id is outside [0, vocab): a tokenizer
    that does not belong to the model."""
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        raise InputError(f"{where}: token id {bad} is outside the model's vocabulary of {vocab}: the tokenizer is not the model's")
