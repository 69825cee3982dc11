"""What run.py and throughput.py share: running commands with one-line
failures, the environment a result records, writing JSON whole. Standard
library only (torch is imported by environment() alone)."""

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON_DIR = os.path.join(REPO, "python")


class Failure(Exception):
    """A step that failed; its message is one line."""


def sfsurgery_bin() -> str:
    """The sfsurgery binary: $SFSURGERY_BIN, which must be executable."""
    exe = os.environ.get("SFSURGERY_BIN", "")
    if not exe or not os.access(exe, os.X_OK):
        raise Failure("set SFSURGERY_BIN to an sfsurgery binary built for this machine")
    return os.path.abspath(exe)


def child_env() -> Dict[str, str]:
    """The environment of the commands run: this one, with the package's
    directory first on PYTHONPATH and SFSURGERY_BIN absolute."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["SFSURGERY_BIN"] = sfsurgery_bin()
    return env


class Log:
    """Progress lines on stderr with the seconds since start, and the
    commands run, as a reader would type them (shown())."""

    def __init__(self, names: Mapping[str, str]):
        self.t0 = time.perf_counter()
        self.names = dict(names)
        self.commands: List[str] = []

    def __call__(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f} s] {msg}", file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def named(self, s: str) -> str:
        """s with the paths in names (longest first) replaced by their
        names (e.g. the work directory by $WORK)."""
        for path, name in sorted(self.names.items(), key=lambda kv: -len(kv[0])):
            s = s.replace(path, name)
        return s

    def shown(self, argv: Sequence[str]) -> str:
        """argv as a shell line, paths named (named())."""
        return self.named(shlex.join(argv))

    def run(self, argv: Sequence[str], capture: bool = True) -> str:
        """Runs argv (stderr passed through when capture is False) and
        returns its stdout; Failure, one line with the end of its stderr,
        when it exits non-zero."""
        line = self.shown(argv)
        self.commands.append(line)
        self(f"$ {line}")
        r = subprocess.run(list(argv), env=child_env(), text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE if capture else None)
        if r.returncode != 0:
            tail = (r.stderr or "").strip().splitlines()[-1:] if capture else []
            raise Failure(f"{line}: exit {r.returncode}" + (f": {tail[0]}" if tail else ""))
        return r.stdout


def last_json(out: str, what: str) -> dict:
    """The JSON object on the last non-blank line of a command's stdout."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        doc = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise Failure(f"{what}: no JSON object on its last line of output") from None
    if not isinstance(doc, dict):
        raise Failure(f"{what}: printed {type(doc).__name__}, want a JSON object")
    return doc


def environment(binary: Optional[str] = None) -> dict:
    """The GPU, driver, Python, torch, transformers, tokenizers and
    sfsurgery versions."""
    import tokenizers
    import torch
    import transformers

    env = dict(gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None, python=platform.python_version(),
               torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
               tokenizers=tokenizers.__version__)
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.split("\n")[0].strip()
    except OSError:
        env["driver"] = None
    if binary:
        env["sfsurgery"] = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return env


def write_json(path: str, doc: dict) -> None:
    """Writes doc to path whole: a temporary beside it, renamed."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# The tokenizer files train.py saves (and special_tokens_map.json, which
# some transformers versions write).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def copy_tokenizer(testmodel: str, dst: str) -> None:
    """Copies the test model's tokenizer files (TESTMODEL/model) into dst,
    a synthetic checkpoint that has none: its ids are valid in the larger
    vocabularies of the real shapes."""
    for name in TOKENIZER_FILES:
        src = os.path.join(testmodel, "model", name)
        if os.path.isfile(src):
            shutil.copy(src, dst)
