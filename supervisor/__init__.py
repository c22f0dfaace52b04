"""session-supervisor: keeps contact-center sessions alive and honest.

The package is import-light on purpose: decision code (``supervisor.taxonomy``,
``supervisor.retry``) and ``machines`` import no I/O library, and importing
``supervisor`` itself pulls in nothing else.
"""

__version__ = "0.1.0"
