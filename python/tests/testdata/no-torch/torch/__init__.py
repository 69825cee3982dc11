"""A stand-in for torch that refuses to import: tests put it first on
sys.path to run the package as on a machine without torch."""

raise ImportError("No module named 'torch' (the tests' stand-in)")
