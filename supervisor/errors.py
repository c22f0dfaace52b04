"""The one exception tree of session-supervisor.

::

    SupervisorError                      (every error we raise on purpose)
    ├── ConfigError                      a config file is invalid: names file, key, problem
    ├── TaxonomyError                    a taxonomy file is invalid: names file, key, problem
    ├── EnvelopeError                    a RawError envelope is invalid: names the field
    ├── SimulatorError                   a simulator could not start or was misused
    ├── SessionError                     a supervised session failed (runtime)
    │   ├── TransportFailure             a transport met a failure: carries the RawError to classify
    │   │   └── ConnectionLost           the connection under an in-band request is gone
    │   ├── OperationError               an operation failed for good: carries its SdkErrorEvent
    │   └── CircuitOpenError             the endpoint's circuit refused the call: carries retry_in_s
    ├── ApiError                         a typed error of the socket API: a varlink error name + parameters
    ├── ApiUnavailable                   the daemon's socket cannot be reached, or it refused us
    └── StoreError                       the durable store cannot open, read or persist: names the file

Errors from libraries (httpx, websockets, OSError, ...) are never raised past the
boundary that met them: transports turn them into RawError envelopes, which the
taxonomy classifies.
"""

from __future__ import annotations


class SupervisorError(Exception):
    """Root of every error session-supervisor raises on purpose."""


class ConfigError(SupervisorError):
    """A configuration file is invalid; the message names the file, the key and the problem."""


class TaxonomyError(SupervisorError):
    """A taxonomy file is invalid; the message names the file, the key and the problem."""


class EnvelopeError(SupervisorError, ValueError):
    """A RawError envelope is not valid; the message names the field and the problem."""


class SimulatorError(SupervisorError):
    """A simulator could not start or was asked something it cannot do."""


class SessionError(SupervisorError):
    """A supervised session failed in a way the runtime reports to its caller."""


class TransportFailure(SessionError):
    """A transport met a failure; ``raw`` is the RawError envelope the runtime classifies.

    Transports decide nothing (docs/architecture.md, "Data flows one way"): they only describe.
    """

    def __init__(self, raw: object, message: str = "") -> None:
        self.raw = raw
        super().__init__(message or "transport failure")


class ConnectionLost(TransportFailure):
    """The connection an in-band request rode on ended before the request's answer came.

    The retry executor classifies ``raw`` and ends the operation without retrying it on a dead
    connection; the transport reports the connection's end to the runtime, which reconnects.
    """


class OperationError(SessionError):
    """An operation failed for good (PERMANENT, fail-fast, or its budget spent).

    ``event`` is the SdkErrorEvent that decided it; ``exhausted`` is True when retries ran out.
    """

    def __init__(self, event: object, *, exhausted: bool = False, published: bool = False) -> None:
        self.event = event
        self.exhausted = exhausted
        # the retry executor already published the event (SDK_ERROR_CLASSIFIED); an event a
        # transport named itself (a drift, a session id mismatch) is the runtime's to publish
        self.published = published
        code = getattr(event, "code", "?")
        super().__init__(f"operation failed: {code}" + (" (retries exhausted)" if exhausted else ""))


class CircuitOpenError(SessionError):
    """The endpoint's circuit is open (or its one probe is out); try again in ``retry_in_s``."""

    def __init__(self, circuit_id: str, retry_in_s: float) -> None:
        self.circuit_id = circuit_id
        self.retry_in_s = retry_in_s
        super().__init__(f"circuit {circuit_id} is open; retry in {retry_in_s:.1f} s")


class ApiError(SupervisorError):
    """A typed error of the socket API (docs/socket-api.md): a varlink error ``name`` and ``parameters``.

    Raised by the services to answer a call with an error reply (``fatal``: the connection is
    closed after it, the stream cannot continue), and by the client for an error reply it got.
    """

    def __init__(
        self, name: str, parameters: dict[str, object] | None = None, *, fatal: bool = False
    ) -> None:
        self.name = name
        self.parameters: dict[str, object] = dict(parameters or {})
        self.fatal = fatal
        problem = self.parameters.get("problem")
        super().__init__(f"{name}: {problem}" if problem else name)


class ApiUnavailable(SupervisorError):
    """The daemon's socket cannot be reached (not running, wrong path) or it closed on us (refused)."""


class CallNotSent(SupervisorError, ValueError):
    """A call the client refuses to send: not UTF-8 text, or larger than the daemon reads in one message."""


class StoreError(SupervisorError):
    """The durable store cannot open, read or persist; one line naming the file and the problem.

    ``path`` is the store's file; ``problem`` the reason in words (``the disk is full``). The
    daemon keeps its sessions running and refuses to acknowledge what it cannot persist.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def located(message: str, prefix: str = "") -> tuple[str, str]:
    """A decoding error's location and problem: ``("codes.X.class", "expected ...")``.

    msgspec says ``Expected `str`, got `int` - at `$.codes.X.class```; every reader of a
    file (the configuration, a taxonomy, the simulators' fault API) turns that into one line
    ``origin: path: problem``. ``prefix`` is prepended to the path (an entry decoded on its
    own); the path is ``""`` when the message names none.
    """
    text, sep, where = message.rpartition(" - at `")
    if not sep:
        text, where = message, ""
    path = where.rstrip("`").removeprefix("$").lstrip(".")
    path = ".".join(p for p in (prefix, path) if p).replace(".[", "[")
    problem = text[:1].lower() + text[1:]
    return path, problem
