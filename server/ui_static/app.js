// Pyramind's memory browser: sign in with a token, list conversations and documents, walk a tree from its roots
// down to the chunks and messages, search, delete with a confirmation, and (when the server has them) assemble a
// context block, edit core memory, pin memories, review standing instructions and read a conversation's outline.
// Plain DOM, no framework, no build step; text from the server is only ever set as textContent.

import { api, ApiError, detectFeatures, session } from "./api.js";

const $ = (sel, root = document) => root.querySelector(sel);
const enc = encodeURIComponent;
const state = { features: { context: false, core: false, pin: false, instructions: false, outline: false }, search: null,
  context: null, superseded: false };

/** Make an element: attrs (class, data-*, on<event>, any attribute) and children (nodes, strings, arrays). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// ---------------------------------------------------------------- errors and notices: always in words
function describe(err) {
  if (err instanceof ApiError) {
    if (err.status === 401) return `The server refused the token: ${err.message}. Sign in again with a valid token.`;
    if (err.status === 403) return `Not allowed: ${err.describe()}`;
    return err.describe();
  }
  return `Something went wrong in the page: ${(err && err.message) || err}`;
}

function showError(err) {
  const box = $("#error");
  box.textContent = typeof err === "string" ? err : describe(err);
  box.hidden = false;
}

function clearMessages() {
  $("#error").hidden = true;
  $("#notice").hidden = true;
}

function notify(text) {
  const box = $("#notice");
  box.textContent = text;
  box.hidden = false;
}

/** Run an async action; any error is shown in words (a 401 sends the user back to sign in). */
async function guard(fn) {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401 && session.token !== null) {
      session.clear();
      renderLogin();
    }
    showError(err);
    return undefined;
  }
}

window.addEventListener("error", (e) => showError(e.error || e.message));
window.addEventListener("unhandledrejection", (e) => showError(e.reason));

// ---------------------------------------------------------------- formatting
function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toISOString().slice(0, 16).replace("T", " ");
}

function fmtRange(start, end) {
  if (!start && !end) return "no time";
  const a = fmtTime(start);
  const b = fmtTime(end);
  if (a === b || !b) return a;
  if (!a) return b;
  return a.slice(0, 10) === b.slice(0, 10) ? `${a} – ${b.slice(11)}` : `${a} – ${b}`;
}

function fmtCounts(counts) {
  const levels = Object.keys(counts || {}).map(Number).sort((x, y) => y - x);
  return levels.length ? levels.map((l) => `L${l}: ${counts[l]}`).join(" · ") : "no memories yet";
}

const badge = (level) => h("span", { class: `badge l${Math.min(level, 6)}`, title: `level ${level}` }, `L${level}`);
const sourceId = (n) => n.conversation_id || n.document_id;
const clip = (text, n) => (text.length > n ? `${text.slice(0, n)}…` : text);

function page(...children) {
  const main = $("#main");
  main.replaceChildren(...children.flat());
  return main;
}

function confirmDialog(title, ...body) {
  const dlg = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-body").replaceChildren(...body.map((b) => (typeof b === "string" ? h("p", {}, b) : b)));
  dlg.returnValue = "";
  dlg.showModal();
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
  });
}

function setNav(active) {
  $("#nav").hidden = false;
  $("#logout").hidden = false;
  $("#who").textContent = session.namespace ? `namespace: ${session.namespace}` : "";
  for (const a of document.querySelectorAll("#nav a")) {
    const feature = a.dataset.feature;
    if (feature) a.hidden = !state.features[feature];
    a.classList.toggle("active", a.dataset.nav === active);
  }
}

/** A feature's route answered 404 "no such URL": the server lacks it after all; hide it. */
function featureMissing(err, feature) {
  if (err instanceof ApiError && err.status === 404 && err.code === "not_found" && !err.field) {
    state.features[feature] = false;
    setNav("");
    return true;
  }
  return false;
}

