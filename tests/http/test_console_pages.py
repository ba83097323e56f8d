"""The console's pages and assets as served (no browser): static shells that hold no
data, with a strict Content-Security-Policy; an unknown asset is ``not_found``."""

from __future__ import annotations

import pytest

from tests.http.conftest import Live
from tests.http.test_api import error, new_session


@pytest.mark.slow
def test_pages_are_data_free_shells_with_a_strict_policy(live: Live) -> None:
    with live.client("alice") as alice:
        sid = new_session(alice, title="alice's secret plan")["session_id"]
    with live.client(None) as anonymous:
        for path in ("/", "/console/approvals", "/console/unknown",
                     f"/console/sessions/{sid}", f"/console/sessions/{sid}/context"):  # fmt: skip
            page = anonymous.get(path)
            assert page.status_code == 200, path
            assert page.headers["content-type"].startswith("text/html")
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert "secret plan" not in page.text and sid not in page.text  # no data
            assert 'id="login"' in page.text and "<script src=" in page.text
        script = anonymous.get("/console/static/console.js")
        assert script.status_code == 200 and "textContent" in script.text
        assert ".innerHTML" not in script.text  # text is never parsed as HTML
        assert "sessionStorage" in script.text and "document.cookie" not in script.text
        assert anonymous.get("/console/static/console.css").status_code == 200
        error(anonymous.get("/console/static/page.html"), 404, "not_found")
        error(anonymous.get("/console/static/..%2f__init__.py"), 404, "not_found")
        # the data itself is the API's, behind the key
        error(anonymous.get(f"/v1/sessions/{sid}"), 401, "unauthorized")
        paths = anonymous.get("/v1/openapi.json").json()["paths"]
        assert paths and all(p.startswith("/v1/") for p in paths)  # the console is not API
