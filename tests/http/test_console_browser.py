"""The web console in real headless Chromium (Debian's ``chromium``, driven by
Playwright's Python API; nothing is downloaded): log in with a key, watch a live run,
approve and deny waiting calls, and another principal's session is not reachable. Each
page is checked for labelled, keyboard-reachable controls and photographed (into a temp
dir; with ``PLAIT_CONSOLE_SHOTS=DIR`` into DIR, e.g. ``docs/console``)."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.testing import FunctionModel
from tests.http.conftest import ASK_ECHO, Live, behaviour, serve_live
from tests.http.test_api import new_session, wait_terminal
from tests.http.test_resolve import _awaiting, _stranded
from tests.http.test_subagents_api import serve_delegating

T = TypeVar("T")

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip

if shutil.which(CHROMIUM) is None:
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but Debian's chromium is not installed", pytrace=False)
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()


def _threaded(served: Iterator[Live]) -> Iterator[Live]:
    """A live server set up in another thread: Playwright's sync API keeps an event loop
    running in this one, where ``asyncio.run`` is refused."""
    live = in_thread(next, served)
    yield live
    for _ in served:  # the server's teardown
        pass


def in_thread(fn: Callable[..., T], *args: Any) -> T:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    yield from _threaded(serve_live(tmp_path))


@pytest.fixture
def delegating(tmp_path: Path) -> Iterator[Live]:
    """A server whose model delegates each message to the ``helper`` sub-agent."""
    yield from _threaded(serve_delegating(tmp_path))


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[Live]:
    yield from _threaded(serve_live(tmp_path, policy=ASK_ECHO))


async def _summarizing(request: ModelRequest) -> ModelResponse:
    """``behaviour``, and a summarizer whose one constraint cites the first message of
    the transcript it is given."""
    if request.role == "summarizer":
        seen = " ".join(str(getattr(item, "text", "")) for item in request.context.items)
        first = re.findall(r"msg_[0-9a-z]+", seen)[:1]
        body = {
            "goal": "echo",
            "constraints": [{"text": "never touch deploy/", "source_ids": first}],
        }
        return ModelResponse(structured=body, model="m")
    return await behaviour(request)


def _windowed(tmp_path: Path, window: int) -> Iterator[Live]:
    caps = ModelCapabilities(context_window=window, max_output_tokens=300, structured_output=True)
    model = FunctionModel(_summarizing, name="m", capabilities=caps)
    yield from _threaded(serve_live(tmp_path, model=model, max_body_bytes=100_000))


@pytest.fixture
def compacting(tmp_path: Path) -> Iterator[Live]:
    """A server whose model has a context window (so compaction is on)."""
    yield from _windowed(tmp_path, 100_000)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Live]:
    """A 3,000-token window: a long message compacts during its run."""
    yield from _windowed(tmp_path, 3_000)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("PLAIT_CONSOLE_SHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        return Path(target)
    return tmp_path_factory.mktemp("console-shots")


def login(page: Any, live: Live, who: str, path: str = "/") -> None:
    page.goto(live.url + path)
    page.get_by_label("API key").fill(live.keys[who])
    page.get_by_role("button", name="Log in").click()
    page.wait_for_selector("#logout:not([hidden])")


# Every control has an accessible name and is reachable with the keyboard (an equivalent
# of axe-core's "label", "button-name" and "link-name" rules plus a tab-order check).
A11Y = """() => {
  const bad = [];
  for (const e of document.querySelectorAll('a, button, input, select, textarea')) {
    if (e.hidden || e.closest('[hidden]') || e.type === 'hidden') continue;
    const labelled = (e.labels && e.labels.length && e.labels[0].textContent.trim())
      || e.getAttribute('aria-label') || e.textContent.trim();
    if (!labelled) bad.push('unlabelled ' + e.outerHTML.slice(0, 80));
    if (e.tabIndex < 0 || e.disabled) bad.push('unreachable ' + e.outerHTML.slice(0, 80));
  }
  return bad;
}"""


CONTROLS = """() => {
  const shown = [...document.querySelectorAll('a, button, input, select, textarea')]
    .filter((e) => !e.closest('[hidden]') && e.getClientRects().length);
  shown.forEach((e, i) => { e.dataset.kb = String(i); });
  return shown.length;
}"""


def check_page(page: Any, shots: Path, name: str) -> None:
    assert page.evaluate(A11Y) == []
    # ... and the keyboard really reaches every one of them: Tab through the page. A page
    # that re-renders a part meanwhile (a live run's last refresh) replaces tagged
    # controls with untagged ones: the pass is made again on the page as it is then.
    for _attempt in range(3):
        count = page.evaluate(CONTROLS)
        reached = set()
        for _ in range(2 * count + 4):
            page.keyboard.press("Tab")
            reached.add(page.evaluate("() => document.activeElement.dataset.kb || null"))
        if {str(n) for n in range(count)} <= reached:
            break
    assert {str(n) for n in range(count)} <= reached, (name, count, reached)
    page.evaluate("() => document.activeElement.blur()")
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)


def wait_status(c: Any, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 15
    while (run := c.get(f"/v1/runs/{run_id}").json())["status"] != status:
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def test_login_watch_a_live_run_and_sessions_list(page: Any, live: Live, shots: Path) -> None:
    with live.client("alice") as c:
        sid = new_session(c, title="<b>not bold</b>")["session_id"]
    page.goto(live.url + f"/console/sessions/{sid}")
    assert page.get_by_label("API key").is_visible()
    check_page(page, shots, "login")
    page.get_by_label("API key").fill("wrong-key")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_selector("#status:has-text('unauthorized')")

    login(page, live, "alice", f"/console/sessions/{sid}")
    page.get_by_label("Message", exact=True).fill("stream <script>x</script> hello")
    page.get_by_role("button", name="Send", exact=True).click()
    page.wait_for_selector("text=answer to stream <script>x</script> hello")
    page.wait_for_selector("#run:has-text('completed')")
    assert page.locator("article.msg").count() == 2  # the user's message and the answer
    check_page(page, shots, "session")

    page.goto(live.url + "/")
    page.wait_for_selector(f"a:has-text('{sid}')")
    assert page.locator("td", has_text="<b>not bold</b>").count() == 1  # escaped, as text
    assert page.locator("b", has_text="not bold").count() == 0
    check_page(page, shots, "sessions")
    rows = page.locator("tbody tr")
    page.get_by_label("Search").fill("no such title")
    assert rows.count() == 0
    page.get_by_label("Search").fill("NOT BOLD")
    assert rows.count() == 1
    page.get_by_label("Status").select_option("active")
    assert rows.count() == 0  # its run ended
    page.get_by_label("Status").select_option("idle")
    assert rows.count() == 1


def test_approve_in_the_inbox_and_the_run_continues(page: Any, gated: Live, shots: Path) -> None:
    with gated.client("alice") as c:
        sid = new_session(c)["session_id"]
        run_id = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool ping"}).json()["run_id"]
        wait_status(c, run_id, "awaiting_approval")
    login(page, gated, "alice", "/console/approvals")
    card = page.locator("section.approval")
    card.wait_for()
    assert '"text": "tool ping"' in card.locator("pre.args").inner_text()  # exact arguments
    assert "ask-echo" in card.inner_text()  # the rule that asked
    check_page(page, shots, "approvals")
    page.get_by_label("Approval lasts (seconds)").fill("600")
    page.get_by_role("button", name="Approve", exact=True).click()
    page.wait_for_selector(".outcome:has-text('completed')")
    with gated.client("alice") as c:
        final = wait_terminal(c, run_id)
        texts = [m.get("text") for m in c.get(f"/v1/sessions/{sid}/messages").json()["messages"]]
    assert final["status"] == "completed"
    assert "answer to tool ping" in texts


def test_deny_on_the_session_page_and_the_model_reads_it(page: Any, gated: Live) -> None:
    with gated.client("alice") as c:
        sid = new_session(c)["session_id"]
        run_id = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool rm"}).json()["run_id"]
        wait_status(c, run_id, "awaiting_approval")
    login(page, gated, "alice", f"/console/sessions/{sid}")
    page.locator("section.approval").wait_for()
    page.get_by_label("Reason for denying (the model reads it)").fill("not on a friday")
    page.get_by_role("button", name="Deny", exact=True).click()
    answer = page.locator("article.assistant", has_text="understood, not doing it:")
    answer.wait_for()
    assert "not on a friday" in answer.inner_text()  # the model read the denial
    page.wait_for_selector("#run:has-text('completed')")
    assert page.locator("span.status-denied").count() == 1
    call_args = page.locator("article.assistant pre.args").first.inner_text()
    assert '"text": "tool rm"' in call_args  # the call's arguments in the history


def test_another_principals_session_is_not_reachable(page: Any, live: Live) -> None:
    with live.client("alice") as c:
        sid = new_session(c, title="alice's secret")["session_id"]
    login(page, live, "bob", f"/console/sessions/{sid}")
    page.wait_for_selector("#status:has-text('not_found')")
    assert "alice's secret" not in page.content()
    page.goto(live.url + "/")
    page.wait_for_selector("#status:has-text('sessions')")
    assert page.locator(f"a:has-text('{sid}')").count() == 0
    page.get_by_role("button", name="Log out").click()
    login(page, live, "root", "/")  # an admin sees everyone's
    page.wait_for_selector(f"a:has-text('{sid}')")


def test_resolve_an_unknown_outcome_and_the_run_continues(
    page: Any, live: Live, shots: Path
) -> None:
    with live.client("alice") as c:
        sid = new_session(c)["session_id"]
    in_thread(_stranded, lambda: SqliteStore.open(live.store_path), sid, "tool deploy")
    with live.client("alice") as c:
        run_id = _awaiting(c, sid)["run_id"]
    login(page, live, "alice", "/console/unknown")
    card = page.locator("section.unknown")
    card.wait_for()
    assert '"text": "deployed"' in card.inner_text()  # the call, exactly
    assert "whether its effect happened is unknown" in card.inner_text()  # what was recorded
    check_page(page, shots, "unknown")
    page.get_by_label("What happened").select_option("succeeded")
    page.get_by_label("Note (what you verified)").fill("the line is there")
    page.get_by_role("button", name="Resolve and continue").click()
    page.wait_for_selector(".outcome:has-text('completed')")
    with live.client("alice") as c:
        assert wait_terminal(c, run_id)["status"] == "completed"
        result = c.get(f"/v1/sessions/{sid}/messages").json()["messages"][2]
    assert (result["status"], result["content"]) == (
        "succeeded",
        "the line is there (outcome verified by alice)",
    )


def test_fork_from_a_complete_point_and_see_the_tree(page: Any, live: Live, shots: Path) -> None:
    with live.client("alice") as c:
        sid = new_session(c, title="parent")["session_id"]
        for text in ("tool one", "two"):
            run = c.post(f"/v1/sessions/{sid}/messages", json={"text": text}).json()
            assert wait_terminal(c, run["run_id"])["status"] == "completed"
    login(page, live, "alice", f"/console/sessions/{sid}")
    page.locator("article.msg").nth(5).wait_for()
    # only complete points: not a user message, not an assistant turn with its call open
    offered = page.locator("button.fork").all_inner_texts()
    assert offered == ["Fork from message 3", "Fork from message 4", "Fork from message 6"]
    with page.expect_navigation():
        page.get_by_role("button", name="Fork from message 4").click()
    page.wait_for_selector("#tree strong:has-text('(this session)')")
    child = page.url.rsplit("/", 1)[1]
    assert child != sid
    assert page.locator(f"#tree a:has-text('{sid}')").count() == 1  # the parent, linked
    assert page.locator("article.msg").count() == 4  # the history through the fork point
    check_page(page, shots, "fork")


def test_context_page_follows_a_claim_to_its_source(
    page: Any, compacting: Live, shots: Path
) -> None:
    with compacting.client("alice") as c:
        sid = new_session(c)["session_id"]
        filler = " and ".join(["the notes say many things"] * 60)  # worth summarizing
        big = "z" * 40_000  # over the tool output cap: the result keeps it as an artifact
        for text in (f"tool first: never touch deploy/ {filler}", f"tool {big}", "tool third"):
            run = c.post(f"/v1/sessions/{sid}/messages", json={"text": text}).json()
            assert wait_terminal(c, run["run_id"])["status"] == "completed"
        done = c.post(f"/v1/sessions/{sid}/compact")
        assert done.status_code == 200 and done.json()["status"] == "compacted", done.text
    login(page, compacting, "alice", f"/console/sessions/{sid}/context")
    page.locator(".bar").wait_for()
    assert "Generation 1" in page.locator("#content").inner_text()
    check_page(page, shots, "context")
    link = page.locator("a.source").first
    source = link.inner_text()
    link.click()
    target = page.locator(f"#m-{source}")
    target.wait_for()
    assert "target" in (target.get_attribute("class") or "")
    assert "never touch deploy/" in target.inner_text()
    # an artifact opens in place, on the session page
    opener = page.get_by_role("button", name=re.compile("^Open artifact "))
    opener.first.click()
    shown = page.locator("article.tool_result pre:not([hidden])", has_text="zzzzzzzzzz").last
    shown.wait_for()
    assert len(shown.inner_text()) >= 8_000


def test_the_live_run_resumes_after_a_dropped_stream(page: Any, live: Live) -> None:
    """The first event stream is cut after its first event: the page reconnects with
    Last-Event-ID and shows every message once, and the run's end."""
    with live.client("alice") as c:
        sid = new_session(c)["session_id"]
    asked: list[str | None] = []

    def cut_the_first(route: Any) -> None:
        asked.append(route.request.headers.get("last-event-id"))
        if len(asked) > 1:
            route.continue_()
            return
        blocks = route.fetch().text().split("\n\n")
        upto = next(n for n, b in enumerate(blocks) if b.startswith("id:") or "\nid:" in b)
        first = "\n\n".join(blocks[: upto + 1]) + "\n\n"
        route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=first)

    page.route("**/v1/runs/*/events", cut_the_first)
    login(page, live, "alice", f"/console/sessions/{sid}")
    page.get_by_label("Message", exact=True).fill("tool again")
    page.get_by_role("button", name="Send", exact=True).click()
    page.wait_for_selector("#run:has-text('completed')")
    assert asked[0] == "0" and asked[1] is not None and int(asked[1]) > 0
    assert page.locator("article.msg").count() == 4  # user, call, result, answer: once each
    assert page.locator("article.assistant", has_text="answer to tool again").count() == 1


