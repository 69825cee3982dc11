"""`python -m sfsurgery`: the command list, --help without torch, argparse's
refusals, and every SfsurgeryError a command raises as one line and exit
status 2 (CPU only)."""

import argparse
import contextlib
import io
import os
import subprocess
import sys
import types
import unittest

from fixtures import REPO
import sfsurgery
from sfsurgery import cli
from sfsurgery.errors import CheckpointError, DeviceError, InputError, RecordError

PYTHON = os.path.join(REPO, "python")
# A torch package that refuses to import, as if torch were not installed.
NO_TORCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "no-torch")


def python_m(*args, env=None):
    """Runs `python -m sfsurgery args` in a fresh interpreter."""
    e = dict(os.environ, PYTHONPATH=PYTHON)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sfsurgery", *args], capture_output=True, text=True, env=e, timeout=300)


def fake_command(name, behaviour):
    """A command module called name whose run does behaviour(args)."""
    mod = types.ModuleType(f"sfsurgery.{name}")
    mod.HELP = f"the {name} command"
    mod.add_arguments = lambda p: p.add_argument("--n", type=int, default=1)
    mod.run = behaviour
    return mod


def run_main(argv, commands):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(argv, commands)
    return code, err.getvalue()


class MainTest(unittest.TestCase):
    def test_command_runs_with_its_arguments(self):
        seen = []
        mod = fake_command("echo", lambda a: seen.append(a.n) or 7)
        self.assertEqual(run_main(["echo", "--n", "3"], (mod,)), (7, ""))
        self.assertEqual(seen, [3])

    def test_errors_are_one_line_exit_2(self):
        for cls in (InputError, CheckpointError, DeviceError, RecordError):
            with self.subTest(cls.__name__):
                def fail(a, cls=cls):
                    raise cls("model/config.json: first\nsecond")

                code, err = run_main(["fail"], (fake_command("fail", fail),))
                self.assertEqual(code, cli.EXIT_FAILED)
                self.assertEqual(err, "sfsurgery: model/config.json: first second\n")

    def test_interrupt(self):
        def stop(a):
            raise KeyboardInterrupt

        self.assertEqual(run_main(["stop"], (fake_command("stop", stop),)), (2, "sfsurgery: interrupted\n"))

    def test_other_exceptions_propagate(self):
        """A bug is a traceback, not a one-line refusal."""
        def bug(a):
            raise ZeroDivisionError("bug")

        with self.assertRaises(ZeroDivisionError):
            run_main(["bug"], (fake_command("bug", bug),))

    def test_argparse_errors_exit_2(self):
        mod = fake_command("echo", lambda a: 0)
        for argv in (["echo", "--n", "x"], ["nope"], [], ["echo", "--bogus"]):
            with self.subTest(argv=argv):
                with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as cm:
                    cli.main(argv, (mod,))
                self.assertEqual(cm.exception.code, 2)

    def test_description(self):
        mod = fake_command("echo", lambda a: 0)
        mod.DESCRIPTION = "Echo.\n\nA second paragraph, kept as written."
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
            cli.main(["echo", "--help"], (mod,))
        self.assertIn("Echo.\n\nA second paragraph, kept as written.", out.getvalue())
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
            cli.main(["--help"], (mod,))
        self.assertIn("the echo command", out.getvalue())

    def test_commands_are_registered_by_module_name(self):
        p = cli.build_parser()
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        self.assertEqual(list(sub.choices), [cli.command_name(m) for m in cli.COMMANDS])
        self.assertIn("perplexity", sub.choices)
        for m in cli.COMMANDS:
            self.assertTrue(m.HELP and "\n" not in m.HELP, m.__name__)


class PythonMTest(unittest.TestCase):
    """The entry point in a fresh interpreter: `python -m sfsurgery`."""

    def test_help(self):
        r = python_m("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("perplexity", r.stdout)
        r = python_m("--version")
        self.assertEqual((r.returncode, r.stdout), (0, f"sfsurgery {sfsurgery.__version__}\n"), r.stderr)
        r = python_m("perplexity", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        for flag in ("--text", "--seqlen", "--windows", "--batch", "--json"):
            self.assertIn(flag, r.stdout)

    def test_help_without_torch(self):
        """--help works where torch is not installed: a stand-in torch
        package that refuses to import hides the real one."""
        r = python_m("perplexity", "--help", env=dict(PYTHONPATH=os.pathsep.join([NO_TORCH, PYTHON])))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--text", r.stdout)

    def test_refusal_exit_2(self):
        r = python_m("perplexity", "some/model", "--text", os.path.join(REPO, "no-such-file.txt"))
        self.assertEqual(r.returncode, 2)
        last = r.stderr.splitlines()[-1]  # libraries imported with the package may log before it
        self.assertRegex(last, r"^sfsurgery: .*no-such-file\.txt: No such file or directory$")
        self.assertEqual(r.stdout, "")

    def test_usage_error_exit_2(self):
        r = python_m("perplexity", "model")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--text", r.stderr)


if __name__ == "__main__":
    unittest.main()
