"""Suite-wide guards, the one Hypothesis settings profile every property test runs under, the one
``anyio_backend``, and the shared fixtures (tests/harness/: the clock, the simulators)."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import settings

# -- Hypothesis ------------------------------------------------------------------------------------
# One profile for every property test: tests set no deadline and no example
# count of their own (tests/unit/test_hypothesis_profile.py holds them to it).
#
# * no deadline: the suite runs on machines shared by several jobs (2 cores, up to 8 engineers);
#   the wall time of one example says how loaded the machine is, not whether the code is right.
#   Our own timing claims are measured in tests/bench and asserted with an injected clock.
# * 100 examples, Hypothesis' own default: the suite's property tests then cost a few seconds each.
# * "ci": the same, derandomized (the examples follow from each test's name, so a failure in CI is
#   the same failure on a laptop, and two CI runs of one commit draw the same examples) and without
#   the example database (a fresh clone has none; nothing is kept). Unlike Hypothesis' built-in
#   "ci" profile it does *not* suppress the too_slow health check: a strategy too slow to draw is
#   a bug in the test (tests/strategies.py says what made ours slow).
# * "thorough": ten times the examples, for a run that hunts rather than guards.
#
# Chosen by --hypothesis-profile NAME, else $HYPOTHESIS_PROFILE, else "ci" when $CI is set (what
# CI services set; .ci/run sets HYPOTHESIS_PROFILE=ci itself), else "dev".
PROFILE_VARIABLE: Final = "HYPOTHESIS_PROFILE"
# parent "default", named: without a parent a profile inherits whatever is loaded, and with $CI set
# Hypothesis has loaded its own "ci" (too_slow suppressed) before this file runs
settings.register_profile(
    "dev", settings.get_profile("default"), deadline=None, max_examples=100, print_blob=True
)
settings.register_profile("ci", settings.get_profile("dev"), derandomize=True, database=None)
settings.register_profile("thorough", settings.get_profile("dev"), max_examples=1000)


def _profile(environ: dict[str, str]) -> str:
    chosen = environ.get(PROFILE_VARIABLE, "").strip()
    if chosen:
        return chosen
    return "ci" if environ.get("CI", "").strip().lower() not in ("", "0", "false") else "dev"


settings.load_profile(_profile(dict(os.environ)))

# -- shared fixtures -------------------------------------------------------------------------------
# the clock, the simulators and PostgreSQL, for every directory (tests/harness/__init__.py says what is where)
pytest_plugins = ("tests.harness.clocks", "tests.harness.simulators", "tests.harness.postgres")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """A short base for ``tmp_path`` (before pytest's own tmpdir plugin reads it): tests put Unix
    sockets there, and a socket's path must fit sun_path, 108 bytes (unix(7)). pytest's default
    base, ``/tmp/pytest-of-USER/pytest-N/``, plus pytest-xdist's ``popen-gwN/`` and a 30-character
    test directory left too little for ``sockets/subscribe.sock``. A fresh directory per run (two
    runs at once never share one; pytest empties a given base first); an xdist worker is handed its
    own below the controller's. ``--basetemp`` still wins."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="pt-", dir="/tmp")
        config.add_cleanup(functools.partial(shutil.rmtree, config.option.basetemp, ignore_errors=True))


@pytest.fixture
def anyio_backend() -> str:
    """Every async test runs on asyncio: the daemon's backend (docs/runtime.md)."""
    return "asyncio"


#: the profile's settings for a property test that drives a real daemon (its reloads, its sockets):
#: an eighth of the examples (12 under "dev" and "ci", 125 under "thorough"), since each example
#: costs a daemon's start and stop, and 100 of them would pass the per-test timeout on a loaded
#: machine. Use it as the parent: ``@settings(REAL_DAEMON, suppress_health_check=[...])``.
REAL_DAEMON: Final = settings(settings.default, max_examples=max(4, settings.default.max_examples // 8))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Hypothesis' one-off scan of our source for constants, now rather than inside a test's draw.

    Hypothesis (6.131 on) seeds its draws with literals from the project's modules, parsing every
    one of them the first time a draw asks for a constant (cached under ``.hypothesis/constants``).
    With the whole suite imported that costs 0.7 s on a fresh clone of an idle machine, several
    seconds on a loaded one: inside a random test's first draws, enough to fail its too_slow
    health check. After collection every test module is imported, so one
    scan here covers them; an older or newer Hypothesis without the function skips it.
    """
    del session
    try:
        from hypothesis.internal.conjecture.providers import _get_local_constants
    except ImportError:
        return
    _get_local_constants()


def _children(pid: int) -> list[int]:
    """The live descendants of ``pid``, children first (from /proc: no extra dependency)."""
    found: list[int] = []
    try:
        tasks = (Path("/proc") / str(pid) / "task").iterdir()
        direct = [int(child) for task in tasks for child in (task / "children").read_text().split()]
    except OSError:
        return found
    for child in direct:
        found.append(child)
        found.extend(_children(child))
    return found


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A test that failed half-way leaves no daemon behind to load the machine for the next ones.

    Tests end their processes themselves (drain, SIGTERM, kill -9 are what they test); this only
    reaps what a failure or a timeout left running, so that one failure cannot turn into many.
    Processes alive before the test (a module-scoped fixture's, e.g. the systemd user manager
    that test_systemd_manager.py shares between its tests) are not the test's to reap.
    """
    before = set(_children(os.getpid()))
    yield
    for pid in _children(os.getpid()):
        if pid in before:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
