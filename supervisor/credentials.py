"""Credentials: a value that never prints, and the bounded read of a credential file.

Secrets are never in the configuration file itself: ``clientSecretFile`` and ``passwordFile``
name files, relative ones resolved in ``$CREDENTIALS_DIRECTORY`` (systemd ``LoadCredential=``)
first, then next to the config file (docs/configuration.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from supervisor.errors import ConfigError
from supervisor.taxonomy.loader import LimitError, read_capped

__all__ = ["MAX_CREDENTIAL_BYTES", "Secret", "default_environ", "read_secret"]

#: the largest credential file read (a secret, a password or a JWT is well under 8 KiB)
MAX_CREDENTIAL_BYTES = 64 * 1024


class Secret:
    """A credential value that never prints."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def read_secret(
    name: str | None, *, key: str, config_dir: Path | None, environ: Mapping[str, str]
) -> Secret | None:
    """Read a credential file: absolute, else in ``$CREDENTIALS_DIRECTORY``, else beside the config.

    ``key`` names the config key in errors; the value is never included in one.
    """
    if name is None:
        return None
    candidates: list[Path] = []
    p = Path(name)
    if p.is_absolute():
        candidates.append(p)
    else:
        cred_dir = environ.get("CREDENTIALS_DIRECTORY")
        if cred_dir:
            candidates.append(Path(cred_dir) / name)
        if config_dir is not None:
            candidates.append(config_dir / name)
    for candidate in candidates:
        try:
            value = read_capped(candidate, MAX_CREDENTIAL_BYTES).decode("utf-8").strip()
        except FileNotFoundError:
            continue
        except LimitError as exc:
            raise ConfigError(f"{key}: credential file {candidate} is {exc}") from None
        except (OSError, ValueError) as exc:  # ValueError: undecodable, or a NUL in the name
            raise ConfigError(
                f"{key}: cannot read credential file {candidate}: {type(exc).__name__}"
            ) from None
        if not value:
            raise ConfigError(f"{key}: credential file {candidate} is empty")
        return Secret(value)
    where = " or ".join(str(c) for c in candidates) or name
    raise ConfigError(f"{key}: credential file not found ({where})")


def default_environ() -> Mapping[str, str]:
    return os.environ
