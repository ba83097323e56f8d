"""``plait init``: a commented ``plait.toml`` and a starting policy in a project, a check of
the model when its key is there, and what to do next. Never overwrites without
``--force``."""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from plait.config import Config, load_config
from plait.domain.errors import ConfigError, PlaitError
from plait.domain.runs import Budget
from plait.entrypoints.cli import _loop
from plait.entrypoints.cli._options import positive_int

__all__ = ["POLICY_FILE", "print_schemas", "register", "run_init"]

CONFIG_FILE = "plait.toml"
POLICY_FILE = "plait-policy.toml"


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    init = sub.add_parser(
        "init",
        help="write a commented plait.toml and a starting policy in a project",
        description="Write plait.toml (model, compaction, sandbox, MCP servers; budgets are "
        f"per-run flags, listed there) and {POLICY_FILE} in DIRECTORY, check the model "
        "with `plait models check` when its API key is set, and say what to do next. "
        "Existing files are left alone unless --force.",
    )
    init.add_argument(
        "directory", metavar="DIRECTORY", nargs="?", default=".", help="the project (default: .)"
    )
    init.add_argument(
        "--model",
        metavar="SPEC",
        help="the model to write as the default, e.g. anthropic:claude-sonnet-4-5 "
        "(default: $PLAIT_MODEL, else left commented out)",
    )
    init.add_argument(
        "--context-window",
        metavar="TOKENS",
        type=positive_int,
        help="the model's context window, for a model plait does not know (a local or "
        "OpenAI-compatible server): written under [models.project] so compaction can "
        "budget it; without it, automatic compaction is written off for such a model",
    )
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    common(init)


def _budget_lines() -> str:
    budget = Budget()

    def shown(value: float | None) -> str:
        return "no limit" if value is None else f"{value:g}"

    return (
        f"#   --max-steps {shown(budget.max_steps)}   "
        f"--deadline {shown(budget.deadline_seconds)} (seconds)"
        f"   --max-model-calls {shown(budget.max_model_calls)}\n"
        f"#   --max-tokens {shown(budget.max_total_tokens)}   "
        f"--max-cost {shown(budget.max_cost_usd)} "
        f"(US dollars)   --tool-timeout {shown(budget.tool_timeout_seconds)} (seconds)\n"
        f"#   --output-cap {shown(budget.tool_output_cap_bytes)} (bytes a tool's output "
        "shows the model; the rest is kept as an artifact)\n"
    )


PROJECT_MODEL = "project"
"""The ``[models.NAME]`` table ``plait init --context-window`` writes for its model."""


def config_text(model: str | None, *, window: int | None = None, missing: str | None = None) -> str:
    """The commented ``plait.toml``: every key written is a real one, set to its default
    (or to ``model``). ``window``: the model's context window, declared under
    ``[models.project]``. ``missing``: what plait does not know of the model that
    automatic compaction needs; compaction is then written off (else the first send would
    be refused), with what to declare to turn it on."""
    model_line = (
        f"model = {_toml_string(model)}" if model else '# model = "anthropic:claude-sonnet-4-5"'
    )
    declared = ""
    if model and window is not None:
        model_line = f"model = {_toml_string(PROJECT_MODEL)}"
        declared = (
            "\n# The model above: its spec and its context window in tokens (what compaction\n"
            f"# budgets).\n[models.{PROJECT_MODEL}]\nspec = {_toml_string(model)}\n"
            f"context_window = {window}\n"
            "# structured_output = true   # if the server answers with JSON-schema output\n"
        )
    auto = "auto = true"
    if model and missing is not None:
        why = (
            f"off: plait does not know this model's {missing}, which compaction needs. "
            "Declare it under [models.NAME] (see docs/models.md) and set auto = true."
        )
        auto = textwrap.fill(why, width=88, initial_indent="# ", subsequent_indent="# ")
        auto += "\nauto = false"
    return f"""\
# plait.toml: this project's plait settings, written by `plait init`. Every key is
# optional. Command-line flags win over environment variables (PLAIT_MODEL, PLAIT_DB,
# PLAIT_POLICY), which win over this file, which wins over ~/.config/plait/config.toml.

# The model new sessions run with. A session then remembers its model; --model changes
# it for one run. Specs: anthropic:MODEL, openai:MODEL, gemini:MODEL,
# openai-compatible:BASE_URL#MODEL, scripted:PATH, or a name from [models.NAME] below
# (`plait models list` shows the known ones, `plait models check SPEC` tries one).
{model_line}

# The tool policy runs are decided under (which calls run, which ask a person, which are
# refused), relative to this file; PLAIT_POLICY and --policy name another. No tool may
# change it or this file (the policy's protect_config).
policy = {_toml_string(POLICY_FILE)}

# A model of your own, usable as --model local (a local server, a proxy):
# [models.local]
# spec = "openai-compatible:http://localhost:8000/v1#Qwen/Qwen3-8B"
# key_env = "LOCAL_API_KEY"          # the variable holding its key
# context_window = 32768
# max_output_tokens = 4096

# Budgets are per run, given as flags to `plait send` and `plait chat` (defaults shown):
{_budget_lines()}{declared}
[compaction]
# Older history is summarized once the context reaches this share of the model's
# window (the raw history is kept; `plait context SESSION` shows the figures).
{auto}
threshold = 0.8
# summarizer_model = "openai:gpt-4o-mini"   # default: the session's model

[sandbox]
# How run_command runs (bubblewrap): paths it may read but not change, paths it cannot
# see (globs relative to the workspace), network access, its time limit.
read_only = []                       # e.g. ["deploy/**", "*.lock"]
hidden = []                          # e.g. [".env", "secrets/**"]
network = false
timeout_seconds = 120
# test_command = "uv run pytest -q"  # offers the agent a run_tests tool

# MCP servers whose tools sessions are offered (one table per server):
# [mcp.servers.time]
# command = "mcp-server-time"
"""


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


