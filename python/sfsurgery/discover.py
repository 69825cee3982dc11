"""Where a model's launch records come from (docs/serve.md, "Launch
records").

Every record the kernels run comes out of the Go planner on this machine,
through the sfsurgery binary ($SFSURGERY_BIN, else PATH): the launch
records set the kernels' grid, shared memory, workspace and parameters,
so a record from a file that came with a checkpoint could make them read
and write out of bounds. The source, from the caller or
$SFSURGERY_LAUNCHES:

- "plan" (the default): `sfsurgery plan --shapes … --json` for this GPU;
- "checkpoint": the checkpoint's own sfsurgery-launches.json (from
  `sfsurgery plan`) or else sfsurgery-policy.json (from `sfsurgery bench
  --policy`);
- any other value: that file.

A file only chooses among the planner's launches: `sfsurgery plan --from
FILE` refuses it, in one line naming the file, the shape, m and the
field, unless every record in it is one the planner offers on this GPU,
and prints the planner's own records for its choices. A launch file in
the checkpoint is not read unless asked for ("checkpoint"); it is then
checked like any other. Standard library only: the package's CPU tests
run it in CI.
"""

import json
import os
import warnings
from typing import Iterable, List, Optional, Sequence, Tuple

from . import records, tool
from .errors import RecordError

LAUNCHES_FILE = "sfsurgery-launches.json"
POLICY_FILE = "sfsurgery-policy.json"
ENV_LAUNCHES = "SFSURGERY_LAUNCHES"
ENV_BIN = tool.ENV_BIN
PLAN = "plan"
CHECKPOINT = "checkpoint"
# How sfsurgery plan --from ends a refusal (cmd/sfsurgery/plan.go).
REFUSED_HINT = "; plan on this GPU instead"


def plan_command(need: Iterable[Tuple[int, int]], dtype: str, ordinal: int = 0, source: Optional[str] = None,
                 limits: Optional[str] = None, gpu_name: Optional[str] = None) -> List[str]:
    """Returns the sfsurgery plan command that prints the records for the
    shapes in need on device ordinal, or for limits (a GPU's name, or the
    JSON object of a launch document's "limits") of the GPU named gpu_name:
    planned, or the planner's for the choices of the file source."""
    s = ",".join(f"{n}x{k}" for n, k in sorted(need))
    cmd = ["sfsurgery", "plan", "--shapes", s, "--dtype", dtype, "--json"]
    if source:
        cmd += ["--from", source]
    if limits:
        return cmd + ["--limits", limits] + (["--gpu-name", gpu_name] if gpu_name else [])
    return cmd + (["--gpu", str(ordinal)] if ordinal else [])


def checkpoint_file(path: str) -> Optional[str]:
    """Returns the checkpoint directory's launch file (LAUNCHES_FILE, else
    POLICY_FILE), or None."""
    if not os.path.isdir(path):
        return None
    return next((f for f in (os.path.join(path, LAUNCHES_FILE), os.path.join(path, POLICY_FILE)) if os.path.isfile(f)), None)


def source_file(path: str, source: str) -> Optional[str]:
    """Returns the launch file a source names for the checkpoint at path:
    None for "plan", the checkpoint's file for "checkpoint", else the
    source itself, which must be a file."""
    if source == PLAN:
        return None
    if source == CHECKPOINT:
        f = checkpoint_file(path)
        if f is None:
            raise RecordError(f"{path}: launches {CHECKPOINT!r}, but the checkpoint has no {LAUNCHES_FILE} or {POLICY_FILE}")
        return f
    if not os.path.isfile(source):
        raise RecordError(f"{source}: no such launch file (launches is {PLAN!r}, {CHECKPOINT!r} or a file)")
    return source


def find_table(path: str, need: Sequence[Tuple[int, int]], dtype: str, launches: Optional[str] = None, ordinal: int = 0,
               limits: Optional[str] = None, gpu_name: Optional[str] = None) -> records.Table:
    """Returns the launch records for the shapes in need, each from the
    planner (module doc): launches, else $SFSURGERY_LAUNCHES, else "plan"
    names the source. The records are for device ordinal, which the
    planner then opens, or for limits: a GPU's name (tests on a machine
    without one) or the JSON object of its limits, which the serving
    package reads from the GPU it serves on (so the planner opens none),
    with the GPU's name in gpu_name."""
    source = launches or os.environ.get(ENV_LAUNCHES) or PLAN
    file = source_file(path, source)
    if file is None:
        ignored = checkpoint_file(path)
        if ignored is not None:
            warnings.warn(
                f"{ignored} not read: a launch file inside a checkpoint is read only when asked for "
                f"(launches={CHECKPOINT!r} or ${ENV_LAUNCHES}={CHECKPOINT}); planning on this GPU",
                stacklevel=3,
            )
    cmd = plan_command(need, dtype, ordinal, file, limits, gpu_name)
    why = f"{path}: the launch records come from the Go planner (sfsurgery plan)"
    tool.binary(RecordError, why)
    try:
        out = tool.run(cmd[1:], RecordError, why)
    except RecordError as e:
        if file is None:
            raise
        # The planner's advice is for its own command line; here the way to
        # plan on this GPU is to name no launch file.
        msg = str(e).split(REFUSED_HINT)[0]
        raise RecordError(f"{msg}{REFUSED_HINT}: load without launches or ${ENV_LAUNCHES}") from None
    try:
        table = records.parse(json.loads(out), where="sfsurgery plan")
    except ValueError as e:
        if isinstance(e, RecordError):
            raise
        raise RecordError(f"sfsurgery plan: output is not JSON: {e}") from None
    if table.dtype != dtype:
        raise RecordError(f"launch records for {table.dtype}, the checkpoint is {dtype}")
    missing = [s for s in need if s not in table.launches]
    if missing:
        raise RecordError(
            f"launch records of {table.device} have none for {', '.join('%dx%d' % s for s in missing)}"
            + (f" in {file}: leave launches unset to plan on this GPU" if file else "")
        )
    return table
