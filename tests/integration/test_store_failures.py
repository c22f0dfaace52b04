"""A store the daemon cannot use: corrupt, unreadable, a full disk, a read-only state directory (docs/store.md).

docs/robustness.md, "Fault matrix", row 21: updates are refused clearly, no crash loop, the error is surfaced to callers.
In every case the daemon (a child process) keeps its sessions running, says once on stderr which
file and what is wrong, publishes ``STORE_DEGRADED``, and ``ctl attributes set`` exits 1 with one line
naming the file: nothing is acknowledged that could not be persisted.

A full disk is a small tmpfs mounted for the test when this machine allows it (root and mount);
the disk filled by the store's own WAL and the start on a full disk need one and are
skipped elsewhere;
elsewhere the daemon's test-only hook makes every commit fail as SQLite fails on a full disk
(``SESSION_SUPERVISOR_TEST_STORE_FULL_WHEN``). A read-only directory is a tmpfs mounted read-only,
or a directory without write permission for a user who is not root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import DesiredSession, DesiredState, SqliteStore
from supervisor.store.testhooks import FULL_ENV
from tests.harness.config import daemon_config
from tests.harness.process import CLI, Daemon, integrity, running_daemon
from tests.harness.waits import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=41),
]


def file_size(path: str) -> int:
    return os.stat(path).st_size


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-fail-", dir="/tmp") as d:
        yield Path(d)


@contextlib.contextmanager
def tmpfs(size_kib: int, *, read_only: bool = False) -> Iterator[Path | None]:
    """A tmpfs of ``size_kib`` mounted for the test, or None where mounting is not allowed."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield None
        return
    directory = Path(tempfile.mkdtemp(prefix="ss-fs-", dir="/tmp"))
    options = f"size={size_kib}k,mode=0700" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], capture_output=True
    )
    if mounted.returncode != 0:
        directory.rmdir()
        yield None
        return
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)
        directory.rmdir()


async def set_attributes(daemon: Daemon, *pairs: str) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [*CLI, "ctl", "--socket", str(daemon.control), "attributes", "set", "wm-0", *pairs, "--json"],
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def degraded_at_start(daemon: Daemon, store: Path) -> None:
    # said once, as an event line of the daemon's own (it serves: nothing goes to stderr as text)
    (event,) = await daemon.arrived("STORE_DEGRADED")
    said = [r for r in daemon.named("LOG_RECORD") if r["message"].startswith("store:")]
    assert len(said) == 1 and said[0]["message"].startswith(f"store: {store}: "), said
    assert (said[0]["logger"], said[0]["level"]) == ("session-supervisor", "warning")
    assert "store:" not in daemon.err
    assert event["path"] == str(store)


async def refused_naming(
    daemon: Daemon, store: Path, problem: str, answer: tuple[int, str, str] | None = None
) -> None:
    code, out, err = answer if answer is not None else await set_attributes(daemon, "survey=yes")
    assert code == 1 and err.count("\n") == 1, (code, err)
    assert err.startswith("session-supervisor: error: io.sessionsupervisor.control.v1.StoreUnavailable: ")
    assert str(store) in err and problem in err
    assert '"accepted":false' in out
    # the sessions keep running
    assert daemon.process.returncode is None


@pytest.mark.parametrize("kind", ["corrupt", "unreadable"])
async def test_a_corrupt_or_unreadable_store_refuses_updates_and_the_sessions_run(
    genesys_sim: GenesysSimulator, workdir: Path, kind: str
) -> None:
    conv = genesys_sim.create_conversation()
    store = workdir / "store.sqlite3"
    if kind == "corrupt":
        store.write_bytes(b"not a database\n" * 500)
        problem = "corrupt or not a SQLite database"
    else:
        store.mkdir()  # a path the daemon cannot open as a file
        problem = "not a regular file"
    before = store.read_bytes() if store.is_file() else None
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", conv.id)], store=store)
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        await degraded_at_start(daemon, store)
        await refused_naming(daemon, store, problem)
        assert await daemon.stop() == 0
    if before is not None:
        assert store.read_bytes() == before  # never "repaired" by overwriting it


