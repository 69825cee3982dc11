"""The test model's text: the Python source files of the installation that
runs it (standard library and site-packages), split into training and
held-out files by a stable hash of their names, so that no file is on
both sides.

A file's name is its path under its root prefixed with the root's kind
("stdlib/json/decoder.py", "purelib/torch/nn/functional.py"): the same
file has the same name, and so the same side, on every machine with the
same packages. The corpus is the first limit bytes of the files in sorted
path order. Files join into one stream separated by EOS, the tokenizer's
end-of-text token. The evaluation texts join the heads of files (their
first lines up to a cap of bytes), so that a few large generated files
(parser tables, bindings) cannot make up most of a text and its
perplexity. Standard library
only: python/tests/test_quality_corpus.py runs it in CI.
"""

import hashlib
import os
import random
import site
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

# The end-of-text token: the tokenizer's bos and eos, the separator of
# files in the training stream and in heldout.txt and train.txt.
EOS = "<|endoftext|>"

# One file in HELDOUT_MODULUS is held out.
HELDOUT_MODULUS = 20


@dataclass(frozen=True)
class Source:
    """One source file: its path, its stable name and its size in bytes."""

    path: str
    name: str
    size: int


def roots(every_site: bool = False) -> List[Tuple[str, str]]:
    """(kind, directory) of the installation's source roots that exist:
    the standard library and site-packages (purelib, and platlib where it
    differs); with every_site also the interpreter's other site-packages
    directories (kind "site"), where a distribution keeps its packages
    apart from purelib (Debian's /usr/lib/python3/dist-packages)."""
    paths = sysconfig.get_paths()
    dirs = [(kind, paths.get(kind)) for kind in ("stdlib", "purelib", "platlib")]
    if every_site:
        dirs += [("site", d) for d in site.getsitepackages()]
    out, seen = [], set()
    for kind, d in dirs:
        if d and os.path.isdir(d) and os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            out.append((kind, d))
    return out


def sources(dirs: Sequence[Tuple[str, str]], limit: int) -> List[Source]:
    """The .py files under the roots dirs, each once (under the deepest
    root that holds it, so site-packages inside the standard library's
    directory counts as site-packages), in sorted path order, up to the
    first file that brings their total to limit bytes."""
    real = {os.path.realpath(d) for _, d in dirs}
    found = {}
    for kind, root in dirs:
        own = os.path.realpath(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and os.path.realpath(os.path.join(dirpath, d)) not in real - {own})
            for f in filenames:
                if not f.endswith(".py"):
                    continue
                p = os.path.join(dirpath, f)
                rp = os.path.realpath(p)
                if rp in found or not os.path.isfile(p):
                    continue
                name = kind + "/" + os.path.relpath(p, root).replace(os.sep, "/")
                found[rp] = Source(p, name, os.path.getsize(p))
    out, total = [], 0
    for s in sorted(found.values(), key=lambda s: s.path):
        if total >= limit:
            break
        out.append(s)
        total += s.size
    return out


def is_heldout(name: str) -> bool:
    """Whether the file named name is held out: the first 8 bytes of the
    SHA-256 of its name, as an integer, are 0 mod HELDOUT_MODULUS."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % HELDOUT_MODULUS == 0


def split(files: Iterable[Source]) -> Tuple[List[Source], List[Source]]:
    """(training, held-out) files, each in the given order."""
    train, held = [], []
    for s in files:
        (held if is_heldout(s.name) else train).append(s)
    return train, held


def read_text(path: str) -> Optional[str]:
    """The file's text, or None when it is not UTF-8 or cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def read_all(files: Sequence[Source], workers: int = 16) -> List[Tuple[Source, str]]:
    """(file, text) of the files that are UTF-8 text, in order, read by
    workers threads."""
    with ThreadPoolExecutor(workers) as ex:
        texts = list(ex.map(read_text, [s.path for s in files]))
    return [(s, t) for s, t in zip(files, texts) if t is not None]


def shuffled(items: Sequence, seed: int) -> list:
    """A copy of items in a seeded random order."""
    out = list(items)
    random.Random(seed).shuffle(out)
    return out


def head(text: str, limit: int) -> str:
    """The text's first lines, as many whole lines as fit in limit UTF-8
    bytes; a first line longer than limit is cut at limit bytes (on a
    character boundary). limit 0 is the whole text."""
    if not limit or len(text.encode()) <= limit:
        return text
    out, total = [], 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode())
        if total + n > limit:
            break
        out.append(line)
        total += n
    if not out:
        return text.encode()[:limit].decode("utf-8", errors="ignore")
    return "".join(out)


def joined(texts: Iterable[str], limit: int, cap: int = 0) -> str:
    """The texts, each cut to its head of cap bytes (cap 0: whole), joined
    by EOS, as many as fit in limit UTF-8 bytes (at least one)."""
    parts, total = [], 0
    for t in texts:
        t = head(t, cap)
        n = len(t.encode()) + (len(EOS) if parts else 0)
        if parts and total + n > limit:
            break
        parts.append(t)
        total += n
    return EOS.join(parts)