// ---------------------------------------------------------------- sign in
function renderLogin() {
  $("#nav").hidden = true;
  $("#logout").hidden = true;
  $("#who").textContent = "";
  const token = h("input", { id: "token", type: "password", autocomplete: "off", size: 40 });
  const ns = h("input", { id: "namespace", type: "text", placeholder: "default", size: 20,
    value: session.namespace || "" });
  const form = h("form", { id: "login", class: "card" },
    h("h2", {}, "Sign in"),
    h("p", { class: "muted" }, "Enter your Pyramind API token. It stays in this browser tab (sessionStorage), is sent ",
      "only to this server in the Authorization header, and is forgotten when the tab closes. A local server ",
      "without auth (pyramind serve --local) needs none: leave it empty."),
    h("label", {}, "Token ", token),
    h("label", {}, "Namespace (static tokens only; optional) ", ns),
    h("button", { type: "submit", id: "login-submit" }, "Sign in"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearMessages();
    const t = token.value.trim();
    try {
      await api("GET", "/conversations", { query: { limit: 1 }, token: t, namespace: ns.value.trim() });
    } catch (err) {
      if (!t && err instanceof ApiError && err.status === 401) return showError("Enter a token: this server needs one.");
      return showError(err);
    }
    session.save(t, ns.value.trim());
    if (location.hash && location.hash !== "#/") location.hash = "#/";
    else route();
  });
  page(form);
  token.focus();
}

// ---------------------------------------------------------------- conversations and documents
async function renderSources() {
  setNav("sources");
  const body = h("tbody");
  const more = h("button", { type: "button", id: "more", hidden: true }, "Load more");
  const table = h("table", { id: "sources" },
    h("thead", {}, h("tr", {}, ["Conversation", "Type", "Time range", "Messages", "Memories per level", ""]
      .map((t) => h("th", {}, t)))),
    body);
  page(h("h2", {}, "Conversations and documents"), table, more);
  let cursor = null;
  const load = () => guard(async () => {
    const res = await api("GET", "/conversations", { query: { limit: 50, cursor } });
    for (const s of res.conversations) body.append(sourceRow(s));
    if (!body.children.length) {
      body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "Nothing is remembered in this namespace yet.")));
    }
    cursor = res.next_cursor;
    more.hidden = !cursor;
  });
  more.addEventListener("click", load);
  await load();
}

function sourceRow(s) {
  return h("tr", { "data-source-id": s.id },
    h("td", {}, h("a", { href: `#/c/${enc(s.id)}`, class: "source-link" }, s.title || s.id),
      s.title ? h("div", { class: "muted small" }, s.id) : null),
    h("td", {}, s.source_type),
    h("td", {}, fmtRange(s.start_time, s.end_time)),
    h("td", { class: "num" }, s.message_count),
    h("td", {}, fmtCounts(s.node_counts)),
    h("td", {}, h("button", { type: "button", class: "danger small", onclick: () => deleteSource(s) }, "Delete")));
}

async function deleteSource(s) {
  const total = Object.values(s.node_counts || {}).reduce((a, b) => a + b, 0);
  const ok = await confirmDialog(`Delete ${s.source_type} ${s.title || s.id}?`,
    `All of it is forgotten: its ${s.message_count} message${s.message_count === 1 ? "" : "s"} and all ${total} ` +
    `memories (${fmtCounts(s.node_counts)}).`,
    "Nothing needs rebuilding: no other conversation or document shares its chunks or summaries. " +
    "This cannot be undone.");
  if (!ok) return;
  await guard(async () => {
    const res = await api("DELETE", "/delete", { body: { ids: [s.id] } });
    location.hash = "#/";
    await route();
    notify(`Forgot ${s.id}: ${res.deleted_messages} messages, ${res.deleted_nodes} memories removed.`);
  });
}

