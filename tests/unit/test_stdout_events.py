"""The stdout sink over a real pipe: a reader that goes away costs lines, never a loop."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from supervisor.bus import EventBus
from supervisor.events import DaemonStarted, Published, SessionTransition
from supervisor.runtime.stdout import WRITTEN_AT_ONCE, StdoutEvents
from supervisor.systemd.journal import _EVENT_PRIORITIES, SD_NOTICE
from supervisor.vocabulary import SessionState
from tests.harness.waits import wait_until

pytestmark = pytest.mark.anyio


def _transition(i: int) -> SessionTransition:
    return SessionTransition(
        f"s-{i}", SessionState.CONNECTING, SessionState.ACTIVE, "validated", "VALIDATED", "t"
    )


@contextlib.asynccontextmanager
async def serving_into_a_pipe(**options: Any) -> AsyncIterator[tuple[EventBus, StdoutEvents, int]]:
    """A bus, its sink serving into a pipe's write end (``options`` to the sink), the read end;
    flushed and stopped at the block's end, the pipe closed."""
    read_end, write_end = os.pipe()
    bus = EventBus()
    sink = StdoutEvents(bus, fd=write_end, **options)
    bus.subscribe(sink)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(sink.serve)
            yield bus, sink, read_end
            await sink.flush(1.0)
            tg.cancel_scope.cancel()
    finally:
        os.close(read_end)
        os.close(write_end)


def read_lines(read_end: int, count: int) -> list[bytes]:
    data = b""
    while data.count(b"\n") < count:
        data += os.read(read_end, 65536)
    return data.splitlines()


async def test_a_reader_that_went_away_drops_lines_without_reporting_drops_into_the_same_pipe() -> None:
    """Regression: each EVENTS_DROPPED was itself a line for the dead pipe, dropped, reported, ...

    a daemon whose reader had gone spun a core publishing drop notices about drop notices.
    """
    read_end, write_end = os.pipe()
    bus = EventBus()
    seen: list[Published] = []
    bus.subscribe(seen.append)
    sink = StdoutEvents(bus, fd=write_end)
    bus.subscribe(sink)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(sink.serve)
            bus.publish(_transition(1))
            await wait_until(lambda: sink.written == 1, 5)
            assert os.read(read_end, 4096).count(b"\n") == 1
            os.close(read_end)  # the reader goes away (EPIPE from now on)
            read_end = -1
            for i in range(2, 5):
                bus.publish(_transition(i))
                await wait_until(lambda i=i: sink.dropped == i - 1, 5)
            assert sink.dropped == 3 and sink.written == 1
            # nothing but our four events went through the bus: no drop notice fed the dead pipe
            assert [p.event.name for p in seen] == ["SESSION_TRANSITION"] * 4
            assert bus.seq == 4
            await sink.flush(1.0)
            tg.cancel_scope.cancel()
    finally:
        if read_end >= 0:
            os.close(read_end)
        os.close(write_end)


async def test_lines_published_on_several_turns_of_the_loop_reach_the_writer_in_one_wake() -> None:
    """The writer thread is woken once per ``wake_after_s`` (a GIL hand-over each), not once per
    line that finds the buffer empty: lines of 50 turns of the loop go out in one write."""
    async with serving_into_a_pipe(wake_after_s=0.5) as (bus, sink, read_end):
        for i in range(50):
            bus.publish(_transition(i))
            await anyio.lowlevel.checkpoint()  # the next line on another turn of the loop
        assert sink.written == 0  # none yet: the writer's wake is due later
        await wait_until(lambda: sink.written == 50, 5)
        assert sink.batches == 1
        assert [line.count(b'"seq"') for line in read_lines(read_end, 50)] == [1] * 50


async def test_lines_filling_half_a_small_buffer_wake_the_writer_at_once() -> None:
    """A burst (a drain's lines) into a small buffer wakes the writer at once, not when the wake is
    due: lines that would fit if written are not dropped meanwhile."""
    async with serving_into_a_pipe(max_buffer_bytes=4096, wake_after_s=3600.0) as (bus, sink, _):
        bus.publish(_transition(0))
        await anyio.wait_all_tasks_blocked()
        assert sink.written == 0  # one line: its wake is due (in an hour)
        i = 1
        while sink._buffered < 2048:
            bus.publish(_transition(i))
            i += 1
        await wait_until(lambda: sink.written == i, 5)  # half the buffer: written at once
        assert sink.dropped == 0


async def test_a_line_of_the_daemons_own_state_wakes_the_writer_at_once_with_the_lines_before_it() -> None:
    """DAEMON_STARTED (and the other lines of :data:`WRITTEN_AT_ONCE`) is written at once, taking
    the lines waiting before it along: a kill within the wake's delay must not lose from the journal
    that the daemon started (a watchdog test lost it: SIGSTOP came right after READY)."""
    async with serving_into_a_pipe(wake_after_s=3600.0) as (bus, sink, read_end):
        bus.publish(_transition(0))
        await anyio.wait_all_tasks_blocked()
        assert sink.written == 0  # a session's line: its wake is due (in an hour)
        bus.publish(DaemonStarted(1, "x.toml"))
        await wait_until(lambda: sink.written == 2, 5)
        lines = read_lines(read_end, 2)
        assert [b'"SESSION_TRANSITION"' in line for line in lines] == [True, False]


def test_the_lines_written_at_once_are_the_daemons_notices_and_warnings_never_a_sessions() -> None:
    # each a wire name journald's table knows at notice or above; none a per-session event, whose
    # bursts (a take-over's, a drain's) must wait for the wake
    assert all(_EVENT_PRIORITIES[name] <= SD_NOTICE for name in WRITTEN_AT_ONCE)
    assert not WRITTEN_AT_ONCE & {"SESSION_TERMINATED", "SESSION_TRANSITION", "LOG_RECORD", "CONTROL_COMMAND"}
