"""Whether the ``supervisor`` this process imports is session-supervisor's alone.

The top-level package ``supervisor`` is also supervisord's import name (PyPI distribution
``supervisor``; Supervisor/supervisor, setup.py: ``name='supervisor'``, ``packages=find_packages()``).
Installed into one environment the two break each other:

* one ``site-packages/supervisor/`` directory holds both; the last one installed owns
  ``__init__.py`` (supervisord's defines ``read_file``, ours the re-exports), and uninstalling
  either removes files the other needs;
* beside an editable install (``./dev``), supervisord's directory in the same environment comes
  first: its ``__init__.py`` is the package's, our modules are still found (setuptools' editable
  finder comes after the path), but where both have a module supervisord's wins (its
  ``events.py`` over our ``events/``), and an import of ours fails;
* a virtual environment made with ``--system-site-packages`` on a host where supervisord is a
  system package sees supervisord's metadata (and its modules, behind ours).

``run --check`` says so in one warning line (:func:`import_name_warning`) before it reads anything,
and any command whose import of ours fails for it ends with one error line saying so, not a
traceback (supervisor/cli/__init__.py). The cure is the one the README and docs/systemd.md give: a
virtual environment of its own.
"""

from __future__ import annotations

import sys

from supervisor.distribution import DISTRIBUTION, IMPORT_NAME, SUPERVISORD_DISTRIBUTION

ADVICE = 'install session-supervisor into a virtual environment of its own (README, "Install")'


def _supervisord() -> str | None:
    """``supervisord 4.2.5 (in /path)`` when supervisord's distribution is visible to this interpreter."""
    from importlib import metadata  # here: it costs a short command ~30 ms, and only the check needs it

    try:
        found = metadata.distribution(SUPERVISORD_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    return (
        f"supervisord {found.version} (distribution '{SUPERVISORD_DISTRIBUTION}', in {found.locate_file('')})"
    )


def import_name_warning() -> str | None:
    """One line when the imported ``supervisor`` package is not ours, or supervisord is installed beside it."""
    package = sys.modules.get(IMPORT_NAME)
    # our __init__.py names its distribution; supervisord's does not (a module-level marker, not the
    # directory: in a shared site-packages both packages are one directory)
    ours = getattr(package, "DISTRIBUTION", None) == DISTRIBUTION
    supervisord = _supervisord()
    clash = f"both use the import name '{IMPORT_NAME}' and each breaks the other; {ADVICE}"
    if not ours:
        where = getattr(package, "__file__", None) or "an unknown place"
        beside = f"; {supervisord} is installed in this environment" if supervisord else ""
        return f"the '{IMPORT_NAME}' package imported from {where} is not {DISTRIBUTION}'s{beside}: {clash}"
    if supervisord is not None:
        return f"{supervisord} is installed in this environment too: {clash}"
    return None
