"""The one exception tree of session-supervisor.

::

    SupervisorError                      (every error we raise on purpose)
    ├── ConfigError                      a config file is invalid: names file, key, problem
    ├── TaxonomyError                    a taxonomy file is invalid: names file, key, problem
    ├── EnvelopeError                    a RawError envelope is invalid: names the field
    ├── SimulatorError                   a simulator could not start or was misused
    └── SessionError                     a supervised session failed (runtime)

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