// ---------------------------------------------------------------- a conversation's tree
async function renderConversation(id, revealId, open = new Set()) {
  setNav("sources");
  const detail = await api("GET", `/conversations/${enc(id)}`);
  const s = detail.conversation;
  const ctx = { source: s, open, messagesOpen: new Set(open.messagesOpen || []) };
  const tree = h("div", { id: "tree", class: "tree" });
  page(
    h("p", {}, h("a", { href: "#/" }, "← all conversations")),
    h("h2", { id: "source-title" }, s.title || s.id),
    h("p", { class: "meta" }, `${s.source_type} · ${fmtRange(s.start_time, s.end_time)} · ${s.message_count} messages · `
      + fmtCounts(s.node_counts)),
    h("p", { class: "actions" },
      h("a", { href: `#/search?${s.source_type === "document" ? "document_id" : "conversation_id"}=${enc(s.id)}` },
        "Search in it"), " ",
      state.features.outline && s.source_type === "conversation"
        ? [h("a", { href: `#/c/${enc(s.id)}/outline`, id: "outline-link" }, "Outline"), " "] : null,
      h("button", { type: "button", class: "danger", id: "delete-source", onclick: () => deleteSource(s) },
        `Delete this ${s.source_type}`)),
    h("p", { class: "muted" }, "The roots of the tree, oldest first; expand a summary into what it covers, down to ",
      "the chunks (L1) and their messages."),
    tree);
  if (!detail.top_nodes.length) tree.append(h("p", { class: "muted" }, "No memories yet (messages not indexed)."));
  for (const node of detail.top_nodes) tree.append(nodeCard(node, ctx, []));
  if (revealId) {
    const chain = [];
    let cur = await api("GET", `/memories/${enc(revealId)}`);
    chain.unshift(cur.node.id);
    while (cur.parent) {
      chain.unshift(cur.parent.id);
      cur = await api("GET", `/memories/${enc(cur.parent.id)}`);
    }
    chain.slice(0, -1).forEach((nid) => ctx.open.add(nid));
  }
  await restore(tree, ctx);
  if (revealId) {
    const card = tree.querySelector(`[data-node-id="${CSS.escape(revealId)}"]`);
    if (card) {
      card.classList.add("highlight");
      card.scrollIntoView({ block: "center" });
    }
  }
}

/** Re-open the nodes (and message lists) recorded in ctx that are still in the tree, top down. */
async function restore(container, ctx) {
  for (const card of container.querySelectorAll(":scope > .node")) {
    const nid = card.dataset.nodeId;
    if (ctx.open.has(nid) && card._expand) {
      await card._expand();
      await restore(card.querySelector(":scope > .children"), ctx);
    }
    if (ctx.messagesOpen.has(nid) && card._messages) await card._messages();
  }
}

function nodeCard(node, ctx, ancestors) {
  const children = h("div", { class: "children" });
  const actions = h("div", { class: "node-actions" });
  const what = node.level > 1 ? `summary of ${node.children.length} L${node.level - 1}`
    : `chunk · ${node.message_ids.length} message${node.message_ids.length === 1 ? "" : "s"}`;
  const card = h("div", { class: `node level-${Math.min(node.level, 6)}`, "data-node-id": node.id,
    "data-level": node.level },
    h("div", { class: "node-head" }, badge(node.level), h("span", { class: "time" }, fmtRange(node.start_time, node.end_time)),
      h("span", { class: "speakers" }, node.speakers.join(", ")), h("span", { class: "muted small" }, what),
      node.pinned ? h("span", { class: "pin-mark" }, "pinned") : null,
      h("code", { class: "muted small node-id" }, node.id)),
    h("p", { class: "node-text" }, node.text),
    actions, children);
  const path = [...ancestors, node];

  if (node.level > 1 && node.children.length) {
    let loaded = false;
    const btn = h("button", { type: "button", class: "expand" }, `Expand ${node.children.length} × L${node.level - 1}`);
    card._expand = async () => {
      if (!loaded) {
        const res = await api("GET", `/memories/${enc(node.id)}`);
        children.replaceChildren(...res.children.map((c) => nodeCard(c, ctx, path)));
        loaded = true;
      }
      children.hidden = false;
      ctx.open.add(node.id);
      btn.textContent = "Collapse";
    };
    btn.addEventListener("click", () => guard(async () => {
      if (loaded && !children.hidden) {
        children.hidden = true;
        ctx.open.delete(node.id);
        btn.textContent = `Expand ${node.children.length} × L${node.level - 1}`;
      } else await card._expand();
    }));
    actions.append(btn);
  }
  if (node.level === 1) {
    let shown = false;
    const list = h("ul", { class: "messages", hidden: true });
    const btn = h("button", { type: "button", class: "show-messages" }, "Show messages");
    card._messages = async () => {
      const res = await api("GET", `/conversations/${enc(sourceId(node))}/messages`,
        { query: { node_id: node.id, limit: 100 } });
      list.replaceChildren(...res.messages.map((m) => messageItem(m, node, path, ctx)));
      list.hidden = false;
      shown = true;
      ctx.messagesOpen.add(node.id);
      btn.textContent = "Hide messages";
    };
    btn.addEventListener("click", () => guard(async () => {
      if (shown) {
        list.hidden = true;
        shown = false;
        ctx.messagesOpen.delete(node.id);
        btn.textContent = "Show messages";
      } else await card._messages();
    }));
    actions.append(btn);
    children.append(list);
  }
  if (state.features.pin) {
    const pinned = Boolean(node.pinned);
    actions.append(h("button", { type: "button", class: "pin", onclick: () => guard(async () => {
      try {
        await api("POST", `/memories/${enc(node.id)}/${pinned ? "unpin" : "pin"}`, { body: {} });
      } catch (err) {
        if (featureMissing(err, "pin")) throw new ApiError(404, "not_found", "This server cannot pin memories.");
        throw err;
      }
      notify(`${pinned ? "Unpinned" : "Pinned"} ${node.id}${pinned ? "" : ": it and the messages under it are never forgotten by policy"}.`);
      node.pinned = !pinned;
      card.replaceWith(nodeCard(node, ctx, ancestors));
    }) }, pinned ? "Unpin" : "Pin"));
  }
  return card;
}

