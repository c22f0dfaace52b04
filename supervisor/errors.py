"""The one exception tree of session-supervisor.

Every exception class of supervisor/ and machines/ is drawn here, under its base
(tests/unit/test_exceptions_exhaustive.py parses this drawing and fails on a class that is not in
it, or drawn under another base). Classes of this module are named bare; the others by their
module under ``supervisor.`` (``attributes.model.Refused``) or ``machines.``::

    SupervisorError                      (every error we raise on purpose)
    ├── ConfigError                      a config file is invalid: names file, key, problem
    ├── TaxonomyError                    a taxonomy file is invalid: names file, key, problem
    ├── EnvelopeError                    a RawError envelope is invalid: names the field (a ValueError too)
    ├── SimulatorError                   a simulator could not start or was misused
    ├── SessionError                     a supervised session failed (runtime)
    │   ├── TransportFailure             a transport met a failure: carries the RawError to classify
    │   │   └── ConnectionLost           the connection under an in-band request is gone
    │   ├── OperationError               an operation failed for good: carries its SdkErrorEvent
    │   │   └── SendUnconfirmed          a message got no answer and was not found after: it may have arrived
    │   ├── CircuitOpenError             the endpoint's circuit refused the call: carries retry_in_s
    │   ├── ChannelLimit                 a session would need a 21st notifications channel on its client
    │   ├── Fenced                       a write for a shard past its lease deadline: refused, the shard lost here
    │   └── SdkError                     a library call failed for good: carries its SdkErrorEvent
    ├── ApiError                         a typed error of the socket API: an ApiFault + parameters
    │   ├── attributes.model.Refused     an attribute update refused for good (its fault says why)
    │   └── attributes.model.Backpressured  the tenant's queue is full: try again later
    ├── ApiUnavailable                   the daemon's socket cannot be reached, or it refused us
    ├── CallNotSent                      a call the client refuses to send (a ValueError too)
    ├── StoreError                       the durable store cannot open, read or persist: names the file
    │   └── LeaseLost                    a write refused: this member no longer holds the shard's lease at that epoch
    ├── NotOwner                         a session whose shard this process does not own: ask its owner
    ├── machines.effects.MachineError    a machine was misused
    │   └── machines.effects.InputRejected  an input the machine's state does not accept
    ├── demo.runner.DemoRefused          the demo cannot run as asked on this machine
    └── demo.runner.DemoTimedOut         the demo outlasted its --timeout

Internal signals: each is caught by the code that called its raiser and turned into one of the
above or into an answer (a simulator's HTTP error), so none reaches a user as itself::

    Exception
    ├── attributes.platform.OutcomeUnknown  a write may have been applied: read back, never re-send
    ├── transports.webmessaging._Unanswered  a message got no answer: look for it before any re-send
    ├── store.model.ResolveRefused       a mismatch that cannot be resolved as asked (an ApiFault above)
    ├── store.schema.NewerSchema         the store file is a newer release's (a StoreError above)
    ├── store.schema.NotOurs             the file is not our store (a StoreError above)
    ├── cli.sim_cmd._OutputError         the ready line could not be written (the command's exit)
    ├── sim.cxone.model.SimStateError    a request the CXone fake refuses (its HTTP error)
    ├── sim.cxone.oidc._Refused          an OAuth refusal (its HTTP error)
    ├── sim.cxone.tokens.GrantError      an OAuth error, RFC 6749 §5.2 (its HTTP error)
    └── sim.genesys.rest.BadRequest      a malformed request (answered 400)
    ValueError
    ├── taxonomy.loader.LimitError       a file over its size cap (a ConfigError or TaxonomyError above)
    │   └── taxonomy.loader.NotRegularFile  not a regular file (a FIFO, a device)
    ├── sim.bodies.MalformedBody         a body or frame a simulator cannot use (answered 400)
    └── sim.cxone.wire.BodyError         a malformed request body (answered 400 invalid_request)
    aiohttp.web_exceptions.HTTPRequestTimeout
    └── sim.serving._BodyTimeout         a body that did not arrive in time (a TimeoutError too)

Errors from libraries (httpx, websockets, OSError, ...) are never raised past the boundary that met
them (supervisor/boundary.py: one mapping per library): they become RawError envelopes, carried by a
TransportFailure raised ``from`` the library's exception, which the taxonomy classifies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from supervisor.vocabulary.faults import ApiFault

if TYPE_CHECKING:
    # annotations only: the taxonomy is a floor above (tests/unit/test_import_rules.py, TYPE_ONLY)
    from supervisor.taxonomy import RawError, SdkErrorEvent


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

    def __init__(self, raw: RawError, message: str = "") -> None:
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

    def __init__(self, event: SdkErrorEvent, *, exhausted: bool = False, published: bool = False) -> None:
        self.event = event
        self.exhausted = exhausted
        # the retry executor already published the event (SDK_ERROR_CLASSIFIED); an event a
        # transport named itself (a drift, a session id mismatch) is the runtime's to publish
        self.published = published
        super().__init__(f"operation failed: {event.code}" + (" (retries exhausted)" if exhausted else ""))


class SendUnconfirmed(OperationError):
    """A message got no answer, and was found neither echoed nor in the guest history when it was
    looked for (or the history could not be read): it may or may not have arrived. ``client_id`` is
    what it was sent with; ``resent``: it was sent a second time, with that id."""

    def __init__(self, failure: OperationError, client_id: str, *, resent: bool) -> None:
        super().__init__(failure.event, exhausted=failure.exhausted, published=failure.published)
        self.client_id = client_id
        self.resent = resent


class CircuitOpenError(SessionError):
    """The endpoint's circuit is open (or its one probe is out); try again in ``retry_in_s``."""

    def __init__(self, circuit_id: str, retry_in_s: float, *, isolated: bool = False) -> None:
        self.circuit_id = circuit_id
        self.retry_in_s = retry_in_s
        #: an operator isolated the endpoint (``ctl circuit isolate``): nothing failed
        self.isolated = isolated
        held = "is isolated by an operator" if isolated else "is open"
        super().__init__(f"circuit {circuit_id} {held}; retry in {retry_in_s:.1f} s")


