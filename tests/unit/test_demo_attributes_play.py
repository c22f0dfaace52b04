"""The attributes scenario's burst when a session ends under it: its submissions are refused for good
(``Refused``), which the play counts and the outcome check names, instead of escaping the demo as a
traceback. The scenario itself runs in tests/integration/test_demo_scenarios.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from supervisor.attributes import Refused
from supervisor.demo.attributes_play import BURST, AttributesPlay, attributes_delivered
from supervisor.store import UpdateOutcome
from supervisor.vocabulary import ApiFault

pytestmark = pytest.mark.anyio


class Service:
    """Takes every submission but those of ``ended`` (a terminated session); everything settles at once."""

    def __init__(self, ended: str) -> None:
        self.ended = ended
        self.taken: list[str] = []

    async def submit(self, session_id: str, attributes: Mapping[str, object]) -> None:
        if session_id == self.ended:
            raise Refused(ApiFault.SESSION_TERMINATED, f"session '{session_id}' is terminated")
        self.taken.append(session_id)

    async def outcomes(self) -> dict[str, UpdateOutcome]:
        return {}


class Conversations:
    def get(self, conversation_id: str) -> None:
        return None


class State:
    conversations = Conversations()


class Genesys:
    state = State()


async def test_a_session_ended_under_the_burst_is_counted_and_named() -> None:
    play = AttributesPlay({"wm-0": "c-0", "wm-1": "c-1", "wm-2": "c-2"})
    service = Service(ended="wm-1")
    await play.run(service, Genesys(), fast=True)  # type: ignore[arg-type]
    assert play.rejected == 1 and play.finished
    assert play.acknowledged == BURST and "wm-1" not in service.taken
    summary: dict[str, Any] = {
        "attributes": {
            "lost": 0,
            "rejected": play.rejected,
            "notAsSubmittedNorFlagged": 0,
            "silentlyDropped": 1,
            "repaired": 1,
            "flagged": 0,
            "refused": 1,
        }
    }
    assert attributes_delivered(summary) == "1 submission(s) refused for good: a session ended"
    summary["attributes"]["rejected"] = 0
    assert attributes_delivered(summary) is None
