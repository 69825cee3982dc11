"""Finding the launch records for a model's shapes (docs/serve.md).

In order: a file named by the caller or $SFSURGERY_LAUNCHES (which must
exist); sfsurgery-launches.json (`sfsurgery plan`) or sfsurgery-policy.json
(`sfsurgery bench --policy`) in the checkpoint; else `sfsurgery plan` run
for the GPU, with the sfsurgery binary from $SFSURGERY_BIN or PATH. Only
the standard library: the package's CPU tests run it in CI.
"""

import json
import os
import shutil
import subprocess
from typing import Iterable, List, Optional, Sequence, Tuple

from . import records
from .errors import RecordError

LAUNCHES_FILE = "sfsurgery-launches.json"
POLICY_FILE = "sfsurgery-policy.json"
ENV_LAUNCHES = "SFSURGERY_LAUNCHES"
ENV_BIN = "SFSURGERY_BIN"
PLAN_TIMEOUT_S = 300


def plan_command(need: Iterable[Tuple[int, int]], dtype: str, ordinal: int = 0) -> List[str]:
    """Returns the sfsurgery plan command that writes the records for the
    shapes in need on device ordinal."""
    s = ",".join(f"{n}x{k}" for n, k in sorted(need))
    cmd = ["sfsurgery", "plan", "--shapes", s, "--dtype", dtype, "--json"]
    return cmd + (["--gpu", str(ordinal)] if ordinal else [])


def find_table(path: str, need: Sequence[Tuple[int, int]], dtype: str, launches: Optional[str] = None, ordinal: int = 0) -> records.Table:
    """Finds the launch records for the shapes in need: the file launches,
    else $SFSURGERY_LAUNCHES (either must exist), else
    sfsurgery-launches.json or sfsurgery-policy.json in the checkpoint,
    else `sfsurgery plan` run for GPU ordinal (sfsurgery from
    $SFSURGERY_BIN or PATH)."""
    named = launches or os.environ.get(ENV_LAUNCHES)
    files = [named] if named else []
    if not named and os.path.isdir(path):
        files = [f for f in (os.path.join(path, LAUNCHES_FILE), os.path.join(path, POLICY_FILE)) if os.path.isfile(f)]
    cmd = plan_command(need, dtype, ordinal)
    if files:
        table = records.load(files[0])
    else:
        exe = os.environ.get(ENV_BIN) or shutil.which("sfsurgery")
        if not exe:
            raise RecordError(
                f"{path}: no launch records: put sfsurgery on PATH, or run `{' '.join(cmd)} > {os.path.join(path, LAUNCHES_FILE)}` on this GPU"
            )
        try:
            r = subprocess.run([exe] + cmd[1:], capture_output=True, text=True, timeout=PLAN_TIMEOUT_S)
        except OSError as e:
            raise RecordError(f"{exe}: {e.strerror or e}") from None
        except subprocess.TimeoutExpired:
            raise RecordError(f"{exe} plan: no answer in {PLAN_TIMEOUT_S} s") from None
        if r.returncode != 0:
            raise RecordError(f"{exe} plan: {(r.stderr.strip().splitlines() or ['exit %d' % r.returncode])[-1]}")
        try:
            table = records.parse(json.loads(r.stdout), where=f"{exe} plan")
        except ValueError as e:
            if isinstance(e, RecordError):
                raise
            raise RecordError(f"{exe} plan: output is not JSON: {e}") from None
    if table.dtype != dtype:
        raise RecordError(f"launch records for {table.dtype}, the checkpoint is {dtype}")
    missing = [s for s in need if s not in table.launches]
    if missing:
        raise RecordError(
            f"launch records of {table.device} have none for {', '.join('%dx%d' % s for s in missing)}: run `{' '.join(cmd)}`"
        )
    return table