class ChannelLimit(SessionError):
    """A notifications session would need one more channel than its OAuth client may hold.

    Genesys allows ``channels`` notification channels per user and app, ``topics`` topics each
    (docs/platforms.md, "Genesys Cloud notifications"): the daemon never creates a channel past the
    limit (the platform would remove the oldest, another session's), so the session that would need
    it is refused. A contract: the socket API answers ``ChannelLimit`` (docs/socket-api.md).
    """

    def __init__(self, client: str, channels: int, topics: int) -> None:
        self.client = client
        self.channels = channels
        self.topics = topics
        super().__init__(
            f"OAuth client '{client}' would need more than {channels} notification channels "
            f"of {topics} topic(s) each (the platform's limit)"
        )


class Fenced(SessionError):
    """A byte for a session whose shard's lease deadline has passed (or every shard's, when the event
    loop stalled past its bound): nothing was written, and the shard's sockets are aborted.

    Raised at the network write itself (supervisor/runtime/fence.py, docs/runtime.md, "The fence at
    the write"). The session treats its shard as lost here: it reconnects nothing on that shard until
    the lease is renewed or the shard acquired again. ``shards`` are the shards the write was for;
    ``deadline`` the earliest of their deadlines (CLOCK_BOOTTIME seconds; None: not held, or the loop
    stalled).
    """

    def __init__(self, shards: tuple[int, ...], deadline: float | None) -> None:
        self.shards = shards
        self.deadline = deadline
        named = ", ".join(str(s) for s in shards) or "none"
        when = "not held" if deadline is None else f"its lease deadline {deadline:.3f} passed"
        super().__init__(f"write fenced: shard {named}, {when}")


