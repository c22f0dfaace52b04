"""One import name, said plainly: supervisord's ``supervisor`` beside ours.

The layout's top-level package ``supervisor`` is also supervisord's (PyPI distribution
``supervisor``). ``run --check`` warns in one line, exit 0, when supervisord is installed where this
interpreter sees it, or when the ``supervisor`` package imported is not ours. Each case is built
as pip would leave it, with a local stand-in for supervisord (its metadata as a ``.dist-info``
directory and a ``supervisor/__init__.py`` of its own; nothing is installed or downloaded), and
``python -m supervisor run --config X --check`` runs as a script would:

* behind ours on ``sys.path`` (a venv with ``--system-site-packages`` on a host where supervisord
  is a system package): our package is imported; supervisord's metadata is visible;
* in the same directory, supervisord installed last (one ``site-packages/supervisor/`` holding both
  packages' files, supervisord's ``__init__.py``): the imported package is not ours;
* ahead of an editable install (``./dev``'s): supervisord's directory is the package, our modules
  are still found through setuptools' editable finder, but supervisord's ``events.py`` hides our
  ``events/``: the warning, then one error line naming the module that could not be imported
  (exit 1), not a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.cli.import_name import import_name_warning
from supervisor.distribution import DISTRIBUTION, VERSION
from tests.harness.config import offline_config

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "supervisor"
# supervisord's own __init__.py is a helper function and a comment (Supervisor/supervisor); a stand-in
SUPERVISORD_INIT = "# supervisord's package (a stand-in)\n\n\ndef read_file(filename, mode='r'):\n    pass\n"
# supervisord ships a module supervisor/events.py (its event notifications); ours is a package
SUPERVISORD_EVENTS = "# supervisord's events module (a stand-in)\n"


def _supervisord_metadata(site: Path, version: str = "4.2.5") -> None:
    info = site / f"supervisor-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: supervisor\nVersion: {version}\n")


def _check(tmp_path: Path, pythonpath: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SESSION_SUPERVISOR_TAXONOMY")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "run", "--config", str(offline_config(tmp_path)), "--check"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the repository: `-m` puts the working directory first on sys.path
        timeout=60,
        check=False,
    )


def test_no_supervisord_no_warning(tmp_path: Path) -> None:
    result = _check(tmp_path, [])
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("ok: ")


def test_supervisord_behind_ours_is_one_warning_line(tmp_path: Path) -> None:
    behind = tmp_path / "system-site-packages"
    (behind / "supervisor").mkdir(parents=True)
    (behind / "supervisor" / "__init__.py").write_text(SUPERVISORD_INIT)
    _supervisord_metadata(behind)
    result = _check(tmp_path, [ROOT, behind])
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("session-supervisor: warning: supervisord 4.2.5 (distribution 'supervisor', in ")
    assert str(behind) in line
    assert "both use the import name 'supervisor'" in line
    assert "virtual environment of its own" in line
    assert result.stdout.startswith("ok: ")  # the check itself still passes


def test_supervisords_init_in_a_shared_directory_is_one_warning_line(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    shared = site / "supervisor"
    shared.mkdir(parents=True)
    for entry in PACKAGE.iterdir():  # our files, as our install left them
        if entry.name not in ("__init__.py", "__pycache__"):
            (shared / entry.name).symlink_to(entry)
    (shared / "__init__.py").write_text(SUPERVISORD_INIT)  # supervisord, installed last, owns it
    _supervisord_metadata(site)
    result = _check(tmp_path, [site])
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"session-supervisor: warning: the 'supervisor' package imported from {shared / '__init__.py'} "
        "is not session-supervisor's; supervisord 4.2.5"
    )
    assert "virtual environment of its own" in line
    assert result.stdout.startswith("ok: ")


def test_supervisord_ahead_of_an_editable_install_ends_in_one_error_line(tmp_path: Path) -> None:
    if not any(getattr(f, "__module__", "").startswith("__editable__") for f in sys.meta_path):
        pytest.skip("this case is an editable install's (./dev makes one); this environment has none")
    ahead = tmp_path / "site-packages"
    (ahead / "supervisor").mkdir(parents=True)
    (ahead / "supervisor" / "__init__.py").write_text(SUPERVISORD_INIT)
    (ahead / "supervisor" / "events.py").write_text(SUPERVISORD_EVENTS)
    _supervisord_metadata(ahead)
    result = _check(tmp_path, [ahead])
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    warning, error = result.stderr.splitlines()
    not_ours = f"the 'supervisor' package imported from {ahead / 'supervisor' / '__init__.py'} is not session-supervisor's"
    assert warning.startswith(f"session-supervisor: warning: {not_ours}")
    assert error.startswith(f"session-supervisor: error: cannot import supervisor.events: {not_ours}")


def test_a_failed_import_without_a_clash_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only supervisord's shadow is turned into one line: any other failed import is a bug, raised."""
    from supervisor.cli import cli
    from supervisor.cli.lazy_group import LazyCommand

    monkeypatch.setitem(cli.lazy, "broken", LazyCommand("supervisor.cli.no_such_module", "broken", "Broken."))
    with pytest.raises(ModuleNotFoundError, match=r"supervisor\.cli\.no_such_module"):
        main(["broken"])


def test_the_marker_and_version_are_this_distributions() -> None:
    import supervisor

    assert supervisor.DISTRIBUTION == DISTRIBUTION == "session-supervisor"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (
        (project["name"], project["version"])
        == (DISTRIBUTION, VERSION)
        == (DISTRIBUTION, supervisor.__version__)
    )


def test_in_this_environment_nothing_is_said() -> None:
    # the test environment is the project's own: no supervisord, our package
    assert import_name_warning() is None


@pytest.mark.parametrize("marker", [None, "supervisor"])
def test_a_package_without_our_marker_is_not_ours(
    monkeypatch: pytest.MonkeyPatch, marker: str | None
) -> None:
    import supervisor

    if marker is None:
        monkeypatch.delattr(supervisor, "DISTRIBUTION")
    else:
        monkeypatch.setattr(supervisor, "DISTRIBUTION", marker)
    warning = import_name_warning()
    assert warning is not None and "is not session-supervisor's" in warning
