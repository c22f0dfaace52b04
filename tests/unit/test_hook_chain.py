"""HookChain: several executor hooks as one; what a hook inherits from NoHooks is skipped."""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Any

from supervisor.boundary import SessionContext
from supervisor.events import RetryAttempt, RetryKind
from supervisor.rest.hooks import AttemptDetails, HookChain, NoHooks, OperationDetails
from supervisor.taxonomy import Channel, Platform

DETAILS = OperationDetails("op", SessionContext("s", Platform.GENESYS, Channel.REST), "c")
RETRY = RetryAttempt("s", RetryKind.OPERATION, 1, 0.5, "RATE_LIMITED", "rate_limit", "t", "op")


class Scoped(NoHooks):
    """Opens a scope around operations and attempts; records what it saw."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    @contextmanager
    def _scope(self, what: str) -> Any:
        self.log.append(f"{self.name} enter {what}")
        yield
        self.log.append(f"{self.name} exit {what}")

    def operation(self, details: OperationDetails) -> AbstractContextManager[object] | None:
        return self._scope("operation")

    def attempt(self, details: AttemptDetails) -> AbstractContextManager[object] | None:
        return self._scope("attempt")

    def retry_scheduled(self, details: OperationDetails, retry: RetryAttempt) -> None:
        self.log.append(f"{self.name} retry {retry.attempt}")


class Counting(NoHooks):
    """Overrides one notification only; everything else is NoHooks' own no-op."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def retry_scheduled(self, details: OperationDetails, retry: RetryAttempt) -> None:
        self.log.append("counting retry")


def test_scopes_nest_in_order_and_notifications_go_to_each_in_order() -> None:
    log: list[str] = []
    chain = HookChain([Scoped("a", log), Counting(log), Scoped("b", log)])
    scope = chain.operation(DETAILS)
    assert scope is not None
    with scope:
        chain.retry_scheduled(DETAILS, RETRY)
    assert log == [
        "a enter operation",
        "b enter operation",
        "a retry 1",
        "counting retry",
        "b retry 1",
        "b exit operation",
        "a exit operation",
    ]


def test_one_scope_is_handed_over_as_is_and_none_when_no_hook_opens_one() -> None:
    log: list[str] = []
    only = Scoped("only", log)
    chain = HookChain([Counting(log), only])
    scope = chain.attempt(AttemptDetails(DETAILS, 0))
    assert scope is not None and type(scope).__name__ == "_GeneratorContextManager"  # not wrapped
    assert HookChain([Counting(log), NoHooks()]).operation(DETAILS) is None


def test_methods_inherited_from_nohooks_are_not_called() -> None:
    calls: list[str] = []

    class Spy(NoHooks):
        def __getattribute__(self, name: str) -> Any:
            calls.append(name)
            return object.__getattribute__(self, name)

    chain = HookChain([Spy()])
    calls.clear()  # building the chain looks each method up once
    chain.operation(DETAILS)
    chain.classified(None)  # type: ignore[arg-type]
    chain.succeeded(DETAILS, None)
    chain.circuit(())
    assert calls == []
