"""The decision core as a library: the taxonomy, the class policies and the endpoints' circuits for
applications that call the platforms themselves (docs/library.md).

* :mod:`supervisor.library.core`: what a library call is decided by, pure (the taxonomy, the class
  policy, which requests may be sent again, what raises); the endpoints' admission is
  :class:`machines.endpoint.Endpoint`'s, the daemon's own;
* :mod:`supervisor.library.gate`: the one place the shells call an ``Endpoint``, under its lock, and
  the one loop of a call (:func:`~supervisor.library.gate.steps`, a generator of what it needs done);
* :mod:`supervisor.library.sync_shell` and :mod:`supervisor.library.async_shell`: they only sleep,
  send and record what the loop asks (websockets' model: one core, a shell per concurrency style);
* :mod:`supervisor.library.answers`: what an httpx answer is to a call (its envelope, its event);
* :mod:`supervisor.library.tokens`: bearer tokens, refreshed early and single-flight;
* :mod:`supervisor.library.hooks`: observers in stamina's shape;
* :mod:`supervisor.library.decorator`: :func:`supervisor.resilient`;
* :mod:`supervisor.http`: :class:`~supervisor.http.ResilientTransport` for httpx.
"""
