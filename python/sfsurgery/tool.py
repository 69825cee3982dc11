"""Running the sfsurgery binary, which answers for the Go side everything
the package must not decide itself: the launch records its kernels run
(`sfsurgery plan`) and what a checkpoint holds (`sfsurgery inspect`,
through the Go reader's strict rules). Standard library only."""

import os
import shutil
import subprocess
from typing import List, Optional, Type

from .errors import SfsurgeryError

ENV_BIN = "SFSURGERY_BIN"
TIMEOUT_S = 300


def binary(error: Type[SfsurgeryError], why: str) -> str:
    """Returns the sfsurgery binary: $SFSURGERY_BIN, else sfsurgery on
    PATH; raises error when there is none, one line: why it is needed,
    then how to provide it."""
    exe = os.environ.get(ENV_BIN) or shutil.which("sfsurgery")
    if not exe:
        raise error(f"{why}: put the sfsurgery binary on PATH or name it in ${ENV_BIN}")
    return exe


def run(args: List[str], error: Type[SfsurgeryError], why: str, timeout: Optional[float] = None) -> str:
    """Runs `sfsurgery ARGS` and returns its standard output; a failure
    raises error with the last line the binary printed on standard error
    (its one-line message, without the "sfsurgery: " prefix). why says
    what the binary is needed for, should there be none; timeout is in
    seconds (default TIMEOUT_S)."""
    exe = binary(error, why)
    timeout = TIMEOUT_S if timeout is None else timeout
    try:
        r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=timeout)
    except OSError as e:
        raise error(f"{exe}: {e.strerror or e}") from None
    except subprocess.TimeoutExpired:
        raise error(f"{exe} {args[0]}: no answer in {timeout:g} s") from None
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines() or [f"exit {r.returncode}"]
        last = lines[-1]
        if last.startswith("sfsurgery: "):
            last = last[len("sfsurgery: "):]
        raise error(f"{exe} {args[0]}: {last}")
    return r.stdout