function messageItem(m, chunk, path, ctx) {
  return h("li", { class: "message", "data-message-id": m.id },
    h("div", { class: "message-head" }, h("strong", {}, m.speaker), " ", h("span", { class: "time" }, fmtTime(m.created_at)),
      " ", h("code", { class: "muted small" }, m.id),
      h("button", { type: "button", class: "danger small delete-message",
        onclick: () => deleteMessage(m, chunk, path, ctx) }, "Delete")),
    h("div", { class: "message-text" }, m.content));
}

async function deleteMessage(m, chunk, path, ctx) {
  const summaries = path.filter((n) => n.level > 1).reverse();
  const ok = await confirmDialog(`Delete message ${m.id}?`,
    h("blockquote", {}, `${m.speaker}: ${clip(m.content, 200)}`),
    `What is rebuilt: the chunk that holds it (L1 ${chunk.id}, and its overlapping neighbour if the message spans ` +
    "two) is cut again from the remaining messages" + (summaries.length
      ? `, and every summary above it is summarised again: ${summaries.map((n) => `L${n.level} ${n.id}`).join(", ")}.`
      : "."),
    "Afterwards the text is found at no level. This cannot be undone.");
  if (!ok) return;
  await guard(async () => {
    const res = await api("DELETE", "/delete", { body: { ids: [m.id] } });
    const open = new Set(ctx.open);
    open.messagesOpen = [...ctx.messagesOpen];
    await renderConversation(ctx.source.id, null, open);
    notify(`Forgot message ${m.id}: ${res.deleted_messages} message removed, ${res.deleted_nodes} memories removed or ` +
      "rebuilt. Nodes that were rebuilt have new ids: expand again from the roots.");
  });
}

