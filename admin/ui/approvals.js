// approvals.js drives aguard's approvals page (approvals.html): it lists the
// tool calls awaiting a decision (GET /v1/approvals), with who asked, the
// policy's reason and the arguments with their digest, and approves or
// rejects them (POST /v1/tool-calls/{id}/approve and /reject, with
// ?threadId=) once the reviewer confirms. An approval carries the digest of
// the arguments shown: the API refuses it (409 arguments_changed) for any
// others. The decision is recorded in the name the token stands for (GET
// /v1/whoami); a viewer's token reads but cannot decide.
//
// Everything the API returns is untrusted: tool names, ids and arguments come
// from a model. The page therefore builds its DOM with createElement and
// textContent only and never parses data as HTML.
//
// The admin token lives in sessionStorage (this tab only, gone when it
// closes) and travels only in the Authorization header, never in a URL.
"use strict";

(() => {
  const TOKEN_KEY = "aguard.adminToken";
  const REFRESH_MS = 10000;
  // The API sits at /v1/ next to /ui/; resolving relatively keeps the page
  // working behind a proxy that adds a path prefix.
  const API_BASE = new URL("../v1/", location.href);

  const byId = (id) => document.getElementById(id);
  const ui = {
    tokenForm: byId("token-form"),
    tokenMessage: byId("token-message"),
    token: byId("token"),
    whoami: byId("whoami"),
    refresh: byId("refresh"),
    forget: byId("forget"),
    status: byId("status"),
    empty: byId("empty"),
    calls: byId("calls"),
  };

  // rows maps a call (its thread and id: two threads may hold the same id)
  // to its row on the page. A row's state is "pending",
  // "busy" (a decision is in flight), "approved", "rejected" or "failed"
  // (the API refused the decision). Decided and failed rows stay until the
  // next listing that no longer has them.
  const rows = new Map();
  // me is the reviewer the token names ({name, role}), once known.
  let me = null;
  let refreshTimer = 0;
  let listing = 0; // sequence number of the latest listing request

  // el returns a new element with an optional class and text.
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // str returns v if it is a string, else "".
  const str = (v) => (typeof v === "string" ? v : "");

  // pathSegment escapes an id for one URL path segment; dots too, so that an
  // id of "." or ".." cannot move the request to another endpoint.
  const pathSegment = (s) => encodeURIComponent(s).replace(/\./g, "%2E");

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  // askForToken forgets the token, stops refreshing and shows the token form.
  function askForToken(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    me = null;
    ui.whoami.textContent = "";
    clearTimeout(refreshTimer);
    ui.tokenMessage.textContent = message;
    ui.tokenForm.hidden = false;
    ui.token.value = "";
    ui.token.focus();
  }

  // callAPI sends one request to the admin API and returns its status and
  // decoded JSON body (null when the body is not JSON). It rejects only when
  // the API cannot be reached.
  async function callAPI(method, path, body) {
    const init = {
      method,
      headers: { Authorization: "Bearer " + token(), Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(new URL(path, API_BASE), init);
    let data = null;
    try {
      data = await resp.json();
    } catch {
      // Not JSON (say, a proxy's error page); errorText falls back to the status.
    }
    return { status: resp.status, data };
  }

  // errorText describes a failed API answer: the API's message and code when
  // it sent {"error":{…}}, else the HTTP status.
  function errorText(res) {
    const err = res.data && res.data.error;
    if (err && str(err.message)) {
      return str(err.code) ? `${err.message} (${err.code})` : err.message;
    }
    return `the admin API answered HTTP ${res.status}`;
  }

  // scheduleRefresh (re)starts the auto-refresh countdown. Deciding restarts
  // it too, so an outcome stays on screen a full interval before its row goes.
  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, REFRESH_MS);
  }

  // refresh lists the calls awaiting a decision and updates the rows.
  async function refresh() {
    if (!token()) {
      askForToken("Enter the admin token to list the tool calls awaiting approval.");
      return;
    }
    scheduleRefresh();
    const seq = ++listing;
    ui.status.textContent = "Loading…";
    let res;
    try {
      if (!me) await whoami();
      res = await callAPI("GET", "approvals");
    } catch (err) {
      if (seq === listing) ui.status.textContent = `Could not reach the admin API: ${err.message}`;
      return;
    }
    if (seq !== listing) return; // a newer listing is under way
    if (res.status === 401) {
      askForToken("The admin API refused the token; enter it again.");
      ui.status.textContent = "";
      return;
    }
    if (res.status !== 200 || !res.data || !Array.isArray(res.data.toolCalls)) {
      ui.status.textContent = `Listing the approvals failed: ${errorText(res)}`;
      return;
    }
    render(res.data.toolCalls);
    const n = rows.size;
    ui.status.textContent = `Updated ${new Date().toLocaleTimeString()} · refreshes every ${REFRESH_MS / 1000} s`;
    ui.empty.hidden = n > 0;
  }

  // whoami asks whose the token is, and shows it; a viewer's rows cannot
  // be decided.
  async function whoami() {
    const res = await callAPI("GET", "whoami");
    if (res.status !== 200 || !res.data) return;
    me = { name: str(res.data.name), role: str(res.data.role) };
    ui.whoami.textContent = `Signed in as ${me.name} (${me.role})`;
    for (const row of rows.values()) lockForViewer(row);
  }

  const canDecide = () => !!me && me.role === "reviewer";

  // lockForViewer disables a pending row's decision for a viewer.
  function lockForViewer(row) {
    if (row.state !== "pending" || canDecide()) return;
    for (const b of row.buttons) b.disabled = true;
    row.reason.disabled = true;
    showOutcome(row, "", "Your token may view calls, not decide them.");
  }

  // rowKey identifies a call's row: its thread and its id.
  const rowKey = (call) => JSON.stringify([str(call.threadId), str(call.id)]);

  // deadlineOf returns the call's approval deadline in ms, or NaN without one.
  const deadlineOf = (call) => Date.parse(str(call.requiresApprovalAt));

  // render makes the list match calls: new calls get a row, rows of calls no
  // longer awaiting a decision go (unless a decision on them is in flight),
  // and rows keep what the reviewer typed. Rows are ordered by deadline.
  function render(calls) {
    const listed = new Map();
    for (const call of calls) {
      if (call && typeof call === "object" && str(call.id)) listed.set(rowKey(call), call);
    }
    for (const [key, row] of rows) {
      if (!listed.has(key) && row.state !== "busy") {
        row.li.remove();
        rows.delete(key);
      }
    }
    for (const [key, call] of listed) {
      if (!rows.has(key)) rows.set(key, makeRow(call));
    }
    const ordered = [...rows.values()].sort((a, b) => {
      const da = deadlineOf(a.call), db = deadlineOf(b.call);
      if (da !== db) {
        if (Number.isNaN(da)) return 1;
        if (Number.isNaN(db)) return -1;
        return da - db;
      }
      return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    });
    // Move only the rows out of place, so that a field being typed in keeps
    // its focus across refreshes.
    let at = ui.calls.firstChild;
    for (const row of ordered) {
      if (row.li === at) at = at.nextSibling;
      else ui.calls.insertBefore(row.li, at);
    }
    tick();
  }

  // field returns a labelled text input.
  function field(label, className, value) {
    const wrap = el("label", "field");
    wrap.append(el("span", "field-label", label));
    const input = el("input", className);
    input.type = "text";
    input.value = value;
    input.spellcheck = false;
    wrap.append(input);
    return { wrap, input };
  }

  // makeRow builds the row of one call awaiting a decision.
  function makeRow(call) {
    const id = call.id;
    const li = el("li", "call");
    li.dataset.state = "pending";

    const head = el("div", "call-head");
    head.append(el("h2", "tool-name", str(call.name) || "(unnamed tool)"));
    const badge = el("span", "badge", "awaiting approval");
    head.append(badge);
    li.append(head);

    const meta = el("dl", "meta");
    const addMeta = (term, value, className) => {
      meta.append(el("dt", "", term));
      const dd = el("dd", className || "");
      if (value instanceof Node) dd.append(value);
      else dd.textContent = value;
      meta.append(dd);
      return dd;
    };
    addMeta("Requested by", str(call.requestedBy) || "— (not authenticated)", "requested-by");
    addMeta("Call id", id, "mono");
    addMeta("Thread", str(call.threadId) || "—", "mono");
    if (str(call.runId)) addMeta("Run", call.runId, "mono");
    const deadline = el("span");
    const remaining = el("span", "remaining");
    const when = deadlineOf(call);
    if (Number.isNaN(when)) {
      deadline.textContent = str(call.requiresApprovalAt) || "no deadline";
    } else {
      deadline.textContent = new Date(when).toLocaleString();
      deadline.title = call.requiresApprovalAt;
    }
    const deadlineBox = el("span");
    deadlineBox.append(deadline, " ", remaining);
    addMeta("Deadline", deadlineBox);
    if (str(call.decisionId)) addMeta("Decision", call.decisionId, "mono");
    if (str(call.policyRevision)) addMeta("Policy revision", call.policyRevision, "mono");
    li.append(meta);

    if (str(call.decisionReason)) {
      const why = el("p", "policy-reason");
      why.append(el("span", "label", "Why the policy asks: "), el("span", "reason-text", call.decisionReason));
      li.append(why);
    }
    if (str(call.description)) li.append(el("p", "description", call.description));

    li.append(el("h3", "args-title", "Arguments"));
    li.append(el("pre", "arguments", argumentsText(call)));
    const digest = str(call.argumentsDigest);
    const digestLine = el("p", "digest");
    digestLine.append(el("span", "label", "SHA-256 "), el("span", "mono digest-value", digest || "(none)"));
    li.append(digestLine);

    const form = el("div", "decision");
    const reason = field("Reason (optional)", "reason", "");
    const approve = el("button", "approve", "Approve…");
    const reject = el("button", "reject", "Reject…");
    approve.type = reject.type = "button";
    form.append(reason.wrap, approve, reject);
    li.append(form);

    // The confirmation: what is about to be decided, said once more.
    const confirm = el("div", "confirm");
    confirm.hidden = true;
    confirm.setAttribute("role", "alertdialog");
    const question = el("p", "confirm-text");
    const yes = el("button", "confirm-yes", "Confirm");
    const no = el("button", "confirm-no quiet", "Cancel");
    yes.type = no.type = "button";
    confirm.append(question, yes, no);
    li.append(confirm);

    const outcome = el("p", "outcome");
    outcome.setAttribute("role", "status");
    li.append(outcome);

    const row = {
      id, key: rowKey(call), thread: str(call.threadId), call, li, badge, remaining, outcome,
      reason: reason.input, confirm, question, yes,
      buttons: [approve, reject],
      state: "pending",
      asking: null, // true: approve, false: reject awaits confirmation
    };
    approve.addEventListener("click", () => ask(row, true));
    reject.addEventListener("click", () => ask(row, false));
    yes.addEventListener("click", () => { if (row.asking !== null) decide(row, row.asking); });
    no.addEventListener("click", () => closeConfirm(row));
    lockForViewer(row);
    return row;
  }

  // ask shows the confirmation of a decision on row's call.
  function ask(row, approve) {
    if (row.state !== "pending" || !canDecide()) return;
    const call = row.call;
    const who = str(call.requestedBy) || "an unauthenticated consumer";
    const digest = str(call.argumentsDigest);
    row.asking = approve;
    row.question.textContent = approve
      ? `Approve ${str(call.name) || "this call"}, asked by ${who}, with the arguments shown (SHA-256 ${digest.slice(0, 12) || "none"}…)? The application then executes it.`
      : `Reject ${str(call.name) || "this call"}, asked by ${who}? The call is declined.`;
    row.yes.textContent = approve ? "Confirm approval" : "Confirm rejection";
    row.yes.className = "confirm-yes " + (approve ? "approve" : "reject");
    row.confirm.hidden = false;
    row.yes.focus();
  }

  function closeConfirm(row) {
    row.asking = null;
    row.confirm.hidden = true;
  }

  // argumentsText pretty-prints the arguments object, or shows the verbatim
  // text of arguments that were not a JSON object.
  function argumentsText(call) {
    const args = call.argumentsJson;
    if (args !== undefined && args !== null) return JSON.stringify(args, null, 2);
    if (str(call.argumentsText)) return call.argumentsText;
    return "(no arguments)";
  }

  // formatRemaining says how long is left until ms, e.g. "in 4m 05s".
  function formatRemaining(ms) {
    if (ms <= 0) return "deadline passed";
    const s = Math.floor(ms / 1000);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    const pad = (n) => String(n).padStart(2, "0");
    if (h > 0) return `in ${h}h ${pad(m)}m`;
    if (m > 0) return `in ${m}m ${pad(sec)}s`;
    return `in ${sec}s`;
  }

  // tick updates the remaining time of the rows still awaiting a decision.
  function tick() {
    const now = Date.now();
    for (const row of rows.values()) {
      if (row.state !== "pending" && row.state !== "busy") continue;
      const when = deadlineOf(row.call);
      if (Number.isNaN(when)) {
        row.remaining.textContent = "";
        continue;
      }
      row.remaining.textContent = `(${formatRemaining(when - now)})`;
      row.li.classList.toggle("expired", when <= now);
    }
  }

  // setState records a row's state and locks its form unless it is pending.
  function setState(row, state, badge) {
    row.state = state;
    row.li.dataset.state = state;
    if (badge) row.badge.textContent = badge;
    const locked = state !== "pending" || !canDecide();
    for (const b of row.buttons) b.disabled = locked;
    row.reason.disabled = locked;
    row.yes.disabled = state !== "pending";
  }

  function showOutcome(row, kind, text) {
    row.outcome.className = "outcome " + kind;
    row.outcome.textContent = text;
  }

  // decide approves (approve true) or rejects the row's call, once
  // confirmed. An approval names the digest of the arguments shown.
  async function decide(row, approve) {
    if (row.state !== "pending") return;
    closeConfirm(row);
    setState(row, "busy");
    showOutcome(row, "", approve ? "Approving…" : "Rejecting…");
    // The thread goes with the id: another thread may hold the same id.
    const path = `tool-calls/${pathSegment(row.id)}/${approve ? "approve" : "reject"}?threadId=${encodeURIComponent(row.thread)}`;
    const body = { reason: row.reason.value.trim() };
    if (approve) body.argumentsDigest = str(row.call.argumentsDigest);
    let res;
    try {
      res = await callAPI("POST", path, body);
    } catch (err) {
      setState(row, "pending");
      showOutcome(row, "error", `Could not reach the admin API: ${err.message}`);
      return;
    }
    scheduleRefresh();
    switch (res.status) {
      case 200: {
        const who = (res.data && str(res.data.approvedBy)) || (me && me.name) || "you";
        const verb = approve ? "Approved" : "Rejected";
        setState(row, approve ? "approved" : "rejected", approve ? "approved" : "rejected");
        row.remaining.textContent = "";
        showOutcome(row, "ok", `${verb} by ${who}. It leaves this list at the next refresh.`);
        break;
      }
      case 401:
        setState(row, "pending");
        showOutcome(row, "error", "The admin API refused the token; enter it again, then decide.");
        askForToken("The admin API refused the token; enter it again.");
        break;
      case 403:
        setState(row, "pending");
        showOutcome(row, "error", `Your token may not decide: ${errorText(res)}`);
        break;
      case 409:
        setState(row, "failed", "not decidable");
        showOutcome(row, "error", errorText(res));
        break;
      default:
        setState(row, "pending");
        showOutcome(row, "error", `${approve ? "Approving" : "Rejecting"} failed: ${errorText(res)}`);
    }
  }

  ui.tokenForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = ui.token.value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    ui.token.value = "";
    ui.tokenForm.hidden = true;
    refresh();
  });

  ui.refresh.addEventListener("click", refresh);

  ui.forget.addEventListener("click", () => {
    listing++; // drop any listing under way
    for (const row of rows.values()) row.li.remove();
    rows.clear();
    ui.empty.hidden = true;
    ui.status.textContent = "";
    askForToken("Token forgotten. Enter the admin token to continue.");
  });

  setInterval(tick, 1000);
  if (token()) {
    refresh();
  } else {
    askForToken("Enter the admin token to list the tool calls awaiting approval.");
  }
})();
