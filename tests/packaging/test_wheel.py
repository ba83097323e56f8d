"""The wheel is a complete installation: built with ``uv build --wheel``, installed into a
fresh virtual environment outside the repository, ``plait --version`` and ``plait demo``
work there.

No network: the wheel is built with ``UV_OFFLINE=1`` (``uv sync`` left the build backend in
uv's cache) and installed with ``uv pip install --offline --no-deps``, and the
fresh environment reaches its dependencies through a ``.pth`` file naming this test's own
site-packages (appended after the fresh environment's own, so ``plait`` itself is
imported from the wheel; ``.pth`` files inside the appended directory, such as the
editable install of the checkout, are not processed). That the wheel declares those
dependencies is checked separately against its ``Requires-Dist``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "plait"

pytestmark = pytest.mark.slow


def _run(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"{argv}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("uv") is None:
        pytest.fail("uv is needed to build the wheel (it builds every environment here)")
    out = tmp_path_factory.mktemp("dist")
    # offline: the build backend is in uv's cache since `uv sync` built the checkout
    env = os.environ | {"UV_OFFLINE": "1"}
    _run(["uv", "build", "--wheel", "--out-dir", str(out)], cwd=ROOT, env=env)
    [built] = out.glob("plait-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh environment outside the repository with the wheel installed, and the
    environment variables to run it with."""
    base = tmp_path_factory.mktemp("installed")
    venv = base / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAIT_", "VIRTUAL_ENV"))}
    env |= {"HOME": str(base / "home"), "XDG_DATA_HOME": str(base / "data"), "UV_OFFLINE": "1"}
    (base / "home").mkdir()
    _run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], cwd=base, env=env)
    python = venv / "bin" / "python"
    _run(
        ["uv", "pip", "install", "--offline", "--no-deps", "--python", str(python), str(wheel)],
        cwd=base,
        env=env,
    )
    site = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=base,
        env=env,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(site) / "zz_dependencies_from_the_test_environment.pth").write_text(ours + "\n")
    return venv, env


def test_the_wheel_holds_every_data_file_of_the_package(wheel: Path) -> None:
    """Token encodings, console assets, demo data, schemas, the model catalog: every file
    under src/plait that is not Python source ships."""
    tracked = subprocess.run(
        ["git", "ls-files", "src/plait"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    data = {str(Path(p).relative_to("src")) for p in tracked if not p.endswith(".py")}
    assert {
        "plait/adapters/tokens/o200k_base.tiktoken",
        "plait/entrypoints/http/console/static/console.js",
        "plait/entrypoints/cli/demo_data/script.yaml",
    } <= data
    names = set(zipfile.ZipFile(wheel).namelist())
    assert data - names == set()
    assert {str(Path(p).relative_to("src")) for p in tracked if p.endswith(".py")} <= names
    assert "plait-" + wheel.name.split("-")[1] + ".dist-info/licenses/LICENSE" in names


def test_the_wheel_declares_the_dependencies_it_imports(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        [meta] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(meta).decode()
    required = {
        line.split(":", 1)[1].strip().split(">")[0].split("[")[0].split(";")[0].strip().lower()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert {"anthropic", "openai", "google-genai", "tiktoken", "fastapi", "mcp"} <= required
    assert "License: MIT" in text or "License-Expression: MIT" in text


def test_plait_version_runs_from_the_installed_wheel(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    venv, env = installed
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import plait; print(plait.__file__)"],
        cwd=tmp_path,
        env=env,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the wheel's copy, not the checkout's
    shown = _run([str(venv / "bin" / "plait"), "--version", "--json"], cwd=tmp_path, env=env)
    assert json.loads(shown.stdout)["version"] == _wheel_version(venv)


def test_plait_demo_runs_from_the_installed_wheel(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    venv, env = installed
    env = env | {"TMPDIR": str(tmp_path)}
    done = _run([str(venv / "bin" / "plait"), "demo", "--json"], cwd=tmp_path, env=env)
    report = json.loads(done.stdout)
    assert report["run"]["status"] == "completed"
    assert report["deploy_config_untouched"] is True
    assert Path(report["workspace"]).is_relative_to(tmp_path)  # nothing in the checkout


def _wheel_version(venv: Path) -> str:
    [info] = (venv / "lib").glob("python*/site-packages/plait-*.dist-info")
    return info.name.removeprefix("plait-").removesuffix(".dist-info")
