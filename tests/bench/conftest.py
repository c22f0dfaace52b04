"""Benchmarks are run by `./dev bench`, never by the default test run (pyproject ignores tests/bench)."""
