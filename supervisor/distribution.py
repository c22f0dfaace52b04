"""Which distribution this ``supervisor`` package is: session-supervisor, not supervisord.

The import name ``supervisor`` is also supervisord's (PyPI distribution ``supervisor``). Installed
into one environment, the two write into one ``site-packages/supervisor/`` directory and the last
one's ``__init__.py`` wins, or (beside an editable install) supervisord's directory hides this one.
The names here live in a module supervisord does not ship, so that the CLI still starts and
``run --check`` can say so when the package's ``__init__.py`` is supervisord's
(supervisor/cli/import_name.py; docs/systemd.md, "A virtual environment of its own").

Plain constants, no import at all: ``import supervisor`` loads this module and nothing else.
"""

#: the distribution's name on PyPI and in ``importlib.metadata`` (pyproject.toml, ``[project] name``)
DISTRIBUTION = "session-supervisor"
#: pyproject.toml's ``[project] version`` (tests/unit/test_import_name.py holds them equal)
VERSION = "0.1.0"
#: the top-level import name this distribution shares with supervisord
IMPORT_NAME = "supervisor"
#: supervisord's distribution name (Supervisor/supervisor, setup.py: ``name='supervisor'``)
SUPERVISORD_DISTRIBUTION = "supervisor"