def test_context_page_lists_the_compactions_of_the_runs(page: Any, small: Live) -> None:
    with small.client("alice") as c:
        sid = new_session(c)["session_id"]
        run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool " + "y" * 2_400})
        assert wait_terminal(c, run.json()["run_id"])["status"] == "completed"
    login(page, small, "alice", f"/console/sessions/{sid}/context")
    entry = page.locator("#compactions li").first
    entry.wait_for()
    text = entry.inner_text()
    assert text.startswith(f"run {run.json()['run_id']}, step 1: activated (pressure)")
    assert "summarized messages 1..1" in text


def test_a_delegate_call_links_to_its_sub_agent_session_and_back(
    page: Any, delegating: Live, shots: Path
) -> None:
    with delegating.client("alice") as c:
        parent = new_session(c)["session_id"]
        run = c.post(f"/v1/sessions/{parent}/messages", json={"text": "<i>sort</i> it"}).json()
        assert wait_terminal(c, run["run_id"])["status"] == "completed"
        (child,) = c.get(f"/v1/sessions/{parent}/subagents").json()["subagents"]
    login(page, delegating, "alice", f"/console/sessions/{parent}")
    page.wait_for_selector("text=the result: helped with <i>sort</i> it")
    assert page.locator("i", has_text="sort").count() == 0  # escaped, as text
    link = page.locator("#history .subagent-child a")
    assert link.inner_text() == child["session_id"]
    assert "sub-agent helper (completed)" in page.locator(".subagent-child").inner_text()
    sub = page.locator("#tree li.subagent")
    assert sub.locator("a").inner_text() == child["session_id"]
    assert "sub-agent helper for call d1" in sub.inner_text()
    check_page(page, shots, "subagent-parent")

    link.click()
    page.wait_for_selector("#parent-call")
    assert page.url.endswith(f"/console/sessions/{child['session_id']}")
    line = page.locator("#parent-call").inner_text()
    assert line == f"sub-agent helper for call d1 of run {run['run_id']} in session {parent}"
    page.wait_for_selector("text=helped with <i>sort</i> it")
    tree = page.locator("#tree").inner_text()
    assert f"{child['session_id']} (this session) — sub-agent helper for call d1" in tree
    check_page(page, shots, "subagent-child")
    page.locator("#parent-call a").click()
    page.wait_for_selector("#history .subagent-child a")
    assert page.url.endswith(f"/console/sessions/{parent}")
