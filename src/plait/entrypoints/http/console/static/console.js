// plait console: vanilla JavaScript over the /v1 API (no build step, no third-party code).
// The API key is kept in sessionStorage (this tab only) and sent as a Bearer header; all
// text from the server is inserted with textContent, never as HTML.
"use strict";

const KEY = "plait.key";
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = String(value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function say(text) {
  $("status").textContent = text;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(KEY) };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch("/v1" + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = data.error || {};
    if (response.status === 401) sessionStorage.removeItem(KEY);
    throw new ApiError(response.status, err.code || "http_" + response.status,
      (err.message || "HTTP " + response.status) + (err.code ? " (" + err.code + ")" : ""));
  }
  return data;
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

function newRequestId() {
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// --- the live run: the SSE stream read with fetch (to send the key), resumed after a
// dropped connection with Last-Event-ID -------------------------------------------------

async function follow(runId, handlers, state) {
  state = state || { last: 0 };
  let tries = 0;
  for (;;) {
    try {
      const response = await fetch("/v1/runs/" + encodeURIComponent(runId) + "/events", {
        headers: {
          Authorization: "Bearer " + sessionStorage.getItem(KEY),
          "Last-Event-ID": String(state.last),
        },
      });
      if (!response.ok) throw new ApiError(response.status, "stream", "HTTP " + response.status);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("id:")) state.last = Number(line.slice(3).trim());
            else if (line.startsWith("event:")) event = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).trim());
          }
          if (!data.length) continue;
          tries = 0;
          const payload = JSON.parse(data.join("\n"));
          if (event === "run_finished") {
            // A wait that was decided since (or a replayed earlier stop): follow on.
            const now = payload.run.status.startsWith("awaiting_")
              ? await api("GET", "/runs/" + encodeURIComponent(runId)) : payload.run;
            if (now.status !== "queued" && now.status !== "running") {
              handlers.finished(now);
              return state;
            }
            continue;
          }
          if (event === "error") throw new ApiError(0, "stream", payload.error.message);
          if (event === "message" && handlers.message) handlers.message(payload.message);
        }
      }
    } catch (e) {
      if (e instanceof ApiError && e.status >= 400 && e.status < 500) throw e;
    }
    tries += 1;
    if (tries > 8) throw new Error("lost the run's event stream");
    if (handlers.reconnecting) handlers.reconnecting(tries);
    await new Promise((resolve) => setTimeout(resolve, Math.min(200 * 2 ** tries, 5000)));
  }
}

// --- pieces shared by pages -------------------------------------------------------------

function callsById(messages) {
  const calls = new Map();
  for (const m of messages) {
    for (const c of m.tool_calls || []) calls.set(c.call_id, c);
  }
  return calls;
}

function sessionIdFromPath() {
  return decodeURIComponent(location.pathname.split("/")[3] || "");
}

function approvalCard(approval, call, onDecided) {
  const id = approval.approval_id;
  const ttl = el("input", { id: "ttl-" + id, type: "number", min: "1", value: "3600", required: true });
  const reason = el("input", { id: "reason-" + id, type: "text", required: true });
  const approve = el("form", { class: "inline", "aria-label": "Approve " + id },
    el("label", { for: "ttl-" + id, text: "Approval lasts (seconds)" }), ttl,
    el("button", { type: "submit", text: "Approve" }));
  const deny = el("form", { class: "inline", "aria-label": "Deny " + id },
    el("label", { for: "reason-" + id, text: "Reason for denying (the model reads it)" }), reason,
    el("button", { type: "submit", text: "Deny" }));
  async function decide(event, verb, body) {
    event.preventDefault();
    try {
      const decided = await api("POST", "/approvals/" + encodeURIComponent(id) + "/" + verb, body);
      say(verb === "approve" ? "approved " + id + "; the run continues" : "denied " + id + "; the run continues");
      onDecided(decided);
    } catch (e) {
      say(e.message);
    }
  }
  approve.addEventListener("submit", (e) => decide(e, "approve", { ttl_seconds: Number(ttl.value) }));
  deny.addEventListener("submit", (e) => decide(e, "deny", { reason: reason.value }));
  return el("section", { class: "card approval", "data-approval": id, "aria-label": "Approval " + id },
    el("h3", { text: (approval.tool_name || "call") + " — waiting for a decision" }),
    el("p", {}, "Why it asks: ", el("strong", { text: approval.reason || "-" })),
    el("p", { text: "Call " + approval.call_id + ", run " + approval.run_id + ", session " +
      approval.session_id }),
    el("p", { text: "Requested " + (approval.requested_at || "-") + "; " + (approval.expires_at
      ? "valid until " + approval.expires_at : "no expiry yet (an approval lasts from when it is given)") }),
    el("p", { text: "Exact arguments:" }),
    el("pre", { class: "args", text: call ? pretty(call.arguments) : "(digest " + approval.args_digest + ")" }),
    approve, deny);
}

