"""Load the tool policy: the file the settings name (``--policy FILE``, else
``PLAIT_POLICY``), else the built-in default (format: docs/policy.md)."""

from __future__ import annotations

import os
from pathlib import Path

from plait.domain.errors import PolicyError
from plait.domain.policy import Policy

__all__ = ["load_policy", "policy_from"]


def load_policy(path: str | os.PathLike[str]) -> Policy:
    # lazy: tomllib and the TOML reader (~4 ms), only for a policy file; the default
    # policy is built in Python
    from plait.domain.policy_toml import parse_policy

    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(
            f"policy file {str(path)!r} does not exist; give an existing TOML file "
            "(see docs/policy.md) or leave --policy/PLAIT_POLICY unset for the built-in default",
            source=str(path),
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(
            f"cannot read policy file {str(path)!r}: {exc}", source=str(path)
        ) from exc
    return parse_policy(text, str(path))


def policy_from(path: str | None) -> Policy:
    """The policy in the file ``path`` (:attr:`plait.settings.Settings.policy`), else
    the default."""
    return load_policy(path) if path else Policy.default()
