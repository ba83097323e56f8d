"""The deterministic policy: rules, path scopes, command rules, limits, defaults."""

from __future__ import annotations

from typing import Any

import pytest

from plait.application.governance.facts import call_facts, relative_path
from plait.domain.messages import ToolCall
from plait.domain.policy import Action, Limits, Policy, ToolRule, glob_match, pattern_match
from plait.domain.policy_toml import parse_policy


def decide(
    policy: Policy, tool: str, args: dict[str, Any], *, read_only: bool = False, n: int = 0
) -> tuple[Action, str]:
    call = ToolCall.create(id="c1", name=tool, arguments=args)
    facts = call_facts(policy, call, read_only=read_only, workspace="/ws", calls_so_far=n)
    v = policy.evaluate(facts)
    return v.action, v.rule


ALLOW_CD = Policy(
    rules=(
        ToolRule(name="cd", action=Action.ALLOW, tools=("run_command",), commands=(("cd", "*"),)),
    ),
)


def test_default_policy_is_safe_for_a_first_run() -> None:
    p = Policy.default()
    assert decide(p, "read_file", {"path": "deploy/app.yaml"}, read_only=True) == (
        Action.ALLOW,
        "defaults.read",
    )
    assert decide(p, "write_file", {"path": "src/a.py", "content": ""}) == (
        Action.ALLOW,
        "defaults.write",
    )
    assert decide(p, "write_file", {"path": ".git/config", "content": ""}) == (
        Action.DENY,
        "protected",
    )
    assert decide(p, "write_file", {"path": "../x", "content": ""}) == (Action.DENY, "workspace")
    assert decide(p, "write_file", {"path": "/etc/passwd", "content": ""}) == (
        Action.DENY,
        "workspace",
    )
    assert decide(p, "run_command", {"command": "ls"}) == (Action.APPROVE, "defaults.command")
    assert decide(p, "send_mail", {"to": "x"}) == (Action.APPROVE, "defaults.other")


def test_allowing_cd_never_allows_what_follows() -> None:
    assert decide(ALLOW_CD, "run_command", {"command": "cd src"}) == (Action.ALLOW, "rules.cd")
    for cmd in (
        "cd src && rm -rf ../deploy",
        "cd src; rm -rf ../deploy",
        "cd src || rm -rf ../deploy",
        "cd src | rm -rf ../deploy",
        "(cd src; rm -rf ../deploy)",
        "cd $(rm -rf ../deploy)",
        "cd `rm -rf ../deploy`",
        "cd src\nrm -rf ../deploy",
        "{ cd src; rm -rf x; }",
        "if cd src; then rm -rf x; fi",
    ):
        assert decide(ALLOW_CD, "run_command", {"command": cmd}) == (
            Action.APPROVE,
            "defaults.command",
        ), cmd


def test_unparsable_command_is_never_allowed() -> None:
    allow_all = Policy(rules=(ToolRule(name="all", action=Action.ALLOW, tools=("run_command",)),))
    assert decide(allow_all, "run_command", {"command": "ls"})[0] is Action.ALLOW
    assert decide(allow_all, "run_command", {"command": 'echo "open'}) == (
        Action.APPROVE,
        "command.unparsable",
    )
    assert decide(allow_all, "run_command", {"command": "echo $((1+2))"})[0] is Action.APPROVE
    deny_cmds = Policy(command=Action.DENY)
    assert decide(deny_cmds, "run_command", {"command": 'echo "open'})[0] is Action.DENY


def test_redirections_are_writes() -> None:
    p = Policy(
        rules=(
            ToolRule(
                name="echo", action=Action.ALLOW, tools=("run_command",), commands=(("echo", "*"),)
            ),
        ),
        protected=("deploy/**",),
    )
    assert decide(p, "run_command", {"command": "echo hi > notes.txt"})[0] is Action.ALLOW
    assert decide(p, "run_command", {"command": "echo hi 2>/dev/null"})[0] is Action.ALLOW
    assert decide(p, "run_command", {"command": "echo hi > deploy/app.yaml"}) == (
        Action.DENY,
        "protected",
    )
    assert decide(p, "run_command", {"command": "echo hi >> ./deploy/../deploy/x"}) == (
        Action.DENY,
        "protected",
    )
    assert decide(p, "run_command", {"command": "echo hi > /etc/x"}) == (Action.DENY, "workspace")
    assert decide(p, "run_command", {"command": "echo hi > $HOME/x"}) == (
        Action.APPROVE,
        "command.unclear_write",
    )


def test_strictest_matching_rule_wins_and_paths_scope_rules() -> None:
    p = Policy(
        rules=(
            ToolRule(name="writes", action=Action.ALLOW, tools=("write_file", "edit_file")),
            ToolRule(
                name="no-deploy",
                action=Action.DENY,
                tools=("write_file", "edit_file"),
                paths=("deploy/**",),
                reason="deploy is frozen",
            ),
            ToolRule(
                name="review-src", action=Action.REVIEW, tools=("edit_*",), paths=("src/**/*.py",)
            ),
        )
    )
    assert decide(p, "write_file", {"path": "deploy/app.yaml", "content": ""}) == (
        Action.DENY,
        "rules.no-deploy",
    )
    assert (
        decide(p, "edit_file", {"path": "deploy", "old_string": "a", "new_string": "b"})[0]
        is Action.DENY
    )
    assert decide(p, "edit_file", {"path": "src/x/y.py", "old_string": "a", "new_string": "b"}) == (
        Action.REVIEW,
        "rules.review-src",
    )
    assert decide(p, "write_file", {"path": "docs/a.md", "content": ""}) == (
        Action.ALLOW,
        "rules.writes",
    )
    v = p.evaluate(
        call_facts(
            p,
            ToolCall.create(id="c", name="write_file", arguments={"path": "deploy/a"}),
            read_only=False,
            workspace=None,
        )
    )
    assert v.reason == "deploy is frozen"


