"""The scripts under bench/ and the package itself use only names the
package's modules define: for every `module.name` where module is one of
the package's modules (imported `from sfsurgery import module` or as
`sfsurgery.module`), name is defined at the top level of that module's
source. Read with ast, so it runs without torch (the scripts that use the
names need a GPU, and a name a refactor removed otherwise shows up only
there)."""

import ast
import os
import unittest

from fixtures import REPO

PACKAGE = os.path.join(REPO, "python", "sfsurgery")


def defined(path: str) -> set:
    """The names a module's source binds at its top level (functions,
    classes, assignments, imports), or every name of a package's
    __init__."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree) if path.endswith("__init__.py") else tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    out.add(sub.name)
                elif isinstance(sub, ast.Assign):
                    out.update(n.id for t in sub.targets for n in ast.walk(t) if isinstance(n, ast.Name))
                elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                    out.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return out


def modules() -> dict:
    """The package's modules by name, each its source path."""
    out = {}
    for name in os.listdir(PACKAGE):
        if name.endswith(".py") and name != "__init__.py":
            out[name[:-3]] = os.path.join(PACKAGE, name)
        elif os.path.isfile(os.path.join(PACKAGE, name, "__init__.py")):
            out[name] = os.path.join(PACKAGE, name, "__init__.py")
    return out


def uses(path: str, known: dict):
    """(line, module, name) of every module.name in a source file where
    module is a package module it imports."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    inside = os.path.abspath(path).startswith(PACKAGE + os.sep)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module == "sfsurgery" or (inside and node.level == 1 and not node.module)):
            for a in node.names:
                if a.name in known:
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in aliases:
            yield node.lineno, aliases[v.id], node.attr
        elif (isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "sfsurgery"
              and v.attr in known):
            yield node.lineno, v.attr, node.attr


def sources():
    """The scripts under bench/ and the package's modules."""
    for root in (os.path.join(REPO, "bench"), PACKAGE):
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in sorted(files):
                if f.endswith(".py"):
                    yield os.path.join(d, f)


class NamesTest(unittest.TestCase):
    def test_every_use_is_defined(self):
        known = modules()
        names = {m: defined(p) for m, p in known.items()}
        seen = 0
        for path in sources():
            for line, mod, attr in uses(path, known):
                seen += 1
                self.assertIn(attr, names[mod], f"{os.path.relpath(path, REPO)}:{line}: {mod}.{attr} is not defined in sfsurgery.{mod}")
        self.assertGreater(seen, 20, "the scan found almost no uses: it is not looking where the uses are")

    def test_finds_an_undefined_name(self):
        import tempfile

        known = modules()
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write("from sfsurgery import layout\nimport sfsurgery\nlayout.checkpoint_files('x')\nsfsurgery.ops.nothing\n")
        try:
            got = sorted(uses(f.name, known))
        finally:
            os.remove(f.name)
        self.assertEqual(got, [(3, "layout", "checkpoint_files"), (4, "ops", "nothing")])
        self.assertNotIn("checkpoint_files", defined(known["layout"]))
        self.assertIn("read_tensors", defined(known["layout"]))


if __name__ == "__main__":
    unittest.main()
