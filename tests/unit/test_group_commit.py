"""GroupCommit (supervisor/runtime/group_commit.py): items that arrive while a commit runs are committed
together by the next one; every caller returns once its own group is committed; a cancelled writer
still commits what was gathered; a failing commit strands nobody. Driven by events, never by timers."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.lowlevel
import pytest

from supervisor.runtime.group_commit import GroupCommit

pytestmark = pytest.mark.anyio


class Gated:
    """A commit function that records each group and waits for the test to let it finish."""

    def __init__(self, fail_first: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.fail_first = fail_first

    async def __call__(self, items: Sequence[str]) -> None:
        self.groups.append(list(items))
        self.started.set()
        await self.release.wait()
        if self.fail_first and len(self.groups) == 1:
            raise RuntimeError("refused")


async def settle() -> None:
    for _ in range(10):
        await anyio.lowlevel.checkpoint()


async def test_what_arrives_during_a_commit_is_committed_together_by_the_next_one() -> None:
    commit = Gated()
    groups = GroupCommit(commit)
    returned: list[str] = []

    async def write(item: str) -> None:
        await groups.write(item)
        returned.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, "a")
        await commit.started.wait()  # "a"'s commit is running: the others gather behind it
        for item in ("b", "c", "d"):
            tg.start_soon(write, item)
        await settle()
        assert returned == [] and commit.groups == [["a"]]
        commit.release.set()
    assert commit.groups == [["a"], ["b", "c", "d"]]
    assert groups.groups == 2 and sorted(returned) == ["a", "b", "c", "d"]


async def test_no_caller_returns_before_its_own_group_is_committed() -> None:
    committed: list[str] = []
    gate = anyio.Event()

    async def commit(items: Sequence[str]) -> None:
        if items == ["a"]:
            await gate.wait()
        committed.extend(items)

    groups = GroupCommit(commit)
    seen: dict[str, list[str]] = {}

    async def write(item: str) -> None:
        await groups.write(item)
        seen[item] = list(committed)  # what was committed when this caller came back

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, "a")
        await settle()
        tg.start_soon(write, "b")
        await settle()
        assert seen == {}  # "b" waits for its own group, which waits for "a"'s commit
        gate.set()
    assert seen["a"] == ["a"] or seen["a"] == ["a", "b"]
    assert "b" in seen["b"]


async def test_a_writer_cancelled_mid_commit_still_commits_the_group_gathered_meanwhile() -> None:
    commit = Gated()
    groups = GroupCommit(commit)
    done: list[str] = []

    async def later(item: str) -> None:
        await groups.write(item)
        done.append(item)

    async with anyio.create_task_group() as outer:
        with anyio.CancelScope() as writer_scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(groups.write, "a")
                await commit.started.wait()
                outer.start_soon(later, "b")
                await settle()
                writer_scope.cancel()  # the writer's session is handed over mid-commit
                commit.release.set()
    assert commit.groups == [["a"], ["b"]] and done == ["b"]


async def test_a_commit_that_fails_strands_none_of_its_callers_and_the_next_group_is_written() -> None:
    commit = Gated(fail_first=True)
    groups = GroupCommit(commit)
    outcome: dict[str, str] = {}

    async def write(item: str) -> None:
        try:
            await groups.write(item)
        except RuntimeError as exc:
            outcome[item] = f"raised {exc}"
        else:
            outcome[item] = "returned"

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, "a")
        await commit.started.wait()
        tg.start_soon(write, "b")
        await settle()
        commit.release.set()
    # the writer hears its commit's failure; "b", gathered meanwhile, was still committed
    assert outcome == {"a": "raised refused", "b": "returned"}
    assert commit.groups == [["a"], ["b"]]
    await groups.write("c")  # nothing left stuck: the next write is a writer of its own
    assert commit.groups[-1] == ["c"]