function unknownCard(run, call, onResolved) {
  const id = run.run_id;
  const note = el("input", { id: "note-" + id, type: "text", required: true });
  const status = el("select", { id: "outcome-" + id },
    el("option", { value: "succeeded", text: "it succeeded" }),
    el("option", { value: "failed", text: "it failed" }));
  const form = el("form", { class: "inline", "aria-label": "Resolve run " + id },
    el("label", { for: "outcome-" + id, text: "What happened" }), status,
    el("label", { for: "note-" + id, text: "Note (what you verified)" }), note,
    el("button", { type: "submit", text: "Resolve and continue" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = { call_id: call ? call.call_id : "", status: status.value, note: note.value };
      const resolved = await api("POST", "/runs/" + encodeURIComponent(id) + "/resolve", body);
      say("resolved; run " + id + " is " + resolved.status);
      onResolved(resolved);
    } catch (e) {
      say(e.message);
    }
  });
  return el("section", { class: "card unknown", "aria-label": "Unknown outcome in run " + id },
    el("h3", { text: "Outcome unknown: " + (call ? call.name : "a call") }),
    el("p", { text: "Recorded before the crash: " + (run.error ? run.error.message : "the call started") }),
    call ? el("pre", { class: "args", text: pretty(call.arguments) }) : null,
    form);
}

function unsettled(messages) {
  const settled = new Set(messages.filter((m) => m.kind === "tool_result").map((m) => m.call_id));
  const calls = [];
  for (const m of messages) for (const c of m.tool_calls || []) if (!settled.has(c.call_id)) calls.push(c);
  return calls;
}

// --- pages ------------------------------------------------------------------------------