class SdkError(SessionError):
    """A call through the library (``supervisor.http``, ``supervisor.resilient``) failed for good.

    ``event`` is the :class:`~supervisor.taxonomy.model.SdkErrorEvent` that decided it (the seed's
    fields: ``event.as_json()``); ``outcome_unknown`` is True when the request may have been applied
    and was not sent again (a 504 on a create): read back before sending it again.
    """

    def __init__(
        self, event: SdkErrorEvent, *, outcome_unknown: bool = False, exhausted: bool = False
    ) -> None:
        self.event = event
        self.outcome_unknown = outcome_unknown
        self.exhausted = exhausted
        what = " (outcome unknown: not sent again)" if outcome_unknown else ""
        if exhausted:
            what = " (retries exhausted)"
        super().__init__(f"{event.platform or 'call'} failed: {event.code}{what}")


class ApiError(SupervisorError):
    """A typed error of the socket API (docs/socket-api.md): its :class:`ApiFault` and ``parameters``.

    Raised by the domain and the services to answer a call with an error reply (``fatal``: the
    connection is closed after it, the stream cannot continue): the fault is one member of the one
    enum of faults, whose value is the varlink error name on the wire; a string is refused
    (supervisord's ``xmlrpc.Faults``: one table every handler raises from). A client raises
    :meth:`received` for an error reply it got, whose name may be a newer daemon's (``fault`` None).
    """

    def __init__(
        self, fault: ApiFault, parameters: Mapping[str, object] | None = None, *, fatal: bool = False
    ) -> None:
        if not isinstance(fault, ApiFault):
            raise TypeError(f"an ApiError's fault is an ApiFault, got {fault!r}")
        self._init(fault.value, fault, parameters, fatal)

    @classmethod
    def received(cls, name: str, parameters: Mapping[str, object] | None = None) -> ApiError:
        """The error reply a client got: ``name`` as the daemon wrote it, its fault if this client knows it."""
        try:
            fault: ApiFault | None = ApiFault(name)
        except ValueError:
            fault = None  # a fault of a newer daemon: its name and parameters still say what it is
        error = cls.__new__(cls)
        error._init(name, fault, parameters, False)
        return error

    def _init(
        self, name: str, fault: ApiFault | None, parameters: Mapping[str, object] | None, fatal: bool
    ) -> None:
        #: the varlink error name (the fault's value; as received, on a client)
        self.name = name
        self.fault = fault
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


class LeaseLost(StoreError):
    """A write refused because this member no longer holds the shard's lease at that epoch.

    The store's fence (supervisor/store/sql.py, ``fence``) raises it inside the write's transaction,
    which rolls back: nothing of the write is stored. ``shard`` is the shard, ``epoch`` the epoch this
    member believed it held (0: it holds no lease of the shard at all). The daemon stops the shard's
    sessions locally, as for a lease it saw expire; the new owner runs them.
    """

    def __init__(self, shard: int, epoch: int, message: str) -> None:
        self.shard = shard
        self.epoch = epoch
        super().__init__(f"shard {shard}", message)


class NotOwner(SupervisorError):
    """A session whose shard this process does not own (its lease is another's, or nobody's now).

    Raised by the owner lookup (supervisor/runtime/leases.py) for a verb on such a session; the
    socket API answers it as ``NotOwner`` and ``ctl`` exits 69 (docs/socket-api.md, "Errors").
    ``owner`` is the fleet identity of the member that owns it, ``host`` what that member tells
    clients to reach it by, ``epoch`` the shard's owner epoch: each when known (a fleet's lease
    table says them, supervisor/fleet/owners.py; one host's leases know only their own).
    """

    def __init__(
        self,
        session_id: str,
        shard: int,
        owner: str | None = None,
        host: str | None = None,
        epoch: int | None = None,
    ) -> None:
        self.session_id = session_id
        self.shard = shard
        self.owner = owner
        self.host = host
        self.epoch = epoch
        held = f"owned by {owner}" + (f" on {host}" if host else "") if owner else "not owned by this process"
        super().__init__(f"session '{session_id}' is in shard {shard}, {held}: ask the process that owns it")


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
