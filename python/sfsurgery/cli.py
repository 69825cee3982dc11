"""The package's commands: `python -m sfsurgery <command> ...`.

A command is a module (or package) with three names: HELP (one line for
the command list), add_arguments(parser) (its arguments, on an argparse
parser of its own) and run(args) -> int (its exit status); DESCRIPTION,
where it has one, is its --help text (else HELP). COMMANDS lists them; a
command is called by its module's name. Commands import torch and
transformers inside run(), so that --help and argument errors work on a
machine without them (python/tests/test_cli.py runs them so in CI).

Every sfsurgery.SfsurgeryError a command raises, and an interrupt, ends
it with one line `sfsurgery: <message>` on stderr and exit status 2, the
status argparse gives a command line it cannot parse.
"""

import argparse
import sys
from types import ModuleType
from typing import Optional, Sequence

from . import __version__, calibrate, perplexity
from .errors import SfsurgeryError

# The commands, in the order --help lists them.
COMMANDS = (perplexity, calibrate)

# The exit status of a command that could not run.
EXIT_FAILED = 2


def command_name(module: ModuleType) -> str:
    """The name a command is called by: its module's last name part."""
    return module.__name__.rpartition(".")[2]


def build_parser(commands: Sequence[ModuleType] = COMMANDS) -> argparse.ArgumentParser:
    """The parser of `python -m sfsurgery`, with a subcommand per module
    of commands; the parsed arguments carry the command's run as _run."""
    p = argparse.ArgumentParser(
        prog="python -m sfsurgery",
        description="Evaluate and calibrate 2:4 checkpoints (the sfsurgery binary writes them).",
    )
    p.add_argument("--version", action="version", version=f"sfsurgery {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in commands:
        sp = sub.add_parser(command_name(mod), help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def one_line(e: BaseException) -> str:
    """The error's message on one line."""
    return " ".join(str(e).split("\n")) or type(e).__name__


def main(argv: Optional[Sequence[str]] = None, commands: Sequence[ModuleType] = COMMANDS) -> int:
    """Parses argv (default sys.argv[1:]) and runs the command; returns
    its exit status, EXIT_FAILED for an SfsurgeryError or an interrupt
    (said in one line on stderr). argparse exits itself, with status 2,
    for a command line it cannot parse."""
    args = build_parser(commands).parse_args(argv)
    try:
        return args._run(args)
    except SfsurgeryError as e:
        print(f"sfsurgery: {one_line(e)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("sfsurgery: interrupted", file=sys.stderr)
    return EXIT_FAILED
