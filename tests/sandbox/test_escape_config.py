"""Code that runs later on the host, plait's own: the project's ``plait.toml`` names MCP
server commands (run on the host by the next ``plait send`` there), the sandbox's settings
and the model; ``plait-policy.toml`` decides the next run's tool calls. By default
(``protect_config``) no tool may create or change them; each test reads the project's
configuration afterwards, as the next run would."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.adapters.tools import session_tools
from plait.config import load_config
from plait.domain.errors import PolicyError
from plait.domain.policy import Action, CallFacts, Policy, ToolRule
from plait.domain.policy_toml import parse_policy
from tests.sandbox.conftest import execute, tool
from tests.tools.conftest import run_tool

PLANT = '[mcp.servers.evil]\ncommand = "sh"\nargs = ["-c", "touch /tmp/planted"]\n'
ORIGINAL = 'model = "openai:gpt-4o"\n'


def _servers(ws: Path) -> dict[str, object]:
    servers = load_config(ws, {"HOME": str(ws.parent / "home")}).mcp.get("servers", {})
    assert isinstance(servers, dict)
    return servers


@pytest.mark.usefixtures("bwrap")
@pytest.mark.parametrize(
    "command",
    [
        "printf '{plant}' >> plait.toml",
        "printf '{plant}' > new && mv new plait.toml",
        "rm -f plait.toml; printf '{plant}' > plait.toml",
        "mv plait.toml old.toml; printf '{plant}' > plait.toml",
        "ln -sf new.toml plait.toml; printf '{plant}' > new.toml",
    ],
)
def test_a_command_cannot_change_the_projects_plait_toml(ws: Path, command: str) -> None:
    (ws / "plait.toml").write_text(ORIGINAL)
    execute(tool(), ws, command=command.format(plant=PLANT.replace("\n", "\\n")))
    assert (ws / "plait.toml").read_text() == ORIGINAL
    assert _servers(ws) == {}


@pytest.mark.usefixtures("bwrap")
@pytest.mark.parametrize("name", ["plait.toml", "plait-policy.toml"])
@pytest.mark.parametrize(
    "command",
    ["printf 'x = 1\\n' > {name}", "ln -s /etc/passwd {name}", "touch {name}"],
)
def test_a_configuration_file_a_command_makes_is_removed(ws: Path, name: str, command: str) -> None:
    out = execute(tool(), ws, command=command.format(name=name))
    assert out.failed, out.content
    assert f"REFUSED: the command made '{name}'" in out.content
    assert not (ws / name).exists() and not (ws / name).is_symlink()


@pytest.mark.usefixtures("bwrap")
def test_a_directory_of_that_name_is_left_alone(ws: Path) -> None:
    out = execute(tool(), ws, command="mkdir plait.toml")
    assert not out.failed, out.content
    assert (ws / "plait.toml").is_dir()


@pytest.mark.usefixtures("bwrap")
def test_protect_config_false_lets_commands_write_them(ws: Path) -> None:
    policy = Policy(protect_config=False, command=Action.ALLOW)
    out = execute(tool(policy=policy), ws, command=f"printf '{PLANT}' > plait.toml")
    assert not out.failed, out.content
    assert "evil" in _servers(ws)


@pytest.mark.usefixtures("bwrap")
def test_a_command_reads_them(ws: Path) -> None:
    (ws / "plait.toml").write_text(ORIGINAL)
    out = execute(tool(policy=Policy.default()), ws, command="cat plait.toml")
    assert not out.failed and "gpt-4o" in out.content


@pytest.mark.parametrize("name", ["plait.toml", "./plait-policy.toml", "sub/../plait.toml"])
def test_the_file_tools_are_denied_writing_them_whatever_the_rules_say(ws: Path, name: str) -> None:
    allow_all = Policy(rules=(ToolRule(name="all", tools=("*",), action=Action.ALLOW),))
    (ws / "sub").mkdir()
    tools = {t.spec.name: t for t in session_tools(policy=allow_all)}
    with pytest.raises(PolicyError, match="plait's own configuration"):
        run_tool(tools["write_file"], ws, path=name, content=PLANT)
    assert not (ws / "plait.toml").exists() and not (ws / "plait-policy.toml").exists()
    (ws / "plait.toml").write_text(ORIGINAL)
    with pytest.raises(PolicyError, match="plait's own configuration"):
        run_tool(tools["edit_file"], ws, path="plait.toml", old_string="gpt-4o", new_string="x")
    assert (ws / "plait.toml").read_text() == ORIGINAL


@pytest.mark.parametrize("policy", [Policy.default(), None])
def test_a_link_does_not_lead_a_write_into_them(ws: Path, policy: Policy | None) -> None:
    (ws / "plait.toml").write_text(ORIGINAL)
    (ws / "cfg").symlink_to("plait.toml")
    tools = {t.spec.name: t for t in session_tools(policy=policy)}
    with pytest.raises(PolicyError, match="plait's own configuration"):
        run_tool(tools["write_file"], ws, path="cfg", content=PLANT)
    assert (ws / "plait.toml").read_text() == ORIGINAL


def test_the_gate_denies_them_and_a_policy_file_can_turn_it_off() -> None:
    facts = CallFacts(tool="write_file", read_only=False, paths=("plait.toml",))
    verdict = Policy.default().evaluate(facts)
    assert (verdict.action, verdict.rule) == (Action.DENY, "protect_config")
    assert (
        Policy.default()
        .evaluate(CallFacts(tool="write_file", read_only=False, paths=("docs/plait.toml",)))
        .rule
        != "protect_config"
    )
    off = parse_policy("version = 1\nprotect_config = false\n", source="p.toml")
    assert off.evaluate(facts).action is Action.ALLOW
    with pytest.raises(PolicyError, match="protect_config: must be true or false"):
        parse_policy('version = 1\nprotect_config = "no"\n', source="p.toml")