POLICY_TEXT = """\
# plait-policy.toml: which tool calls run, which ask a person, which are refused
# (written by `plait init`; the format: docs/policy.md). plait.toml's `policy` key names
# it (PLAIT_POLICY or --policy name another); `plait policy check plait-policy.toml`
# prints its rules.
version = 1

# Paths writes may not touch unless a rule says otherwise (globs).
protected = [".git/**", ".env", ".env.*"]
protect_git = true                   # no tool creates or changes a git repository
protect_config = true                # no tool changes plait.toml or this file

[defaults]                           # when no rule matches
read = "allow"                       # read-only tools inside the workspace
write = "allow"                      # writing tools inside the workspace
command = "approve"                  # each sub-command of run_command: ask a person
other = "approve"                    # other tools with side effects
protected = "deny"                   # writes to a protected path

[limits]
max_calls_per_run = 200              # tool calls one run may make

# Commands that may run without asking (each sub-command is matched on its own):
[[rules]]
name = "read-only-commands"
tools = ["run_command"]
commands = ["ls *", "cat *", "git status", "git diff *", "git log *"]
action = "allow"

# [[rules]]
# name = "no-deploy"
# tools = ["write_file", "edit_file"]
# paths = ["deploy/**"]
# action = "deny"
# reason = "deployment configuration is changed by the release process only"
"""


def _check_model(spec: str, root: Path) -> dict[str, Any]:
    """``plait models check`` when the model can be opened (its key is set); otherwise
    why it was not checked."""
    # lazy: the model adapters and the runtime (~50 ms) only when there is a model to check
    from plait.adapters.models import check_model
    from plait.runtime import open_model
    from plait.settings import resolve_settings

    settings = resolve_settings(model=spec, cwd=root)
    try:
        open_model(spec, settings=settings)
    except PlaitError as error:
        return {"checked": False, "ok": None, "detail": error.message, "checks": []}
    try:
        name, checks = _loop.run(check_model(spec, config=settings.config, env=settings.environ))
    except PlaitError as error:
        return {"checked": True, "ok": False, "detail": error.message, "checks": []}
    ok = all(check["ok"] for check in checks)
    return {"checked": True, "ok": ok, "detail": name, "checks": checks}