def test_limits_deny() -> None:
    p = Policy(limits=Limits(max_calls_per_run=2, max_argument_bytes=50))
    assert decide(p, "read_file", {"path": "a"}, read_only=True, n=1)[0] is Action.ALLOW
    assert decide(p, "read_file", {"path": "a"}, read_only=True, n=2) == (
        Action.DENY,
        "limits.max_calls_per_run",
    )
    assert decide(p, "write_file", {"path": "a", "content": "x" * 60}) == (
        Action.DENY,
        "limits.max_argument_bytes",
    )


@pytest.mark.parametrize(
    ("path", "pattern", "hit"),
    [
        ("deploy", "deploy/**", True),
        ("deploy/a/b.yaml", "deploy/**", True),
        ("deployment/x", "deploy/**", False),
        ("src/a.py", "*.py", False),
        ("src/a.py", "**/*.py", True),
        ("a.py", "**/*.py", True),
        ("src/a/b.py", "src/*.py", False),
        (".env.local", ".env.*", True),
    ],
)
def test_glob(path: str, pattern: str, hit: bool) -> None:
    assert glob_match(path, pattern) is hit


def test_command_patterns() -> None:
    assert pattern_match(("cd",), ("cd", "*"))
    assert pattern_match(("pytest", "-q", "tests"), ("pytest", "*"))
    assert not pattern_match(("git", "push"), ("git", "status"))
    assert pattern_match(("git", "status"), ("git", "status"))
    assert not pattern_match(("git", "status", "--x"), ("git", "status"))
    assert pattern_match(("ruff", "check", "src"), ("ruff", "*", "src"))


def test_relative_path() -> None:
    assert relative_path("a/../b", "/ws") == "b"
    assert relative_path("/ws/b/c", "/ws") == "b/c"
    assert relative_path("/ws", "/ws") == "."
    assert relative_path("/wsx/b", "/ws") is None
    assert relative_path("a/../../b", "/ws") is None


def test_policy_file_round_trip() -> None:
    p = parse_policy(
        """
version = 1
protected = ["deploy/**"]

[defaults]
command = "deny"

[limits]
max_calls_per_run = 5

[reviewer]
instructions = "Be strict."
max_model_calls = 3

[[rules]]
name = "tests"
tools = ["run_command"]
commands = ["pytest *", "cd *"]
action = "allow"
""",
        "p.toml",
    )
    assert p.command is Action.DENY and p.protected == ("deploy/**",)
    assert p.limits.max_calls_per_run == 5 and p.reviewer.max_model_calls == 3
    assert p.rules[0].commands == (("pytest", "*"), ("cd", "*"))
    assert decide(p, "run_command", {"command": "cd src && pytest -q"})[0] is Action.ALLOW
    assert decide(p, "run_command", {"command": "cd src && make"})[0] is Action.DENY


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("version = 1\n[[rules]]\nname = 'a'\naction = 'alow'\n", "rules[0].action", 4),
        (
            "version = 1\n[[rules]]\nname = 'a'\naction = 'allow'\n"
            "[[rules]]\nname = 'b'\nactoin = 'deny'\n",
            "rules[1].actoin",
            7,
        ),
        ("version = 1\n[defaults]\nwrite = 'yes'\n", "defaults.write", 3),
        ("version = 1\n[limits]\nmax_calls_per_run = 0\n", "limits.max_calls_per_run", 3),
        ("version = 2\n", "version", 1),
        ("version = 1\nprotect = []\n", "protect", 2),
        (
            "version = 1\n[[rules]]\nname = 'a'\naction = 'allow'\n"
            "[[rules]]\nname = 'a'\naction = 'deny'\n",
            "rules[1].name",
            6,
        ),
        (
            "version = 1\n[[rules]]\nname = 'a'\naction = 'allow'\ncommands = ['echo \"x']\n",
            "rules[0].commands",
            5,
        ),
    ],
)
def test_bad_policy_file_names_line_and_key(text: str, key: str, line: int) -> None:
    from plait.domain.errors import PolicyError

    with pytest.raises(PolicyError) as e:
        parse_policy(text, "bad.toml")
    assert e.value.details["key"] == key
    assert e.value.details["line"] == line
    assert e.value.message.startswith(f"bad.toml, line {line}: {key}:")


def test_bad_toml_syntax() -> None:
    from plait.domain.errors import PolicyError

    with pytest.raises(PolicyError, match=r"bad.toml: not valid TOML: .*line 2"):
        parse_policy("version = 1\n[[rules]\n", "bad.toml")


def test_the_reason_names_every_subcommand_that_decided() -> None:
    call = ToolCall.create(
        id="c", name="run_command", arguments={"command": "cd src && rm -rf x; make"}
    )
    v = ALLOW_CD.evaluate(call_facts(ALLOW_CD, call, read_only=False, workspace="/ws"))
    assert v.action is Action.APPROVE
    assert v.reason == "`rm -rf x` matches no command rule; `make` matches no command rule"


def test_a_command_that_is_not_a_string_is_never_allowed() -> None:
    allow_all = Policy(rules=(ToolRule(name="all", action=Action.ALLOW, tools=("run_command",)),))
    assert decide(allow_all, "run_command", {"command": ["rm", "-rf", "/"]}) == (
        Action.APPROVE,
        "command.unparsable",
    )
