"""`python -m sfsurgery calibrate`: calibrated 2:4 pruning decisions
(Wanda, RIA and SparseGPT, block by block on one GPU), written as a
decisions file that `sfsurgery prune --decisions` turns into a checkpoint
(Python decides, Go writes). The package is the command (HELP,
add_arguments, run: cli.py); its modules:

- command: the command line;
- plan: the checks before calibration, and the targets from `sfsurgery
  prune --dry-run --json` (standard library);
- data: calibration text → seeded windows of token ids;
- methods: the three methods on one layer's statistics (torch);
- stream: the block-sequential driver and the calibration entry point;
- model: a checkpoint's decoder layers one at a time, in transformers'
  modules, streamed from its shards;
- output: the decisions file (schema sfsurgery-decisions/1).

Importing it needs only the standard library; methods, stream and model
need torch (model also transformers and safetensors).
"""

from .command import DESCRIPTION, HELP, add_arguments, run

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "run"]