async function sessionsPage(content) {
  const search = el("input", { id: "search", type: "search" });
  const owner = el("input", { id: "owner", type: "text" });
  const state = el("select", { id: "state" },
    el("option", { value: "", text: "any" }),
    el("option", { value: "active", text: "with an active run" }),
    el("option", { value: "idle", text: "idle" }));
  const table = el("tbody");
  const more = el("button", { type: "button", id: "more", text: "Older sessions", hidden: true });
  let before = null;
  let shown = [];
  function draw() {
    const needle = search.value.trim().toLowerCase();
    table.replaceChildren();
    for (const s of shown) {
      const hay = (s.session_id + " " + (s.title || "") + " " + (s.owner || "")).toLowerCase();
      if (needle && !hay.includes(needle)) continue;
      if (state.value && (state.value === "active") !== Boolean(s.active_run_id)) continue;
      table.append(el("tr", {},
        el("td", {}, el("a", { href: "/console/sessions/" + encodeURIComponent(s.session_id), text: s.session_id })),
        el("td", { text: s.title || "" }),
        el("td", { text: s.owner || "" }),
        el("td", { text: s.active_run_id ? "run " + s.active_run_id + " active" : "idle" }),
        el("td", { text: s.fork_origin ? "fork of " + s.fork_origin.parent_session_id : "" }),
        el("td", { text: s.created_at })));
    }
  }
  async function load(reset) {
    if (reset) { before = null; shown = []; }
    const query = new URLSearchParams({ limit: "25" });
    if (before) query.set("before", before);
    if (owner.value.trim()) query.set("owner", owner.value.trim());
    try {
      const page = await api("GET", "/sessions?" + query);
      shown = shown.concat(page.sessions);
      before = page.next_before || null;
      more.hidden = !before;
      draw();
      say(shown.length + " sessions, newest first");
    } catch (e) {
      say(e.message);
    }
  }
  const filters = el("form", { class: "inline", "aria-label": "Filter sessions" },
    el("label", { for: "search", text: "Search" }), search,
    el("label", { for: "state", text: "Status" }), state,
    el("label", { for: "owner", text: "Owner (admins)" }), owner,
    el("button", { type: "submit", text: "Apply" }));
  filters.addEventListener("submit", (e) => { e.preventDefault(); load(true); });
  search.addEventListener("input", draw);
  state.addEventListener("change", draw);
  more.addEventListener("click", () => load(false));
  content.append(filters, el("table", {},
    el("caption", { text: "Sessions" }),
    el("thead", {}, el("tr", {}, ...["Session", "Title", "Owner", "Status", "Fork", "Created"].map(
      (h) => el("th", { scope: "col", text: h })))),
    table), more);
  await load(true);
}

function sessionLink(id, text) {
  return el("a", { href: "/console/sessions/" + encodeURIComponent(id), text: text || id });
}

function messageNode(m, sessionId, canFork, onFork, children) {
  const node = el("article", { class: "msg " + m.kind, id: "m-" + m.message_id, "data-seq": m.seq },
    el("h3", { text: "[" + m.seq + "] " + (m.kind === "tool_result" ? m.tool_name + " → " : "") + m.kind }));
  if (m.kind === "tool_result") {
    node.append(el("p", {}, "Call " + m.call_id + ": ", el("span", { class: "status-" + m.status, text: m.status }),
      m.reason && m.reason !== m.content ? " — " + m.reason : ""));
    if (m.content) node.append(el("pre", { text: m.content }));
    if (m.artifact) {
      const where = el("pre", { hidden: true });
      const open = el("button", { type: "button", text: "Open artifact " + m.artifact.artifact_id });
      open.addEventListener("click", async () => {
        try {
          const q = new URLSearchParams({ artifact_id: m.artifact.artifact_id, offset: "0", length: "8000" });
          const got = await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/evidence?" + q);
          where.textContent = got.content === null ? "(expired)" : got.content;
          where.hidden = false;
        } catch (e) {
          say(e.message);
        }
      });
      node.append(open, where);
    }
  } else if (m.text) {
    node.append(el("pre", { text: m.text }));
  }
  for (const c of m.tool_calls || []) {
    node.append(el("p", { text: "→ " + c.name + " [" + c.call_id + "] with arguments:" }),
      el("pre", { class: "args", text: pretty(c.arguments) }));
    const child = children && children.get(m.run_id + " " + c.call_id);
    if (child) {
      node.append(el("p", { class: "subagent-child" }, "sub-agent " + child.agent + " (" + child.status + ") runs in ",
        sessionLink(child.session_id)));
    }
  }
  if (canFork) {
    node.append(el("button", { type: "button", class: "fork", text: "Fork from message " + m.seq,
      onclick: () => onFork(m) }));
  }
  return node;
}

function completePoints(messages) {
  // A fork point is complete when every call asked so far has its result and the last
  // message is not a user message still waiting for its answer.
  const points = new Set();
  const open = new Set();
  for (const m of messages) {
    for (const c of m.tool_calls || []) open.add(c.call_id);
    if (m.kind === "tool_result") open.delete(m.call_id);
    if (open.size === 0 && m.kind !== "user") points.add(m.message_id);
  }
  return points;
}

