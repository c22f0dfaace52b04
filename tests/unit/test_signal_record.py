"""The process's signal record (supervisor/runtime/signals.py): real signals to this process.

Every test puts the handlers it found back (the ``record`` fixture), so pytest's own are intact.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import anyio
import pytest

from supervisor.runtime.signals import HANDLED, SignalRecord, receiving


@pytest.fixture
def record() -> Iterator[SignalRecord]:
    before = {sig: signal.getsignal(sig) for sig in HANDLED}
    made = SignalRecord()
    try:
        yield made
    finally:
        made.release(redeliver=False)
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_signals_are_recorded_not_acted_on(record: SignalRecord) -> None:
    record.install()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        os.kill(os.getpid(), sig)  # the default actions would end this process (or raise)
    assert record.pending() == (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def test_sighups_in_a_row_are_one_reload_and_a_stop_is_taken_alone(record: SignalRecord) -> None:
    record.install()
    for sig in (signal.SIGHUP, signal.SIGHUP, signal.SIGHUP, signal.SIGTERM, signal.SIGHUP):
        os.kill(os.getpid(), sig)
    assert record.stop_pending() == signal.SIGTERM
    assert record.take() == signal.SIGHUP
    assert record.pending() == (signal.SIGTERM, signal.SIGHUP)
    assert record.take_stop() == signal.SIGTERM
    assert record.pending() == (signal.SIGHUP,)
    assert record.take() == signal.SIGHUP
    assert record.take() is None


def test_release_puts_the_handlers_back_and_redelivers_what_was_recorded(record: SignalRecord) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    record.install()
    os.kill(os.getpid(), signal.SIGINT)
    # a command that is not a daemon: SIGINT has the effect it would have had (the CLI's exit 130)
    with pytest.raises(KeyboardInterrupt):
        record.release()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert record.pending() == ()


def test_seal_ignores_the_signals_at_the_exit(record: SignalRecord) -> None:
    record.install()
    record.seal()
    assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in HANDLED)
    os.kill(os.getpid(), signal.SIGTERM)
    assert record.pending() == ()


@pytest.mark.anyio
async def test_the_receiver_yields_what_was_recorded_before_the_loop_listened(record: SignalRecord) -> None:
    record.install()
    os.kill(os.getpid(), signal.SIGTERM)  # during start-up, before anything listens
    with receiving(record) as received:
        assert received.stop_pending() == signal.SIGTERM
        with anyio.fail_after(5):
            assert await received.__anext__() == signal.SIGTERM
    assert record.installed  # the process's record outlives the receiver: no default action after it


@pytest.mark.anyio
async def test_a_signal_delivered_to_another_thread_wakes_the_loop(record: SignalRecord) -> None:
    """The kernel may hand a process's signal to any thread; the main thread sleeps in its selector
    with nothing else to do. The wake-up descriptor must wake it (without it this times out)."""
    record.install()
    with receiving(record) as received:
        gate = threading.Event()

        def in_worker() -> None:
            gate.wait()
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)

        worker = threading.Thread(target=in_worker)
        worker.start()
        gate.set()
        with anyio.fail_after(5):
            assert await received.__anext__() == signal.SIGHUP
        worker.join()


@pytest.mark.anyio
async def test_a_receiver_without_the_process_record_puts_the_handlers_back() -> None:
    before = {sig: signal.getsignal(sig) for sig in HANDLED}
    with receiving(SignalRecord()) as received:
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGHUP)
        with anyio.fail_after(5):
            assert await received.__anext__() == signal.SIGHUP
    assert {sig: signal.getsignal(sig) for sig in HANDLED} == before


ENTRY_PROBE = """
import builtins, signal, sys
before = set(sys.modules)
import supervisor.__main__ as entry
loaded = sorted(set(sys.modules) - before)
at_cli = []
real_import = builtins.__import__

def spy(name, *args, **kwargs):
    if name == "supervisor.cli" and not at_cli:
        at_cli.append(signal.getsignal(signal.SIGTERM) == entry.PROCESS._record)
    return real_import(name, *args, **kwargs)

builtins.__import__ = spy
sys.argv = ["session-supervisor", "--version"]
try:
    entry.main()
except SystemExit:
    pass
print(loaded)
print(at_cli)
"""


def test_the_entry_point_records_signals_before_it_imports_the_cli() -> None:
    """``python -m supervisor`` and the console script: the handlers exist before the command line and
    its libraries are imported (a second or two in which a default action used to kill the process)."""
    done = subprocess.run(
        [sys.executable, "-c", ENTRY_PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    loaded_line, at_cli_line = done.stdout.splitlines()[-2:]
    loaded = ast.literal_eval(loaded_line)
    ours = {m for m in loaded if m.split(".")[0] == "supervisor"}
    # the package root imports its two ground modules (the distribution's name, the lazy re-exports:
    # standard library only, docs/runtime.md, "Floors"), the entry point the signal record; nothing else of ours
    assert ours == {
        "supervisor",
        "supervisor.distribution",
        "supervisor.exports",
        "supervisor.__main__",
        "supervisor.runtime",
        "supervisor.runtime.signals",
    }
    assert all(m.split(".")[0] in sys.stdlib_module_names for m in set(loaded) - ours), loaded
    assert ast.literal_eval(at_cli_line) == [True]  # installed when supervisor.cli is first imported
