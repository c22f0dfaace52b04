"""``[taxonomy] capture`` and ``shadow`` at run time: the classifier's observer and the capture file.

:class:`TaxonomyTap` is the :attr:`Classifier.observer <supervisor.taxonomy.Classifier.observer>` of
the daemon's one classifier: it is told every failure the daemon classified, with its envelope, on
the event loop, and must never block it. It

* hands the envelope, reduced to what routes it (:func:`supervisor.taxonomy.capture.reduce_envelope`:
  no message, id, secret or attribute value survives), to the :class:`CaptureFile`, whose daemon
  thread does the writes: the loop only appends to a bounded buffer;
* classifies it again with the shadow version (:class:`supervisor.taxonomy.shadow.Shadow`) and
  publishes ``SHADOW_DIVERGENCE`` at most once per (active code, shadow code) pair a minute, with a
  count; :meth:`serve` reports the counts still held when a pair's minute is over.

The capture file is mode 0600, under the state directory, appended to, and rotated: ``PATH`` and its
predecessors ``PATH.1`` … ``PATH.{captureFiles-1}``, each at most ``captureMaxBytes / captureFiles``,
so all of them together stay within ``captureMaxBytes``. A write that fails (a full disk, a read-only
directory, a rotation the filesystem refuses) turns capture off with one ``TAXONOMY_CAPTURE_FAILED``;
the sessions go on, as they do when the event lines cannot be written (supervisor/runtime/stdout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import anyio
import msgspec
from anyio.abc import TaskStatus

from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.config import TaxonomySettings
from supervisor.errors import ConfigError, TaxonomyError
from supervisor.events import ShadowDivergence, TaxonomyCaptureFailed
from supervisor.rest.executor import Sleep
from supervisor.taxonomy import RawError, SdkErrorEvent, Taxonomy, load_taxonomy
from supervisor.taxonomy.capture import CaptureShape, reduce_envelope
from supervisor.taxonomy.shadow import Divergence, Shadow

__all__ = ["CaptureFile", "TaxonomyTap", "capture_path", "state_directory"]

#: envelopes waiting for the writer thread, in bytes: past it a line is dropped and counted
PENDING_MAX_BYTES = 1024 * 1024
_encoder = msgspec.json.Encoder()


def state_directory(store_path: str | None, environ: Mapping[str, str]) -> Path | None:
    """``$STATE_DIRECTORY`` (its first entry: systemd's ``StateDirectory=``), else the directory of
    ``[store] path``, else None."""
    state = environ.get("STATE_DIRECTORY", "").split(":")[0].strip()
    if state:
        return Path(state)
    return Path(store_path).parent if store_path else None


def capture_path(capture: str, state_dir: Path | None) -> Path:
    """Where ``[taxonomy] capture`` writes: relative to the state directory, or an absolute path
    inside it; a ConfigError naming the key otherwise."""
    if state_dir is None:
        raise ConfigError(
            "taxonomy.capture: needs a state directory ($STATE_DIRECTORY, or [store] path's directory)"
        )
    base = Path(os.path.normpath(os.path.abspath(state_dir)))
    path = Path(os.path.normpath(base / capture))  # an absolute capture replaces base
    if path == base or base not in path.parents:
        raise ConfigError(f"taxonomy.capture: {capture}: must be a file under the state directory {base}")
    return path


class CaptureFile:
    """Lines appended to ``path`` by a daemon thread: 0600, rotated, bounded; stops at its first failure."""

    def __init__(
        self, path: Path, *, files: int, max_bytes: int, on_failure: Callable[[str, int], object]
    ) -> None:
        self.path = path
        self._files = files
        self._per_file = max(1, max_bytes // files)
        self._on_failure = on_failure
        self._pending: deque[bytes] = deque()
        self._pending_bytes = 0
        self._lock = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._size = 0
        #: lines written, lines dropped (the writer behind, a line larger than a file may be)
        self.written = 0
        self.dropped = 0
        #: why capture stopped (the first failure), or None
        self.failed: str | None = None

    # -- on the event loop: never blocks ---------------------------------------------------------------
    def write(self, line: bytes) -> None:
        with self._lock:
            if self._closed or self.failed is not None:
                return
            if self._pending_bytes + len(line) > PENDING_MAX_BYTES or len(line) > self._per_file:
                self.dropped += 1
                return
            self._pending.append(line)
            self._pending_bytes += len(line)
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_loop, name="taxonomy-capture", daemon=True)
                self._thread.start()
            self._lock.notify()

    def close(self, within_s: float = 2.0) -> None:
        """Write what is pending (at most ``within_s``), then stop the thread and close the file."""
        with self._lock:
            self._closed = True
            self._lock.notify()
            thread = self._thread
        if thread is not None:
            thread.join(within_s)

    # -- the writer thread -------------------------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._lock.wait()
                batch = list(self._pending)
                self._pending.clear()
                self._pending_bytes = 0
                if not batch:
                    break
            try:
                for line in batch:
                    self._append(line)
            except OSError as exc:
                self._fail(exc.strerror or type(exc).__name__)
                return
        self._close_fd()

    def _append(self, line: bytes) -> None:
        if self._fd is None:
            self._open()
        elif self._size and self._size + len(line) > self._per_file:
            self._rotate()
        assert self._fd is not None
        view = memoryview(line)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(line)
        self.written += 1

    def _open(self) -> None:
        # never through a symbolic link planted where the file goes; created 0600, and an existing
        # file is made 0600 too: what it holds is the daemon's own view of its failures
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(self.path, flags, 0o600)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(0, "not a regular file")
            if stat.S_IMODE(info.st_mode) != 0o600:
                os.fchmod(fd, 0o600)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._size = fd, info.st_size
        if self._size and self._size >= self._per_file:
            self._rotate()

    def _rotate(self) -> None:
        self._close_fd()
        names = [self.path, *(self.path.with_name(f"{self.path.name}.{i}") for i in range(1, self._files))]
        if len(names) == 1:
            os.unlink(self.path)  # one file: it starts over
        else:
            for older, newer in zip(reversed(names[1:]), reversed(names[:-1]), strict=True):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(newer, older)
        self._open()

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _fail(self, problem: str) -> None:
        with self._lock:
            self.failed = problem
            self._pending.clear()
            self._pending_bytes = 0
        self._close_fd()
        self._on_failure(problem, self.written)


class TaxonomyTap:
    """The classifier's observer: capture and shadow (module docstring)."""

    def __init__(
        self,
        settings: TaxonomySettings,
        *,
        active: Taxonomy,
        bus: EventBus,
        clock: Clock,
        state_dir: Path | None,
        headers: Iterable[str],
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self._bus = bus
        self._sleep = sleep
        self._clock = clock
        self._headers = tuple(headers)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = active
        self.shadow: Shadow | None = None
        if settings.shadow is not None:
            try:
                self.shadow = Shadow(load_taxonomy(settings.shadow), clock)
            except TaxonomyError as exc:
                raise TaxonomyError(f"taxonomy.shadow: {exc}") from None
        self.capture: CaptureFile | None = None
        if settings.capture is not None:
            self.capture = CaptureFile(
                capture_path(settings.capture, state_dir),
                files=settings.capture_files,
                max_bytes=settings.capture_max_bytes,
                on_failure=self._capture_failed,
            )
        self._shape = self._shape_of(active)

    @property
    def enabled(self) -> bool:
        return self.capture is not None or self.shadow is not None

    @property
    def divergences(self) -> Mapping[tuple[str, str], int]:
        """Every divergence so far, by (active code, shadow code): the metric."""
        return {} if self.shadow is None else self.shadow.counter.totals

    def _shape_of(self, active: Taxonomy) -> CaptureShape:
        # what the loaded taxonomies can match: a captured line routes as the failure did under both
        loaded = [active] if self.shadow is None else [active, self.shadow.taxonomy]
        return CaptureShape.of(loaded, self._headers)

    def use_taxonomy(self, taxonomy: Taxonomy) -> None:
        """The active version switched (``ctl taxonomy use``, a reload): capture what it matches."""
        self._active = taxonomy
        self._shape = self._shape_of(taxonomy)

    # -- the observer (on the event loop) ----------------------------------------------------------------
    def __call__(self, raw: RawError, event: SdkErrorEvent) -> None:
        if self._loop is None:
            with contextlib.suppress(RuntimeError):
                self._loop = asyncio.get_running_loop()
        capture = self.capture
        if capture is not None and capture.failed is None:
            capture.write(_encoder.encode(reduce_envelope(raw, self._shape)) + b"\n")
        shadow = self.shadow
        if shadow is not None:
            report = shadow.compare(raw, event)
            if report is not None:
                self._publish(report, shadow)

    def _publish(self, report: Divergence, shadow: Shadow) -> None:
        self._bus.publish(
            ShadowDivergence(
                self._active.version,
                shadow.taxonomy.version,
                report.active_code,
                report.shadow_code,
                report.count,
                report.changed,
                shadow.counter.period_s,
                timestamp=iso_utc(self._clock.time()),
            )
        )

    def _capture_failed(self, problem: str, written: int) -> None:
        # on the writer thread: the event goes out on the loop
        assert self.capture is not None
        event = TaxonomyCaptureFailed(
            str(self.capture.path), problem, written, timestamp=iso_utc(self._clock.time())
        )
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop is shutting down
            loop.call_soon_threadsafe(self._bus.publish, event)

    # -- the service -----------------------------------------------------------------------------------------
    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Report the divergences held when their pair's minute is over (only with a shadow)."""
        self._loop = asyncio.get_running_loop()
        task_status.started()
        shadow = self.shadow
        if shadow is None:
            return
        while True:
            await self._sleep(shadow.counter.period_s / 4)
            for report in shadow.due():
                self._publish(report, shadow)

    def report_held(self) -> None:
        """Publish every divergence still held, whatever its minute (the daemon is stopping; on the loop)."""
        if self.shadow is not None:
            for report in self.shadow.counter.drain():
                self._publish(report, self.shadow)

    def close(self) -> None:
        """Write what capture holds (bounded), then stop it (blocking: called off the loop)."""
        if self.capture is not None:
            self.capture.close()
