"""journald's side of the event lines (supervisor/systemd/journal.py, supervisor/runtime/logrecords.py).

Which descriptors are journald's stream (``$JOURNAL_STREAM`` against ``fstat``), the ``<N>`` each
line leads with there (docs/systemd.md, "The journal"), and library log records turned into
``LOG_RECORD`` events on the bus from any thread. The daemon as a process, its lines with and
without journald: tests/integration/test_journal_lines.py.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Iterator

import anyio
import pytest

from supervisor.bus import EventBus
from supervisor.clock import FakeClock
from supervisor.events import Published
from supervisor.runtime.logrecords import LogRecords
from supervisor.systemd import journal
from supervisor.systemd.journal import SD_ERR, SD_INFO, SD_NOTICE, SD_WARNING, event_priority
from tests.golden.event_examples import EXAMPLES
from tests.unit.test_event_lines_golden import event_classes

#: the priority of each golden example's line: what `journalctl -p warning` must show, and must not
EXPECTED = {
    "daemon_degraded": SD_WARNING,
    "watchdog_withheld": SD_WARNING,
    "daemon_started": SD_NOTICE,
    "daemon_stopped": SD_NOTICE,
    "log_record": SD_WARNING,
    "log_record_with_exception": SD_ERR,
    "events_dropped": SD_WARNING,
}


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def stream_of(fd: int) -> str:
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}"


def test_a_descriptor_is_the_journal_stream_only_when_its_device_and_inode_match(
    pipe: tuple[int, int],
) -> None:
    w = pipe[1]
    other_r, other_w = os.pipe()
    try:
        environ = {"JOURNAL_STREAM": stream_of(w)}
        assert journal.journal_descriptors(environ, (w, other_w)) == {w}
        # redirected since systemd set the variable: no prefix
        assert journal.journal_descriptors(environ, (other_w,)) == frozenset()
    finally:
        os.close(other_r)
        os.close(other_w)


@pytest.mark.parametrize("value", ["", "12", "12:", ":34", "a:b", "1:2:3", "²:3", "1" * 21 + ":3", " 1:2"])
def test_a_journal_stream_value_systemd_never_sends_turns_nothing_on(
    pipe: tuple[int, int], value: str
) -> None:
    assert journal.journal_descriptors({"JOURNAL_STREAM": value}, pipe) == frozenset()


def test_every_example_line_has_its_priority_and_the_table_names_only_real_events() -> None:
    by_name = {example.name: example for example in EXAMPLES}
    for name, priority in EXPECTED.items():
        assert event_priority(by_name[name].published()) == priority, name
    # transitions, retries and classified errors are info: `-p warning` is not flooded
    for example in EXAMPLES:
        if example.event.name in ("SESSION_TRANSITION", "RETRY_ATTEMPT", "SDK_ERROR_CLASSIFIED"):
            assert event_priority(example.published()) == SD_INFO, example.name
        if example.event.name == "SESSION_TERMINATED":
            reason = example.event.fields()["reason"]
            want = SD_ERR if reason in ("FAIL_FAST_TRIGGER", "STATE_CORRUPTING") else SD_WARNING
            assert event_priority(example.published()) == want, example.name
    names = {cls.name for cls in event_classes()}
    assert set(journal._EVENT_PRIORITIES) <= names


def test_a_logging_level_is_its_syslog_priority() -> None:
    assert [journal.level_priority(level) for level in (50, 40, 30, 20, 10)] == [2, 3, 4, 6, 7]
    assert journal.prefix(SD_WARNING) == b"<4>"


def test_a_text_line_on_stderr_gets_a_prefix_only_when_stderr_is_the_journal() -> None:
    assert journal.stderr_prefix({"JOURNAL_STREAM": stream_of(2)}, SD_ERR) == "<3>"
    assert journal.stderr_prefix({}, SD_ERR) == ""


@pytest.mark.anyio
async def test_records_from_any_thread_become_log_record_events_until_uninstalled() -> None:
    bus = EventBus(boot_id="boot")
    seen: list[Published] = []
    all_five = anyio.Event()

    def sink(published: Published) -> None:
        seen.append(published)
        if len(seen) == 5:
            all_five.set()

    bus.subscribe(sink)
    logs = LogRecords(bus, FakeClock(1_700_000_000.0), redact=lambda text: text.replace("s3cr3t", "REDACTED"))
    hook = threading.excepthook
    root_handlers = list(logging.getLogger().handlers)
    logs.install()
    try:
        exporter = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")

        def from_the_exporters_thread() -> None:
            exporter.warning(
                "Transient error %s encountered, retrying in %ss. token=s3cr3t", "Too Many Requests", 1
            )
            exporter.info("not a line: below WARNING")
            try:
                raise ConnectionError("refused\nsecond line")
            except ConnectionError:
                logging.getLogger("opentelemetry.sdk.trace.export").exception(
                    "Exception while exporting Span."
                )

        worker = threading.Thread(target=from_the_exporters_thread)
        worker.start()
        worker.join()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a library's warning", UserWarning, stacklevel=1)
        failing = threading.Thread(target=lambda: 1 / 0, name="worker-7")
        failing.start()
        failing.join()
        logs.warning("LISTEN_PID='x' is not a process id: socket activation is off")
        with anyio.fail_after(5):
            await all_five.wait()  # the records handed to the loop are published on its next turns
    finally:
        logs.uninstall()
    lines = {p.event.fields()["message"]: p.event.fields() for p in seen}
    assert all(p.name == "LOG_RECORD" for p in seen)
    assert len(seen) == 5
    retry = lines["Transient error Too Many Requests encountered, retrying in 1s. token=REDACTED"]
    assert retry["level"] == "warning"
    assert retry["logger"] == "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    failed = lines["Exception while exporting Span."]
    assert (failed["level"], failed["exception"]) == ("error", "ConnectionError: refused second line")
    assert any("UserWarning: a library's warning" in m for m in lines)
    assert lines["uncaught exception in worker-7"]["exception"] == "ZeroDivisionError: division by zero"
    own = lines["LISTEN_PID='x' is not a process id: socket activation is off"]
    assert (own["logger"], own["level"]) == ("session-supervisor", "warning")
    # gone with the daemon: the process's logging and thread hook are as they were
    assert logging.getLogger().handlers == root_handlers
    assert threading.excepthook is hook