// ---------------------------------------------------------------- a conversation's outline (GET .../outline)
async function renderOutline(id, params) {
  setNav("sources");
  const q = h("input", { id: "outline-query", type: "search", size: 50, value: params.query || "",
    placeholder: "Focus on… (optional)" });
  const budget = h("input", { id: "outline-budget", type: "number", min: 20, max: 100000,
    value: params.budget_tokens || 2000 });
  const body = h("div", { id: "outline", class: "outline" });
  const form = h("form", { id: "outline-form", class: "card" },
    h("div", { class: "row" }, q, h("label", {}, "budget_tokens ", budget),
      h("button", { type: "submit", id: "outline-submit" }, "Show")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const qs = new URLSearchParams();
    if (q.value.trim()) qs.set("query", q.value.trim());
    if (budget.value) qs.set("budget_tokens", budget.value);
    location.hash = `#/c/${enc(id)}/outline${qs.toString() ? `?${qs}` : ""}`;
  });
  const res = await api("GET", `/conversations/${enc(id)}/outline`,
    { query: { query: params.query, budget_tokens: params.budget_tokens } });
  page(
    h("p", {}, h("a", { href: `#/c/${enc(id)}` }, "← the conversation's tree")),
    h("h2", { id: "outline-title" }, `Outline: ${res.title || res.conversation_id}`),
    h("p", { class: "muted" }, "What was said, line by line: each message's lead (greetings and thanks left out) ",
      "under its date (UTC), oldest first", res.query ? `; only the lines closest to “${res.query}”.` : "."),
    form, body);
  if (!res.days.length) body.append(h("p", { class: "muted" }, "No lines yet (messages not indexed)."));
  for (const day of res.days) {
    body.append(h("h3", { class: "outline-date" }, day.date),
      h("ul", { class: "outline-lines" }, day.lines.map((ln) => h("li", { "data-message-id": ln.message_id },
        h("span", { class: "speaker" }, ln.speaker), ": ", h("span", { class: "line-text" }, ln.text),
        ln.score !== null && ln.score !== undefined ? h("span", { class: "score muted small" }, ` ${ln.score.toFixed(3)}`) : null))));
  }
  body.append(h("p", { class: "muted small", id: "outline-meta" },
    `${res.total_lines - res.omitted} of ${res.total_lines} lines, ${res.tokens} tokens` +
    (res.omitted ? ` (${res.omitted} left out: raise budget_tokens to see more)` : "")));
}

// ---------------------------------------------------------------- search
const FILTERS = [
  ["conversation_id", "text"], ["document_id", "text"], ["speaker", "text"],
  ["level", "number"], ["min_level", "number"], ["max_level", "number"],
  ["start_date", "datetime-local"], ["end_date", "datetime-local"],
];

function renderSearch(params) {
  setNav("search");
  const saved = { ...(state.search || {}), ...params };
  const q = h("input", { id: "q", type: "search", required: true, size: 50, value: saved.query || "",
    placeholder: "What do you want to recall?" });
  const mode = h("select", { id: "mode" }, [["", "server default"], ["hybrid", "hybrid (BM25 + embeddings, chunks)"],
    ["dense", "dense (embeddings, every level)"], ["text", "text (BM25, every level)"],
    ["tree", "tree (summaries down to chunks)"]].map(([v, t]) => h("option", { value: v, selected: saved.mode === v }, t)));
  const topK = h("input", { id: "top-k", type: "number", min: 1, max: 100, value: saved.top_k || 10 });
  const sourceType = h("select", { id: "f-source_type" }, ["", "conversation", "document"]
    .map((v) => h("option", { value: v, selected: saved.source_type === v }, v || "any source")));
  const inputs = Object.fromEntries(FILTERS.map(([name, type]) => [name,
    h("input", { id: `f-${name}`, type, value: saved[name] || "", min: type === "number" ? 1 : undefined })]));
  const results = h("ol", { id: "results", class: "results" });
  const form = h("form", { id: "search-form", class: "card" },
    h("div", { class: "row" }, q, h("button", { type: "submit", id: "search-submit" }, "Search")),
    h("div", { class: "row" }, h("label", {}, "Mode ", mode), h("label", {}, "top_k ", topK),
      h("label", {}, "Source ", sourceType)),
    h("details", { open: FILTERS.some(([n]) => saved[n]) }, h("summary", {}, "Filters"),
      h("div", { class: "filters" }, FILTERS.map(([name]) => h("label", {}, `${name} `, inputs[name])),
        h("p", { class: "muted small" }, "Dates are read as UTC."))));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    clearMessages();
    guard(async () => {
      const filter = {};
      if (sourceType.value) filter.source_type = sourceType.value;
      for (const [name, type] of FILTERS) {
        const v = inputs[name].value.trim();
        if (!v) continue;
        if (type === "number") filter[name] = Number.parseInt(v, 10);
        else if (type === "datetime-local") filter[name] = `${v.length === 16 ? `${v}:00` : v}Z`;
        else filter[name] = v;
      }
      const query = { query: q.value, top_k: Number.parseInt(topK.value, 10) || 10 };
      if (mode.value) query.mode = mode.value;
      if (Object.keys(filter).length) query.filter = filter;
      state.search = { query: q.value, mode: mode.value, top_k: topK.value, source_type: sourceType.value,
        ...Object.fromEntries(FILTERS.map(([n]) => [n, inputs[n].value])) };
      results.replaceChildren(h("li", { class: "muted" }, "Searching…"));
      const res = await api("POST", "/query", { body: { queries: [query] } });
      const hits = res.results[0].results;
      for (const w of res.warnings || []) notify(w.message);  // e.g. a conversation this namespace does not hold
      results.replaceChildren(...(hits.length ? hits.map(resultItem) : [h("li", { class: "muted" }, "No memory matches.")]));
    }).then(() => { if (results.firstChild?.textContent === "Searching…") results.replaceChildren(); });
  });
  page(h("h2", {}, "Search"), form, results);
  if (params.conversation_id || params.document_id) q.focus();
}

