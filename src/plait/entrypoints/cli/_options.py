"""What the ``plait`` commands share on their command lines: the parser class whose errors
are :class:`UsageError`, value types, and the options several commands take (``--json``,
``--db``, ``--model``, ``--policy``, the budget)."""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from plait.domain.errors import ConfigError, ValidationError
from plait.domain.runs import Budget

__all__ = [
    "Parser",
    "UsageError",
    "budget",
    "budget_opts",
    "common",
    "model_opt",
    "policy_opt",
    "positive_int",
]


class UsageError(ConfigError):
    """The command line itself is wrong (unknown option, missing argument, ...)."""

    code = "usage"


class Parser(argparse.ArgumentParser):
    """Turns argparse's exit-on-error into a UsageError, so ``--json`` gets its error and
    the first line on stderr is the message, not the usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}", command=self.prog)


def _whole(text: str, *, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _whole(text, least=1)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def _dollars(text: str) -> float:
    try:
        value = float(text.removeprefix("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an amount of US dollars, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 dollars, got {text}")
    return value


def common(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    # Sub-commands SUPPRESS their defaults so `plait --json history S` keeps --json.
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print machine-readable JSON",
    )
    parser.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        help="store URL: sqlite:///PATH, postgresql://..., jsonl:///DIR or memory:// "
        "(default: $PLAIT_DB, "
        "else plait.db in $XDG_DATA_HOME/plait or ~/.local/share/plait)",
    )


def model_opt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help="model spec, e.g. scripted:PATH, for this run only (default: the session's "
        "model, else $PLAIT_MODEL, else plait.toml's model)",
    )


def _default(value: float | None) -> str:
    return " (default: no limit)" if value is None else f" (default: {value:g})"


def budget_opts(parser: argparse.ArgumentParser) -> None:
    defaults = Budget()
    group = parser.add_argument_group("budget (a run stops when it reaches one of these)")
    group.add_argument(
        "--max-steps",
        type=positive_int,
        default=defaults.max_steps,
        help="agent steps" + _default(defaults.max_steps),
    )
    group.add_argument(
        "--deadline",
        type=_seconds,
        default=defaults.deadline_seconds,
        help="seconds" + _default(defaults.deadline_seconds),
    )
    group.add_argument(
        "--max-model-calls",
        type=positive_int,
        default=defaults.max_model_calls,
        help="model calls" + _default(defaults.max_model_calls),
    )
    group.add_argument(
        "--max-tokens",
        type=positive_int,
        default=defaults.max_total_tokens,
        help="input + output tokens" + _default(defaults.max_total_tokens),
    )
    group.add_argument(
        "--max-cost",
        type=_dollars,
        default=defaults.max_cost_usd,
        metavar="USD",
        help="cost ceiling in US dollars, from the model's declared prices"
        + _default(defaults.max_cost_usd),
    )
    group.add_argument(
        "--tool-timeout",
        type=_seconds,
        default=defaults.tool_timeout_seconds,
        help="seconds per tool call" + _default(defaults.tool_timeout_seconds),
    )
    group.add_argument(
        "--output-cap",
        type=positive_int,
        default=defaults.tool_output_cap_bytes,
        help="bytes of a tool's output the model sees (the rest goes to an artifact)"
        + _default(defaults.tool_output_cap_bytes),
    )


_BUDGET_FLAGS = {
    "max_steps": "--max-steps",
    "deadline_seconds": "--deadline",
    "max_model_calls": "--max-model-calls",
    "max_total_tokens": "--max-tokens",
    "max_cost_usd": "--max-cost",
    "tool_timeout_seconds": "--tool-timeout",
    "tool_output_cap_bytes": "--output-cap",
}


def budget(args: argparse.Namespace) -> Budget:
    """The run's budget from the flags; a limit the domain refuses is reported under the
    flag's name."""
    try:
        return Budget(
            max_steps=args.max_steps,
            deadline_seconds=args.deadline,
            max_model_calls=args.max_model_calls,
            max_total_tokens=args.max_tokens,
            max_cost_usd=args.max_cost,
            tool_timeout_seconds=args.tool_timeout,
            tool_output_cap_bytes=args.output_cap,
        )
    except ValidationError as error:
        message = error.message
        for field, flag in _BUDGET_FLAGS.items():
            message = message.replace(f"budget {field}", flag)
        raise ValidationError(message, **error.details) from error


def policy_opt(parser: argparse.ArgumentParser) -> None:
    """``--policy FILE`` for the commands that run tool calls."""
    parser.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="tool policy file (default: $PLAIT_POLICY, else the built-in policy; "
        "see docs/policy.md)",
    )