def run_init(args: argparse.Namespace, out: _Output) -> int:
    root = Path(args.directory).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{args.directory!r} is not an existing directory", path=args.directory)
    files = {CONFIG_FILE: root / CONFIG_FILE, POLICY_FILE: root / POLICY_FILE}
    there = [name for name, path in files.items() if path.exists()]
    if there and not args.force:
        raise ConfigError(
            f"{', '.join(there)} already in {str(root)!r}; nothing was written (use --force "
            "to overwrite)",
            existing=there,
        )
    model = args.model or os.environ.get("PLAIT_MODEL") or None
    if args.context_window is not None and model is None:
        raise ConfigError("--context-window needs a model: pass --model SPEC as well")
    missing = None
    if model is not None:
        config = load_config(root.resolve(), os.environ)
        missing = _compaction_lacks(model, config, window=args.context_window)
    texts = {
        CONFIG_FILE: config_text(model, window=args.context_window, missing=missing),
        POLICY_FILE: POLICY_TEXT,
    }
    for name, path in files.items():
        try:
            path.write_text(texts[name], encoding="utf-8")
        except OSError as error:
            raise ConfigError(
                f"cannot write {str(path)!r}: {error.strerror or type(error).__name__}",
                path=str(path),
            ) from None
    load_config(root.resolve(), os.environ)  # what was written loads (a mistake here is a bug)
    check = _check_model(model, root.resolve()) if model else None
    steps = _next_steps(model, check)
    if missing is not None:
        steps.insert(
            0,
            f"compaction is off: plait does not know this model's {missing}; declare it in "
            "plait.toml (see the comment under [compaction]) and set auto = true",
        )
    written = [str(path.resolve()) for path in files.values()]
    data = {
        "directory": str(root.resolve()),
        "written": written,
        "model": model,
        "model_check": check,
        "next": steps,
    }

    def text() -> str:
        lines = [f"wrote {p}" for p in written]
        if check is not None:
            verdict = "ok" if check["ok"] else "FAILED" if check["checked"] else "not checked"
            lines.append(f"model {model}: {verdict} ({check['detail']})")
            lines += [
                f"  {c['check']:<13} {'ok' if c['ok'] else 'FAILED':<7} {c['detail']}"
                for c in check["checks"]
            ]
        lines.append("next:")
        lines += [f"  {s}" for s in steps]
        return "\n".join(lines)

    out.emit(data, text)
    return 0 if check is None or check["ok"] is not False else 1


def _compaction_lacks(model: str, config: Config, *, window: int | None) -> str | None:
    """What plait does not know of ``model`` that automatic compaction needs (its context
    window, structured output for its summaries), or ``None``. A scripted model needs
    nothing (its runs are not metered)."""
    # lazy: the model catalogue (~20 ms) only when init is given a model
    from plait.adapters.models import resolve

    if model.startswith("scripted:"):
        return None
    try:
        resolved = resolve(model, config)
    except PlaitError:
        return None  # a spec it cannot parse: the model check below says what is wrong
    lacking = []
    known = resolved.known and resolved.capabilities.context_window is not None
    if window is None and not known:
        lacking.append("context window (plait init --context-window TOKENS)")
    if not resolved.capabilities.structured_output:
        lacking.append("structured output (structured_output = true)")
    return " and ".join(lacking) or None


def _next_steps(model: str | None, check: dict[str, Any] | None) -> list[str]:
    steps = []
    if model is None:
        steps.append(
            "choose a model: set `model` in plait.toml (see `plait models list`), or pass --model"
        )
    elif check is not None and not check["checked"]:
        steps.append(
            f"make the model usable ({check['detail']}), then `plait models check {model}`"
        )
    steps += [
        'S=$(plait sessions new) && plait send "$S" "What does this project do?"',
        "plait chat --session $S    # go on talking in the same session",
    ]
    return steps


def print_schemas(args: argparse.Namespace, out: _Output) -> int:
    """``plait schema [NAME]``: the published shapes as JSON Schema, ``{"schemas": {name:
    schema}}``; the OpenAPI document (``/v1/openapi.json``) holds the same ones under
    ``components.schemas``."""
    # lazy: the HTTP models load pydantic (~100 ms), for this command only
    from plait.entrypoints.http.models import json_schemas

    schemas = json_schemas()
    if args.name is not None:
        if args.name not in schemas:
            raise ConfigError(
                f"no published shape {args.name!r}; there are {', '.join(sorted(schemas))}",
                name=args.name,
            )
        schemas = {args.name: schemas[args.name]}
    out.emit({"schemas": schemas}, lambda: json.dumps(schemas, indent=2))
    return 0
