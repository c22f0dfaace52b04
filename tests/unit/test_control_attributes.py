"""The control socket's ``attributes.set`` verb (supervisor/api/control_attributes.py): what it publishes as
CONTROL_COMMAND and what it raises, by session and by conversation, for each outcome of the attribute service.

The service is a stand-in answering as ``AttributeService.submit``/``submit_conversation`` do (an answer, a
refusal, a full queue); the daemon's own service is exercised end to end by
tests/integration/test_attributes_cli.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from supervisor.api.control_attributes import AttributeVerbs
from supervisor.api.protocol import ApiFault
from supervisor.attributes import AttributeService, Backpressured, Refused, SubmitAnswer
from supervisor.errors import ApiError

Published = list[tuple[str, str | None, str | None, ApiError | None]]


class Service:
    """Answers every submission with ``outcome``: an answer, or the error it raises."""

    def __init__(self, outcome: SubmitAnswer | ApiError) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, str]] = []

    async def submit(self, session_id: str, attributes: Mapping[str, object]) -> SubmitAnswer:
        self.calls.append(("session", session_id))
        return self._answer()

    async def submit_conversation(
        self, conversation_id: str, attributes: Mapping[str, object]
    ) -> SubmitAnswer:
        self.calls.append(("conversation", conversation_id))
        return self._answer()

    def _answer(self) -> SubmitAnswer:
        if isinstance(self.outcome, ApiError):
            raise self.outcome
        return self.outcome


def recorder() -> tuple[
    Published, Callable[[str, str | None, str | None], Callable[[ApiError | None], None]]
]:
    published: Published = []

    def publish(verb: str, session_id: str | None, target: str | None) -> Callable[[ApiError | None], None]:
        def done(error: ApiError | None) -> None:
            published.append((verb, session_id, target, error))

        return done

    return published, publish


ANSWER = SubmitAnswer("u-1", "wm-0", "c-1", (), 1)
BY_SESSION: dict[str, Any] = {"sessionId": "wm-0", "attributes": {"a": "1"}}
BY_CONVERSATION: dict[str, Any] = {"conversationId": "c-1", "attributes": {"a": "1"}}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("parameters", "session", "call"),
    [(BY_SESSION, "wm-0", ("session", "wm-0")), (BY_CONVERSATION, None, ("conversation", "c-1"))],
)
async def test_an_accepted_update_is_published_with_its_update_id_by_session_or_conversation(
    parameters: dict[str, Any], session: str | None, call: tuple[str, str]
) -> None:
    service = Service(ANSWER)
    published, publish = recorder()
    answer = await AttributeVerbs(cast(AttributeService, service)).set_attributes(publish, parameters)
    assert answer["updateId"] == "u-1" and service.calls == [call]
    assert published == [("attributes.set", session, "u-1", None)]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("parameters", "session", "target"),
    [(BY_SESSION, "wm-0", None), (BY_CONVERSATION, None, "conversation:c-1")],
)
@pytest.mark.parametrize(
    ("outcome", "fault"),
    [
        (Refused(ApiFault.NO_SUCH_SESSION, "no such session"), ApiFault.NO_SUCH_SESSION),
        (Backpressured("default", 3, 3, 2.0), ApiFault.BACKPRESSURE),
    ],
)
async def test_a_refusal_or_a_full_queue_is_published_against_its_session_or_conversation_and_raised(
    parameters: dict[str, Any], session: str | None, target: str | None, outcome: ApiError, fault: ApiFault
) -> None:
    published, publish = recorder()
    with pytest.raises(ApiError) as raised:
        await AttributeVerbs(cast(AttributeService, Service(outcome))).set_attributes(publish, parameters)
    assert raised.value.fault is fault
    ((verb, who, what, error),) = published
    assert (verb, who, what) == ("attributes.set", session, target)
    assert error is raised.value
    if isinstance(outcome, Backpressured):
        assert (
            raised.value is outcome
        )  # the queue's own hint (retryAfterSeconds) reaches the caller unchanged


@pytest.mark.anyio
async def test_a_cxone_conversation_is_refused_before_the_service_is_asked() -> None:
    service = Service(ANSWER)
    published, publish = recorder()
    with pytest.raises(ApiError) as raised:
        await AttributeVerbs(cast(AttributeService, service)).set_attributes(
            publish, {**BY_CONVERSATION, "platform": "cxone"}
        )
    assert raised.value.fault is ApiFault.UNSUPPORTED and service.calls == []
    assert [(v, s, t) for v, s, t, _e in published] == [("attributes.set", None, "conversation:c-1")]


@pytest.mark.anyio
@pytest.mark.parametrize("parameters", [BY_SESSION, BY_CONVERSATION])
async def test_a_daemon_without_attribute_updates_refuses_and_publishes_it(
    parameters: dict[str, Any],
) -> None:
    published, publish = recorder()
    with pytest.raises(ApiError) as raised:
        await AttributeVerbs(None).set_attributes(publish, parameters)
    assert raised.value.fault is ApiFault.UNSUPPORTED
    assert len(published) == 1 and published[0][3] is raised.value
