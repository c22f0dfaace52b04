"""The entry point: ``python -m supervisor`` and the ``session-supervisor`` console script (pyproject).

Its first act is to record SIGTERM, SIGINT and SIGHUP (supervisor/runtime/signals.py): before the
command line, the commands and their libraries are imported (a second or two on a loaded machine), a
signal's default action would kill the process with 143 or 129, or print a ``KeyboardInterrupt``
traceback from inside an import. Nothing heavier than the standard library is imported before that.
"""

from supervisor.runtime.signals import PROCESS


def main() -> None:
    PROCESS.install()  # first: every signal from here on is recorded, until the process exits
    try:
        from supervisor.cli import main as cli

        cli()
    finally:
        PROCESS.seal()  # the exit code is decided: a signal now changes nothing


if __name__ == "__main__":
    main()