function resultItem(r) {
  const sid = sourceId(r);
  return h("li", { class: `result level-${Math.min(r.level, 6)}`, "data-node-id": r.id },
    h("div", { class: "node-head" }, badge(r.level), h("span", { class: "score" }, `score ${r.score.toFixed(3)}`),
      h("span", { class: "time" }, fmtRange(r.start_time, r.end_time)), h("span", { class: "speakers" }, r.speakers.join(", ")),
      h("span", { class: "muted small" }, `${r.source_type} ${sid}`)),
    h("p", { class: "node-text" }, r.text),
    h("a", { href: `#/c/${enc(sid)}/n/${enc(r.id)}`, class: "in-tree" }, "Show in the tree →"));
}

// ---------------------------------------------------------------- context block (POST /context, when present)
function renderContext() {
  setNav("context");
  const saved = state.context || {};
  const q = h("input", { id: "ctx-query", type: "text", size: 50, value: saved.query || "",
    placeholder: "What is the conversation about now? (optional)" });
  const cid = h("input", { id: "ctx-conversation", type: "text", value: saved.conversation_id || "" });
  const budget = h("input", { id: "ctx-budget", type: "number", min: 1, value: saved.budget_tokens || 1000 });
  const out = h("div", { id: "context-out" });
  const form = h("form", { id: "context-form", class: "card" },
    h("div", { class: "row" }, h("label", {}, "Query ", q)),
    h("div", { class: "row" }, h("label", {}, "conversation_id ", cid), h("label", {}, "budget_tokens ", budget),
      h("button", { type: "submit" }, "Assemble")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    clearMessages();
    guard(async () => {
      const body = { budget_tokens: Number.parseInt(budget.value, 10) || 1000 };
      if (q.value.trim()) body.query = q.value.trim();
      if (cid.value.trim()) body.conversation_id = cid.value.trim();
      state.context = { query: q.value, conversation_id: cid.value, budget_tokens: budget.value };
      let res;
      try {
        res = await api("POST", "/context", { body });
      } catch (err) {
        if (featureMissing(err, "context")) throw new ApiError(404, "not_found", "This server has no /context endpoint.");
        throw err;
      }
      out.replaceChildren(
        h("p", { class: "meta" }, `${res.tokens_used ?? "?"} tokens used of ${body.budget_tokens}`),
        ...(res.sections || []).map((sec) => h("section", { class: "context-section" },
          h("h3", {}, `${sec.name} (${(sec.items || []).length})`),
          h("ul", {}, (sec.items || []).map(contextItem)))),
        h("h3", {}, "The context block"), h("pre", { class: "context-block" }, res.context || ""));
    });
  });
  page(h("h2", {}, "Context block"), h("p", { class: "muted" }, "What Pyramind would put in a model's context window for ",
    "this query and budget, section by section."), form, out);
}

