"""The systemd glue (docs/systemd.md): notify, watchdog, status, socket activation, degraded conditions.

No module here is imported by this ``__init__`` on purpose: the message builder, the socket
activation reader and the degraded conditions sit low (floor 3, beside the bus) so any component
can raise a degraded condition; the services that read the runtime (status line, watchdog, the
glue ``run`` wires in) sit with the runtime on floor 7 (docs/runtime.md, "Floors").

* :mod:`.notify`: ``sd_notify`` written here, one datagram to ``$NOTIFY_SOCKET``, about 30 lines
  (the systemd maintainers advise reimplementing it rather than linking libsystemd;
  docs/systemd.md; sd_notify(3)). No-op when the variable is unset.
* :mod:`.activation`: ``sd_listen_fds``: the descriptors named ``subscribe`` and ``control``.
* :mod:`.degraded`: conditions a restart cannot cure, raised and cleared by name, published.
* :mod:`.status`: the one live ``STATUS=`` line, at most once a second.
* :mod:`.watchdog`: ``WATCHDOG=1`` from a task on the event loop, only while healthy.
* :mod:`.conditions`: the degraded conditions the daemon detects itself (an open circuit, a full
  or read-only state directory).
* :mod:`.service`: what ``run`` wires into ``run_daemon``'s readiness, stop and reload moments.
"""
