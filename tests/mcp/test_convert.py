"""The pure MCP ⇄ plait conversions and the server config, on plain values."""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any

import mcp.types as mt
import pytest

from plait.adapters.mcp import McpServerConfig, servers_from_mapping, tool_name
from plait.adapters.mcp._convert import describe_result, tool_info
from plait.adapters.mcp.tools import destructive_rule
from plait.application.arguments import argument_errors
from plait.config import load_config
from plait.domain.errors import ConfigError, ToolError
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.tools import EffectClass

PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_names_are_namespaced_stable_and_valid_for_every_provider() -> None:
    assert tool_name("git", "git_status") == "mcp__git__git_status"
    odd = tool_name("srv", "do.thing/with spaces")
    long = tool_name("server", "x" * 80)
    for name in (odd, long):
        assert PROVIDER_NAME.match(name), name
    assert odd == tool_name("srv", "do.thing/with spaces")  # stable
    assert odd != tool_name("srv", "do_thing_with_spaces")  # the hash keeps them apart
    assert tool_name("server", "x" * 80) != tool_name("server", "x" * 81)


def tool(name: str = "t", **annotations: Any) -> mt.Tool:
    return mt.Tool(
        name=name,
        description="d",
        input_schema={"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
        annotations=mt.ToolAnnotations(**annotations) if annotations else None,
    )


def test_effects_and_destructiveness_come_from_annotations_unless_overridden() -> None:
    plain = McpServerConfig(name="s", command="x")
    assert tool_info(plain, tool(read_only_hint=True)).spec.effect is EffectClass.READ_ONLY
    assert tool_info(plain, tool(idempotent_hint=True)).spec.effect is EffectClass.IDEMPOTENT
    unhinted = tool_info(plain, tool())
    # MCP's defaults: not read-only, destructive
    assert unhinted.spec.effect is EffectClass.SIDE_EFFECT and unhinted.destructive
    assert not tool_info(plain, tool(destructive_hint=False)).destructive
    assert not tool_info(plain, tool(read_only_hint=True)).destructive
    distrust = McpServerConfig(
        name="s",
        command="x",
        effects={"*": EffectClass.SIDE_EFFECT, "get_*": EffectClass.READ_ONLY},
        destructive={"wipe": True},
    )
    claims = tool_info(distrust, tool("wipe", read_only_hint=True, destructive_hint=False))
    assert claims.spec.effect is EffectClass.SIDE_EFFECT and claims.destructive
    assert claims.effect_source == "config"
    assert tool_info(distrust, tool("get_x")).spec.effect is EffectClass.READ_ONLY


def test_arguments_are_validated_with_the_servers_schema() -> None:
    spec = tool_info(McpServerConfig(name="s", command="x"), tool()).spec
    assert argument_errors(spec, {"xa": 1}) == []
    (error,) = argument_errors(spec, {"xa": "one"})
    assert "xa" in error and "integer" in error
    bad = mt.Tool(name="b", input_schema={"type": "object", "properties": {"a": {"type": 5}}})
    with pytest.raises(ToolError, match="tool 'b' has an invalid input schema"):
        tool_info(McpServerConfig(name="s", command="x"), bad)


def test_a_policy_rule_naming_a_tool_replaces_the_destructive_rule() -> None:
    infos = [tool_info(McpServerConfig(name="s", command="x"), tool(n)) for n in ("a", "b")]
    rule = destructive_rule(infos, Policy())
    assert rule is not None and rule.action is Action.APPROVE
    assert rule.tools == ("mcp__s__a", "mcp__s__b")
    named = Policy(rules=(ToolRule(name="a-ok", action=Action.ALLOW, tools=("mcp__s__a",)),))
    rule = destructive_rule(infos, named)
    assert rule is not None and rule.tools == ("mcp__s__b",)
    server = Policy(rules=(ToolRule(name="s", action=Action.DENY, tools=("mcp__s__*",)),))
    assert destructive_rule(infos, server) is None


def test_every_content_kind_becomes_text_and_binaries_artifacts() -> None:
    saved: list[tuple[bytes, str]] = []

    async def save(data: bytes, media_type: str) -> str:
        saved.append((data, media_type))
        return f"art_{len(saved)}"

    png = base64.b64encode(b"\x89PNG...").decode()
    result = mt.CallToolResult(
        content=[
            mt.TextContent(type="text", text='{"t": 21}'),
            mt.ImageContent(type="image", data=png, mime_type="image/png"),
            mt.AudioContent(type="audio", data=png, mime_type="audio/wav"),
            mt.EmbeddedResource(
                type="resource",
                resource=mt.TextResourceContents(uri="file:///a.txt", text="A", mime_type=None),
            ),
            mt.EmbeddedResource(
                type="resource",
                resource=mt.BlobResourceContents(uri="file:///b", blob=png, mime_type=None),
            ),
            mt.ResourceLink(type="resource_link", uri="file:///c", name="c", mime_type="text/x"),
        ],
        structured_content={"t": 21},
    )
    text = asyncio.run(describe_result(result, save))
    assert text.splitlines() == [
        '{"t": 21}',
        "[image: image/png, 7 bytes, artifact art_1]",
        "[audio: audio/wav, 7 bytes, artifact art_2]",
        "[resource file:///a.txt (text/plain)]",
        "A",
        "[resource file:///b (application/octet-stream), 7 bytes, artifact art_3]",
        "[resource link file:///c c (text/x)]",
    ]  # structuredContent equal to a text block is not repeated
    other = mt.CallToolResult(content=[], structured_content={"t": 1})
    assert asyncio.run(describe_result(other, save)) == '[structuredContent]\n{"t": 1}'
    wrapped = mt.CallToolResult(
        content=[mt.TextContent(type="text", text="7")], structured_content={"result": 7}
    )
    assert asyncio.run(describe_result(wrapped, save)) == "7"
    differs = mt.CallToolResult(
        content=[mt.TextContent(type="text", text="a summary")], structured_content={"n": 2}
    )
    assert asyncio.run(describe_result(differs, save)) == 'a summary\n[structuredContent]\n{"n": 2}'


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"command": "x", "url": "http://h"}, "exactly one of command"),
        ({"command": "x", "colour": 1}, "unknown key 'colour'"),
        ({"command": "x", "args": "a b"}, "args must be a list of strings"),
        ({"command": "x", "effects": {"t": "harmless"}}, "effects values are"),
        ({"command": "x", "ro_binds": ["rel"]}, "must be absolute"),
        ({"command": "x", "timeout_seconds": 0}, "positive number"),
    ],
)
def test_bad_server_tables_are_errors_naming_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        servers_from_mapping({"servers": {"s": table}})