function contextItem(item) {
  if (typeof item !== "object" || item === null) return h("li", {}, String(item));
  const text = item.text ?? item.content ?? item.value ?? JSON.stringify(item);
  const sid = item.conversation_id || item.document_id;
  return h("li", {}, item.level ? badge(item.level) : null, item.key ? h("strong", {}, `${item.key}: `) : null, " ",
    text, item.id && sid ? [" ", h("a", { href: `#/c/${enc(sid)}/n/${enc(item.id)}` }, "in the tree")] : null);
}

// ---------------------------------------------------------------- core memory (/core, when present)
function coreEntries(data) {
  if (Array.isArray(data)) return data;
  for (const k of ["entries", "items", "core", "memories"]) if (Array.isArray(data?.[k])) return data[k];
  if (data && typeof data === "object") {
    const list = Object.values(data).find(Array.isArray);
    return list || Object.entries(data).map(([key, value]) => ({ key, value }));
  }
  return [];
}

async function renderCore() {
  setNav("core");
  const body = h("tbody");
  const key = h("input", { id: "core-key", required: true });
  const value = h("input", { id: "core-value", required: true, size: 50 });
  const importance = h("input", { id: "core-importance", type: "number", min: 0, max: 100, step: 1,
    placeholder: "0-100" });
  const ttl = h("input", { id: "core-ttl", type: "number", min: 1 });
  const form = h("form", { id: "core-form", class: "card" },
    h("div", { class: "row" }, h("label", {}, "key ", key), h("label", {}, "value ", value)),
    h("div", { class: "row" }, h("label", {}, "importance (optional) ", importance),
      h("label", {}, "ttl_seconds (optional) ", ttl), h("button", { type: "submit" }, "Save")));
  const load = async () => {
    let data;
    try {
      data = await api("GET", "/core");
    } catch (err) {
      if (featureMissing(err, "core")) throw new ApiError(404, "not_found", "This server has no core memory endpoint.");
      throw err;
    }
    const entries = coreEntries(data);
    body.replaceChildren(...(entries.length ? entries.map((e) => h("tr", { "data-key": e.key },
      h("td", {}, h("code", {}, e.key)), h("td", {}, typeof e.value === "string" ? e.value : JSON.stringify(e.value)),
      h("td", {}, e.importance ?? ""), h("td", {}, fmtTime(e.expires_at) || (e.ttl_seconds ? `${e.ttl_seconds} s` : "")),
      h("td", {}, h("button", { type: "button", class: "danger small", onclick: () => guard(async () => {
        const ok = await confirmDialog(`Delete core memory ${e.key}?`,
          "The entry is removed from core memory; the conversation tree is not touched, so nothing is rebuilt.");
        if (!ok) return;
        await api("DELETE", `/core/${enc(e.key)}`);
        await load();
      }) }, "Delete"))))
      : [h("tr", {}, h("td", { colspan: 5, class: "muted" }, "Core memory is empty."))]));
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    clearMessages();
    guard(async () => {
      const entry = { key: key.value.trim(), value: value.value };
      if (importance.value) entry.importance = Number.parseInt(importance.value, 10);
      if (ttl.value) entry.ttl_seconds = Number.parseInt(ttl.value, 10);
      await api("PUT", "/core", { body: entry });
      notify(`Saved core memory ${entry.key}.`);
      form.reset();
      await load();
    });
  });
  page(h("h2", {}, "Core memory"), h("p", { class: "muted" }, "Facts that are always in context, by key."), form,
    h("table", { id: "core" }, h("thead", {}, h("tr", {}, ["key", "value", "importance", "expires", ""]
      .map((t) => h("th", {}, t)))), body));
  await guard(load);
}