@pytest.mark.parametrize("disk", ["small-tmpfs", "injected-sqlite-full"])
async def test_a_full_disk_refuses_what_it_cannot_persist_then_recovers(
    genesys_sim: GenesysSimulator, workdir: Path, disk: str
) -> None:
    conv = genesys_sim.create_conversation()
    with tmpfs(640) if disk == "small-tmpfs" else contextlib.nullcontext() as small:
        if disk == "small-tmpfs" and small is None:
            pytest.skip("this machine does not let the test mount a tmpfs (the injected variant runs)")
        base = small if small is not None else workdir
        store = base / "store.sqlite3"
        flag = workdir / "disk-full"
        filler = base / "filler"
        config = daemon_config(
            genesys_sim.urls, workdir, [("wm-0", conv.id)], store=store, queue_depth=10_000
        )
        async with running_daemon(config, env={FULL_ENV: str(flag)} if small is None else {}) as daemon:
            await daemon.wait_ready(1)
            assert not daemon.named("STORE_DEGRADED")
            code, _, err = await set_attributes(daemon, "survey=first")
            assert code == 0, err
            if small is None:
                flag.touch()
            else:
                # leave room for a few pages only, then write until SQLite meets ENOSPC
                free = shutil.disk_usage(small).free
                filler.write_bytes(b"\0" * max(0, free - 96 * 1024))
            big = [f"k{i}={'x' * 4000}" for i in range(12)]
            for _ in range(40):
                answer = await set_attributes(daemon, *big)
                if answer[0] != 0:
                    break
            await refused_naming(daemon, store, "the disk is full", answer)
            await wait_until(lambda: bool(daemon.named("STORE_DEGRADED")), 10)
            assert "the disk is full" in daemon.named("STORE_DEGRADED")[0]["problem"]
            # the disk is freed: updates are acknowledged again
            if small is None:
                flag.unlink()
            else:
                filler.unlink()
            code, out, err = await set_attributes(daemon, "survey=after")
            assert code == 0 and '"accepted":true' in out, err
            await wait_until(lambda: bool(daemon.named("STORE_RECOVERED")), 10)
            assert await daemon.stop() == 0
        assert integrity(store) == "ok"


async def test_a_read_only_state_directory_refuses_updates_and_the_sessions_run(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    conv = genesys_sim.create_conversation()
    with tmpfs(256, read_only=True) as mounted:
        if mounted is not None:
            state = mounted
        elif os.geteuid() != 0:
            state = workdir / "state"
            state.mkdir(mode=0o500)
        else:
            pytest.skip("root without mount: no directory is read-only to this user")
        store = state / "store.sqlite3"
        config = daemon_config(genesys_sim.urls, workdir, [("wm-0", conv.id)], store=store)
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(1)
            await degraded_at_start(daemon, store)
            await refused_naming(daemon, store, "cannot create it for writing")
            assert await daemon.stop() == 0


# -- a WAL that filled the disk; a start on a full disk --------------------------------


async def test_a_disk_filled_by_the_stores_own_wal_is_checkpointed_and_the_store_recovers() -> None:
    """The WAL grows with every commit until a commit crosses SQLite's 1,000-page checkpoint mark; on
    a disk with less room than that, the WAL fills it first, and formerly every commit failed
    from then on (no commit ever got to the checkpoint). Now a commit refused for a full disk
    checkpoints (the WAL's pages move into the file, the WAL is truncated) and is tried again."""
    with tmpfs(1024) as small:
        if small is None:
            pytest.skip("this machine does not let the test mount a tmpfs")
        path = small / "store.sqlite3"
        moves: list[str | None] = []
        store = await SqliteStore.open(path, synchronous="normal", on_health=moves.append)
        try:
            # room for 40 pages of WAL: far less than the 1,000 pages of the automatic checkpoint
            free = shutil.disk_usage(small).free
            (small / "filler").write_bytes(b"\0" * (free - 160 * 1024))
            for i in range(400):  # each commit appends its pages to the WAL: megabytes in all
                await store.set_desired(
                    DesiredSession("wm-0", "genesys", DesiredState.RUNNING, None, float(i))
                )
            assert moves == []  # no commit was refused, the store never degraded
            assert (await store.desired_sessions())["wm-0"].updated_at == 399.0
            assert file_size(f"{path}-wal") <= 160 * 1024
        finally:
            await store.aclose()
        assert integrity(path) == "ok"


async def test_a_start_on_a_full_disk_reads_the_store_and_reports_it_degraded(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    """The store cannot be opened for writing (no room even for its shared-memory file): the daemon
    reads it without writing, so a session `ctl stop` stopped stays down, publishes STORE_DEGRADED,
    refuses attribute updates, and the file is left as it was. Formerly the store was simply
    dropped: every configured session started, the stopped one too."""
    conv = genesys_sim.create_conversation()
    with tmpfs(640) as small:
        if small is None:
            pytest.skip("this machine does not let the test mount a tmpfs")
        store = small / "store.sqlite3"
        opened = await SqliteStore.open(store, synchronous="normal")
        await opened.set_desired(DesiredSession("wm-1", "genesys", DesiredState.STOPPED, "ctl stop", 1.0))
        await opened.aclose()
        before = store.read_bytes()
        (small / "filler").write_bytes(b"\0" * shutil.disk_usage(small).free)
        assert shutil.disk_usage(small).free == 0
        config = daemon_config(genesys_sim.urls, workdir, [("wm-0", conv.id), ("wm-1", None)], store=store)
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(1)
            await degraded_at_start(daemon, store)
            (event,) = daemon.named("STORE_DEGRADED")
            assert "the disk is full" in event["problem"] and "read it without writing" in event["problem"]
            started = {r["machineId"] for r in await daemon.arrived("SESSION_TRANSITION")}
            assert started == {"wm-0"}  # wm-1 stays stopped, as the store says
            await refused_naming(daemon, store, "the disk is full")
            assert await daemon.stop() == 0
        assert store.read_bytes() == before