async function familyTree(sessionId, session, subagents, parent) {
  const all = [];
  let before = null;
  for (let page = 0; page < 20; page++) {
    const query = new URLSearchParams({ limit: "500" });
    if (before) query.set("before", before);
    const got = await api("GET", "/sessions?" + query);
    all.push(...got.sessions);
    before = got.next_before;
    if (!before) break;
  }
  const byId = new Map(all.map((s) => [s.session_id, s]));
  byId.set(sessionId, session);
  // Sub-agent links: this session's children (from /subagents) and its parent (from its
  // runs' `parent`); a fork's root is found through fork_origin.
  const subOf = new Map([[sessionId, subagents.filter((c, i) =>
    subagents.findIndex((x) => x.session_id === c.session_id) === i)]]);
  let root = session;
  let delegatedBy = parent;
  while (root.fork_origin && byId.has(root.fork_origin.parent_session_id)) {
    root = byId.get(root.fork_origin.parent_session_id);
  }
  if (root.session_id === sessionId && delegatedBy) {
    subOf.set(delegatedBy.session_id, [{ session_id: sessionId, agent: delegatedBy.agent, call_id: delegatedBy.call_id }]);
    root = byId.get(delegatedBy.session_id) || { session_id: delegatedBy.session_id };
    delegatedBy = null;
  }
  const seen = new Set();
  function branch(s, sub) {
    seen.add(s.session_id);
    const subs = (subOf.get(s.session_id) || []).filter((c) => !seen.has(c.session_id));
    const forks = all.filter((c) => c.fork_origin && c.fork_origin.parent_session_id === s.session_id &&
      !seen.has(c.session_id) && !subs.some((x) => x.session_id === c.session_id));
    const label = s.session_id === sessionId
      ? el("strong", { text: s.session_id + " (this session)" })
      : sessionLink(s.session_id);
    const how = sub ? " — sub-agent " + sub.agent + " for call " + sub.call_id
      : s.fork_origin ? " — forked after message " + s.fork_origin.fork_point_message_id : "";
    const kids = [...forks.map((c) => branch(c, null)),
      ...subs.map((c) => branch(byId.get(c.session_id) || { session_id: c.session_id }, c))];
    return el("li", { class: sub ? "subagent" : null }, label, how, kids.length ? el("ul", { class: "tree" }, ...kids) : null);
  }
  return el("section", { id: "tree", "aria-label": "Family tree" }, el("h2", { text: "Family tree" }),
    el("ul", { class: "tree" }, branch(root, null)));
}

