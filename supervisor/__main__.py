"""``python -m supervisor`` is ``session-supervisor``."""

from supervisor.cli import main

if __name__ == "__main__":
    main()
