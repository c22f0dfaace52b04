"""Guards of the integration tests: the daemons they start keep their sockets and lock files to
the test. The shared fixtures (the simulators, the clock, ``anyio_backend``) are every directory's:
tests/conftest.py, tests/harness/."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _no_default_socket_paths() -> Iterator[None]:
    """Daemons started by the tests bind their sockets where a test says, or not at all: never in the
    developer's $XDG_RUNTIME_DIR, where a real daemon may be listening (docs/socket-api.md)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("XDG_RUNTIME_DIR", raising=False)
        yield


@pytest.fixture(autouse=True)
def _lock_files_in_a_temporary_directory(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Daemons started by the tests put their lock file (daemon.lockFile's default, under
    $RUNTIME_DIRECTORY) in a temporary directory of the test's, never in the shared
    /tmp/session-supervisor-<uid>/, where a daemon killed with -9 leaves its file (227 of
    them from test runs). A test that names lockFile or $RUNTIME_DIRECTORY itself still wins."""
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path_factory.mktemp("runtime")))