async function sessionPage(content) {
  const sessionId = sessionIdFromPath();
  const head = el("section", { id: "head" });
  const history = el("section", { id: "history", "aria-label": "History" });
  const waiting = el("section", { id: "waiting", "aria-live": "polite" });
  const runLine = el("p", { id: "run", role: "status" });
  const text = el("textarea", { id: "message", rows: "3", required: true });
  const send = el("form", { id: "send", "aria-label": "Send a message" },
    el("label", { for: "message", text: "Message" }), text, el("button", { type: "submit", text: "Send" }));
  const cancel = el("button", { type: "button", id: "cancel", text: "Cancel the run", hidden: true });
  const treeHolder = el("div");
  content.append(head, treeHolder, history, waiting, runLine, cancel, send);
  let messages = [];
  let children = new Map();
  let following = null;
  let state = { last: 0 };

  async function fork(m) {
    try {
      const child = await api("POST", "/sessions/" + encodeURIComponent(sessionId) + "/fork",
        { through_message_id: m.message_id, request_id: newRequestId() });
      location.href = "/console/sessions/" + encodeURIComponent(child.session_id);
    } catch (e) {
      say(e.message);
    }
  }

  function drawHistory() {
    const points = completePoints(messages);
    history.replaceChildren(el("h2", { text: "History" }),
      ...messages.map((m) => messageNode(m, sessionId, points.has(m.message_id), fork, children)));
    if (!messages.length) history.append(el("p", { text: "No messages yet." }));
    if (location.hash) {
      const target = document.getElementById(location.hash.slice(1));
      if (target) { target.classList.add("target"); target.scrollIntoView(); }
    }
  }

  async function refresh() {
    const session = await api("GET", "/sessions/" + encodeURIComponent(sessionId));
    messages = (await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/messages?limit=1000")).messages;
    const subagents = (await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/subagents")).subagents;
    children = new Map(subagents.map((c) => [c.parent_run_id + " " + c.call_id, c]));
    const ownRuns = (await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/runs")).runs;
    const withParent = ownRuns.find((r) => r.parent);
    const parent = withParent ? withParent.parent : null;
    head.replaceChildren(
      el("p", { text: "Session " + session.session_id + (session.title ? " — " + session.title : "") +
        " · owner " + (session.owner || "-") + " · workspace " + (session.workspace || "-") }),
      parent ? el("p", { id: "parent-call" }, "sub-agent " + parent.agent + " for call " + parent.call_id +
        " of run " + parent.run_id + " in session ", sessionLink(parent.session_id)) : null,
      el("a", { href: "/console/sessions/" + encodeURIComponent(sessionId) + "/context", text: "Context of the next call" }));
    drawHistory();
    treeHolder.replaceChildren(await familyTree(sessionId, session, subagents, parent));
    waiting.replaceChildren();
    cancel.hidden = !session.active_run_id;
    if (!session.active_run_id) {
      const runs = (await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/runs")).runs;
      const last = runs[0];
      runLine.textContent = last ? "Last run " + last.run_id + ": " + last.status +
        (last.error ? " — " + last.error.message : "") : "No run yet.";
      return;
    }
    const run = await api("GET", "/runs/" + encodeURIComponent(session.active_run_id));
    showRun(run);
    if (run.status === "awaiting_approval") {
      const calls = callsById(messages);
      const found = (await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/approvals")).approvals;
      for (const a of found.filter((x) => x.status === "pending" && x.run_id === run.run_id)) {
        waiting.append(approvalCard(a, calls.get(a.call_id), () => watch(run.run_id)));
      }
    } else if (run.status === "awaiting_resolution") {
      for (const call of unsettled(messages)) {
        waiting.append(unknownCard(run, call, () => watch(run.run_id)));
      }
    } else {
      watch(run.run_id);
    }
  }

  function showRun(run) {
    runLine.textContent = "Run " + run.run_id + ": " + run.status + (run.error ? " — " + run.error.message : "");
    cancel.dataset.run = run.run_id;
  }

  function watch(runId) {
    if (following === runId) return;
    following = runId;
    cancel.hidden = false;
    cancel.dataset.run = runId;
    runLine.textContent = "Run " + runId + ": running…";
    follow(runId, {
      message(m) {
        if (messages.some((x) => x.message_id === m.message_id)) return;
        messages.push(m);
        drawHistory();
      },
      reconnecting(tries) { runLine.textContent = "Run " + runId + ": reconnecting (" + tries + ")…"; },
      finished(run) {
        following = null;
        showRun(run);
        refresh().catch((e) => say(e.message));
      },
    }, state).catch((e) => { following = null; say(e.message); });
  }

  send.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const run = await api("POST", "/sessions/" + encodeURIComponent(sessionId) + "/messages", { text: text.value });
      text.value = "";
      state = { last: 0 };
      const fresh = await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/messages?limit=1000");
      messages = fresh.messages;
      drawHistory();
      watch(run.run_id);
    } catch (e) {
      say(e.message);
    }
  });
  cancel.addEventListener("click", async () => {
    try {
      const run = await api("POST", "/runs/" + encodeURIComponent(cancel.dataset.run) + "/cancel", {});
      say("cancel requested: run " + run.run_id + " is " + run.status);
    } catch (e) {
      say(e.message);
    }
  });
  await refresh();
}

async function waitingItems(path, status, key) {
  // Every page of a cross-session listing, newest first (capped: the page says so).
  const all = [];
  let before = null;
  for (let page = 0; page < 20; page++) {
    const query = new URLSearchParams({ status, limit: "200" });
    if (before) query.set("before", before);
    const got = await api("GET", path + "?" + query);
    all.push(...got[key]);
    before = got.next_before;
    if (!before) return { items: all, more: false };
  }
  return { items: all, more: true };
}

function messagesOnce() {
  const cache = new Map();
  return (sessionId) => {
    if (!cache.has(sessionId)) cache.set(sessionId, sessionMessages(sessionId));
    return cache.get(sessionId);
  };
}

async function sessionMessages(sessionId) {
  return (await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/messages?limit=1000")).messages;
}

function afterDecision(list, runId, card) {
  card.replaceChildren(el("p", { class: "outcome", text: "Run " + runId + " continues…" }));
  follow(runId, {
    finished(run) {
      card.replaceChildren(el("p", { class: "outcome", text: "Run " + runId + ": " + run.status },
        " — ", el("a", { href: "/console/sessions/" + encodeURIComponent(run.session_id), text: "open the session" })));
    },
  }).catch((e) => say(e.message));
}

async function approvalsPage(content) {
  const list = el("section", { id: "inbox", "aria-label": "Waiting calls" });
  content.append(list);
  const { items, more } = await waitingItems("/approvals", "pending", "approvals");
  const messages = messagesOnce();
  for (const a of items) {
    const calls = callsById(await messages(a.session_id));
    // a sub-agent's request answers a call of its parent's run: that run continues
    const continues = a.parent ? a.parent.run_id : a.run_id;
    const holder = el("div");
    holder.append(approvalCard(a, calls.get(a.call_id), () => afterDecision(list, continues, holder)));
    list.append(holder);
  }
  const count = items.length;
  say((count ? count + (count === 1 ? " call waits" : " calls wait") + " for a decision"
    : "Nothing waits for a decision.") + (more ? " (the oldest are not shown)" : ""));
}

async function unknownPage(content) {
  const list = el("section", { id: "unknowns", "aria-label": "Unknown outcomes" });
  content.append(list);
  const { items, more } = await waitingItems("/runs", "awaiting_resolution", "runs");
  const messages = messagesOnce();
  let count = 0;
  for (const run of items) {
    const calls = callsById(await messages(run.session_id));
    for (const unknown of run.unknown_calls) {
      const call = calls.get(unknown.call_id) || { call_id: unknown.call_id, name: unknown.tool_name, arguments: "(not in the history)" };
      const holder = el("div");
      holder.append(unknownCard(run, call, () => afterDecision(list, run.run_id, holder)));
      list.append(holder);
      count += 1;
    }
  }
  say((count ? count + (count === 1 ? " call has" : " calls have") + " an unknown outcome"
    : "No call has an unknown outcome.") + (more ? " (the oldest are not shown)" : ""));
}

async function contextPage(content) {
  const sessionId = sessionIdFromPath();
  const base = "/console/sessions/" + encodeURIComponent(sessionId);
  content.append(el("p", {}, el("a", { href: base, text: "Back to session " + sessionId })));
  const view = await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/context");
  const budget = view.budget.input_budget || 1;
  const parts = Object.entries(view.tokens).filter(([k]) => !["total", "raw_history_alone"].includes(k));
  const bar = el("div", { class: "bar", role: "img",
    "aria-label": "Next call: " + view.tokens.total + " of " + budget + " input tokens" },
    ...parts.map(([name, n], i) => el("span", { class: "seg" + i, title: name + ": " + n,
      style: null, "data-width": Math.min(100, (100 * n) / budget).toFixed(2) })));
  for (const span of bar.children) span.style.width = span.dataset.width + "%";
  const rows = parts.map(([name, n], i) => el("tr", {}, el("td", {}, el("span", { class: "seg" + i, text: "  " }), " " + name.replaceAll("_", " ")),
    el("td", { text: String(n) })));
  content.append(el("h2", { text: "Budget" }), bar,
    el("p", { text: view.tokens.total + " of " + budget + " input tokens (window " + view.budget.context_window +
      ", compaction at " + view.budget.compaction_threshold + "); raw history alone: " + view.tokens.raw_history_alone }),
    el("table", {}, el("caption", { text: "Token breakdown of the next call" }),
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Part" }), el("th", { scope: "col", text: "Tokens" }))),
      el("tbody", {}, ...rows)));
  const summary = view.summary;
  content.append(el("h2", { text: "Active summary" }));
  if (!summary) {
    content.append(el("p", { text: "No summary: the next call sees the raw history." }));
  } else {
    content.append(el("p", { text: "Generation " + summary.generation + ", replaces " + summary.replaces_in_context }));
    if (summary.goal) content.append(el("p", { text: "Goal: " + summary.goal }));
    for (const key of ["constraints", "decisions", "open_questions"]) {
      const claims = summary[key] || [];
      if (!claims.length) continue;
      content.append(el("h3", { text: key.replaceAll("_", " ") }), el("ul", {}, ...claims.map((c) =>
        el("li", {}, c.text, " — sources: ", ...(c.source_ids || []).flatMap((id, i) => [
          i ? ", " : "", el("a", { class: "source", href: base + "#m-" + id, text: id })])))));
    }
  }
  content.append(el("h2", { text: "Constraints" }));
  content.append(view.constraints.length
    ? el("ul", {}, ...view.constraints.map((c) => el("li", { text: c.text || pretty(c) })))
    : el("p", { text: "No constraints." }));
  content.append(el("h2", { text: "Compaction history" }));
  const runs = (await api("GET", "/sessions/" + encodeURIComponent(sessionId) + "/runs")).runs;
  const history = el("ul", { id: "compactions" });
  for (const run of runs.filter((r) => r.status !== "queued" && r.status !== "running").slice(0, 20)) {
    for (const e of await endedRunEvents(run.run_id)) {
      if (e.event !== "compaction" || e.data.phase === "started") continue;
      history.append(el("li", { text: "run " + run.run_id + ", step " + e.data.step + ": " +
        e.data.phase + " (" + e.data.trigger + ")" + (e.data.detail ? " — " + e.data.detail : "") }));
    }
  }
  content.append(el("p", { text: summary
    ? "The active summary is generation " + summary.generation + " and covers messages 1.." +
      summary.covers.through_seq + "."
    : "No summary is active." }),
    history.children.length ? history
      : el("p", { text: "No compaction during the last " + Math.min(runs.length, 20) + " runs." }));
}

async function endedRunEvents(runId) {
  // The stream of a run that has stopped ends after its run_finished event.
  const response = await fetch("/v1/runs/" + encodeURIComponent(runId) + "/events", {
    headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY), "Last-Event-ID": "0" },
  });
  if (!response.ok) return [];
  const events = [];
  for (const block of (await response.text()).split("\n\n")) {
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).trim());
    }
    if (data.length) events.push({ event, data: JSON.parse(data.join("\n")) });
  }
  return events;
}

const PAGES = {
  sessions: sessionsPage,
  session: sessionPage,
  approvals: approvalsPage,
  unknown: unknownPage,
  context: contextPage,
};

async function start() {
  const login = $("login");
  const logout = $("logout");
  logout.addEventListener("click", () => { sessionStorage.removeItem(KEY); location.reload(); });
  if (!sessionStorage.getItem(KEY)) {
    login.hidden = false;
    $("key").focus();
    login.addEventListener("submit", async (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, $("key").value.trim());
      try {
        await api("GET", "/sessions?limit=1");
        location.reload();
      } catch (e) {
        sessionStorage.removeItem(KEY);
        say(e.message);
      }
    });
    return;
  }
  logout.hidden = false;
  const content = $("content");
  try {
    await PAGES[document.body.dataset.page](content);
  } catch (e) {
    say(e.message);
  }
}

document.addEventListener("DOMContentLoaded", start);
