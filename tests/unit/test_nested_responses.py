"""A server answer nested thousands deep is a malformed response, never a RecursionError."""

from __future__ import annotations

import random
from typing import Any

import anyio
import httpx
import pytest

from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.clock import FakeClock
from supervisor.config import Secret
from supervisor.errors import OperationError, TransportFailure
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.rest.tokens import GenesysClientCredentials
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.vocabulary import EndpointId

DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_deep_success_body_is_malformed_response() -> None:
    clock = FakeClock()
    executor = RetryExecutor(
        Classifier(load_taxonomy("v1"), clock),
        Attempts(Endpoints(clock, CircuitRegistry(clock))),
        clock,
        rng=random.Random(1),
    )

    async def main() -> Any:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=DEEP))
        async with httpx.AsyncClient(transport=transport) as client:
            pipeline = RequestPipeline(client, executor)
            ctx = SessionContext("s-1", Platform.GENESYS, Channel.REST)
            with pytest.raises(OperationError) as info:
                await pipeline.request(
                    "GET",
                    "http://api.test/api/v2/conversations/c",
                    ctx=ctx,
                    circuit=EndpointId(Platform.GENESYS, "x"),
                    check=ResponseCheck(),
                )
            return info.value.event

    event = anyio.run(main)
    assert event.code == "MALFORMED_RESPONSE"


def test_a_deep_token_answer_is_a_transport_failure_not_a_crash() -> None:
    async def main() -> RawError:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=DEEP))
        async with httpx.AsyncClient(transport=transport) as client:
            source = GenesysClientCredentials(client, "http://login.test", "id", Secret("s"))
            with pytest.raises(TransportFailure) as info:
                await source.fetch(None)
            raw = info.value.raw
            assert isinstance(raw, RawError)
            return raw

    raw = anyio.run(main)
    assert Classifier(load_taxonomy("v1")).classify(raw).code == "MALFORMED_RESPONSE"
