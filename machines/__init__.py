"""The explicit state machines (docs/machines.md): pure, synchronous, driven by classified events.

Nothing here does I/O (tests/unit/test_import_rules.py enforces it): inputs are
:class:`~supervisor.taxonomy.model.SdkErrorEvent` objects and calls from the runtime,
outputs are effects as plain data (:mod:`machines.effects`), most of them the typed events of
:mod:`supervisor.events` that the runtime publishes. Clock and RNG are injected.

How a runtime drives one session and its connect endpoint (the endpoint's circuit, pace and places
are driven by its :class:`~machines.endpoint.Endpoint` alone, through the attempt shell,
supervisor/attempts/shell.py)::

    session = SessionCore(session_id, clock, rng)          # state: connecting
    run(session.session_response(validation_error_or_None))
    run(session.failure(event))                            # any classified failure
    # on ScheduleReconnect(at=...): at that time
    answer = endpoint.ask()                                # (after any Wait it answers)
    run(answer.effects)
    run(session.reconnect_due(answer.retry_in_s if refused else None))
    # on Reconnect(attempt): connect; tell the endpoint the outcome, and the session
    run(endpoint.answered(ticket, failure_or_None, sent_at).effects)
    run(session.session_response(...))                     # or session.failure(event)
    run(session.stop())                                    # explicit stop / shutdown

Every input a state does not accept raises :class:`InputRejected`; a terminated session
accepts nothing (a full re-authentication builds a new SessionCore).
"""

from machines.circuit import Admission, Circuit, CircuitConfig, CircuitMachine
from machines.effects import (
    CircuitEffect,
    Effect,
    InputRejected,
    MachineError,
    Reconnect,
    ScheduleReconnect,
    SessionTerminated,
    TerminationReason,
)
from machines.registry import CircuitRegistry
from machines.session import SessionConfig, SessionCore, SessionMachine
from supervisor.vocabulary.states import CircuitState, SessionState

__all__ = [
    "Admission",
    "Circuit",
    "CircuitConfig",
    "CircuitEffect",
    "CircuitMachine",
    "CircuitRegistry",
    "CircuitState",
    "Effect",
    "InputRejected",
    "MachineError",
    "Reconnect",
    "ScheduleReconnect",
    "SessionConfig",
    "SessionCore",
    "SessionMachine",
    "SessionState",
    "SessionTerminated",
    "TerminationReason",
]