def test_secrets_come_from_the_environment() -> None:
    config = McpServerConfig(
        name="s",
        url="https://h/mcp",
        headers={"Authorization": "Bearer ${TOKEN}"},
    )
    assert config.resolved_headers({"TOKEN": "t0k"}) == {"Authorization": "Bearer t0k"}
    with pytest.raises(ConfigError, match="needs the environment variable TOKEN"):
        config.resolved_headers({})
    stdio = McpServerConfig(name="s", command="x", env={"A": "1"}, env_from={"KEY": "MY_KEY"})
    assert stdio.resolved_env({"MY_KEY": "k", "OTHER": "o"}) == {"A": "1", "KEY": "k"}


def test_plait_toml_servers_merge_project_over_user(tmp_path: Any) -> None:
    user = tmp_path / "config" / "plait"
    user.mkdir(parents=True)
    (user / "config.toml").write_text(
        '[mcp.servers.a]\ncommand = "user-a"\n[mcp.servers.b]\ncommand = "user-b"\n'
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "plait.toml").write_text('[mcp.servers.a]\ncommand = "project-a"\n')
    config = load_config(project, {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    servers = servers_from_mapping(config.mcp)
    assert {n: s.command for n, s in servers.items()} == {"a": "project-a", "b": "user-b"}
    (project / "plait.toml").write_text("[mcp]\nclients = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'clients' in \\[mcp\\]"):
        load_config(project, {"XDG_CONFIG_HOME": str(tmp_path / "config")})


def test_mcp_errors_pickle() -> None:
    import pickle

    from plait.adapters.mcp import McpCallLost, McpServerError

    error = McpServerError("MCP server 's' did not start", server="s")
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), back.message, back.details, back.code) == (
        McpServerError,
        error.message,
        {"server": "s"},
        "mcp_server_error",
    )
    lost = pickle.loads(pickle.dumps(McpCallLost("gone")))
    assert isinstance(lost, McpCallLost) and str(lost) == "gone"