// ---------------------------------------------------------------- standing instructions (/instructions, when present)
async function renderInstructions() {
  setNav("instructions");
  const body = h("tbody");
  const summary = h("p", { class: "meta", id: "instructions-summary" });
  const superseded = h("input", { id: "instructions-superseded", type: "checkbox", checked: state.superseded });
  const load = async () => {
    let res;
    try {
      res = await api("GET", "/instructions", { query: { include_superseded: superseded.checked ? "true" : "" } });
    } catch (err) {
      if (featureMissing(err, "instructions")) throw new ApiError(404, "not_found", "This server keeps no instructions.");
      throw err;
    }
    const items = res.instructions || [];
    summary.textContent = `${res.active} in force${superseded.checked ? `, ${items.length - res.active} replaced` : ""}.`;
    body.replaceChildren(...(items.length ? items.map((i) => instructionRow(i, load))
      : [h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No standing instructions or preferences yet."))]));
  };
  superseded.addEventListener("change", () => {
    state.superseded = superseded.checked;
    clearMessages();
    guard(load);
  });
  page(h("h2", {}, "Standing instructions and preferences"),
    h("p", { class: "muted" }, "Rules and lasting preferences the user stated in chat, found as messages are indexed. ",
      "A later one on the same subject replaces the older; deleting one stops it being followed (its message stays)."),
    h("label", {}, superseded, "Show the ones a later instruction replaced"), summary,
    h("table", { id: "instructions" }, h("thead", {}, h("tr", {}, ["kind", "instruction", "said by", "when", "where", ""]
      .map((t) => h("th", {}, t)))), body));
  await guard(load);
}

function instructionRow(i, reload) {
  const where = i.conversation_id
    ? [h("a", { href: `#/c/${enc(i.conversation_id)}` }, i.conversation_id), h("div", { class: "muted small" },
      `message ${i.message_id ?? "?"}`)]
    : "";
  return h("tr", { "data-instruction-id": i.id, class: i.superseded_by ? "superseded" : null },
    h("td", {}, i.kind),
    h("td", {}, h("div", { class: "instruction-text" }, i.text),
      i.superseded_by ? h("div", { class: "muted small" }, `replaced by ${i.superseded_by}`) : null),
    h("td", {}, i.speaker),
    h("td", {}, fmtTime(i.created_at) || h("span", { class: "muted" }, `stored ${fmtTime(i.recorded_at)}`)),
    h("td", {}, where),
    h("td", {}, h("button", { type: "button", class: "danger small", onclick: () => guard(async () => {
      const ok = await confirmDialog("Delete this instruction?", h("blockquote", {}, `${i.speaker}: ${i.text}`),
        "It is no longer followed. The message it came from stays in memory; an older instruction it replaced is " +
        "in force again.");
      if (!ok) return;
      const res = await api("DELETE", `/instructions/${enc(i.id)}`);
      await reload();
      notify(`Deleted the instruction${res.reactivated.length ? `; ${res.reactivated.length} older one(s) in force again` : ""}.`);
    }) }, "Delete")));
}

// ---------------------------------------------------------------- routing
async function route() {
  clearMessages();
  if (session.token === null) return renderLogin();
  const [path, qs] = (location.hash.slice(1) || "/").split("?");
  const params = Object.fromEntries(new URLSearchParams(qs || ""));
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  await guard(async () => {
    if (parts.length === 0) return renderSources();
    if (parts[0] === "c" && parts[1] && parts[2] === "outline") return renderOutline(parts[1], params);
    if (parts[0] === "c" && parts[1]) return renderConversation(parts[1], parts[2] === "n" ? parts[3] : null);
    if (parts[0] === "search") return renderSearch(params);
    if (parts[0] === "context" && state.features.context) return renderContext();
    if (parts[0] === "core" && state.features.core) return renderCore();
    if (parts[0] === "instructions" && state.features.instructions) return renderInstructions();
    setNav("");
    page(h("h2", {}, "Not found"), h("p", {}, "This page has no such view. ", h("a", { href: "#/" }, "Back to the list.")));
    return undefined;
  });
}

async function start() {
  $("#logout").addEventListener("click", () => {
    session.clear();
    clearMessages();
    location.hash = "#/";
    renderLogin();
  });
  state.features = await detectFeatures();
  window.addEventListener("hashchange", route);
  await route();
  document.body.dataset.ready = "true";
}

start().catch(showError);
