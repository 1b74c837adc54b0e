// trellis's web UI: routes the page's hash to a server-rendered fragment
// of /ui/ (and to nothing else: the DOM is built from those and from text),
// keeps it live from the /events stream, and sends actions to the API,
// with the bearer token (kept for the tab, never in a cookie) when the
// server asks for one.
"use strict";

const main = document.getElementById("main");
const statusLine = document.getElementById("status");
const liveBadge = document.getElementById("live");
const tokenDialog = document.getElementById("token-dialog");
const tokenInput = document.getElementById("token-input");
const TOKEN_KEY = "trellis-token";

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

// Resolves once the user has given a token (or rejects if they cancel).
let tokenWaiters = [];
function askToken(reason) {
  document.getElementById("token-reason").textContent = reason;
  tokenDialog.hidden = false;
  tokenInput.value = "";
  tokenInput.focus();
  return new Promise((resolve, reject) => tokenWaiters.push({ resolve, reject }));
}
document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, tokenInput.value);
  tokenDialog.hidden = true;
  tokenWaiters.splice(0).forEach((w) => w.resolve());
  restartStream();
});
document.getElementById("token-cancel").addEventListener("click", () => {
  tokenDialog.hidden = true;
  tokenWaiters.splice(0).forEach((w) => w.reject(new Error("no token given")));
});
document.getElementById("token-button").addEventListener("click", () => {
  askToken("The bearer token to send with every request (TRELLIS_TOKEN).").catch(() => {});
});

// A request with the token; a 401 asks for it and tries once more.
async function call(method, url) {
  let response = await fetch(url, { method, headers: headers() });
  if (response.status === 401) {
    const body = await response.json().catch(() => ({}));
    await askToken(body.error || "This server needs its token.");
    response = await fetch(url, { method, headers: headers() });
  }
  return response;
}

async function errorOf(response) {
  const body = await response.json().catch(() => null);
  return (body && body.error) || response.status + " " + response.statusText;
}

function say(text, isError) {
  statusLine.textContent = text;
  statusLine.classList.toggle("error", !!isError);
}

// The pages there are, by the hash's first segment, and the fragment each
// loads: only these, and of the hash only a page's own parameters reach
// the fragment's URL, each encoded, so that no link can make the page load
// anything but a fragment of /ui/ (a "#/../views/..." link would otherwise
// load the JSON API's answer into the page as HTML).
// "#/views?status=failed" -> "/ui/views?status=failed"; "#/" -> "/ui/overview";
// anything else -> null.
const PAGES = {
  "": { fragment: () => "/ui/overview" },
  views: { fragment: () => "/ui/views", query: ["pattern", "status", "filter", "issue", "cursor"] },
  view: { fragment: (rest) => "/ui/view/" + rest, rest: true },
  runs: { fragment: (rest) => (rest ? "/ui/runs/" + rest : "/ui/runs"), rest: true, query: ["status"] },
  events: { fragment: () => "/ui/events" },
};

// A path's segments, each decoded and encoded again; null if one is empty,
// "." or ".." (which a URL would resolve), or cannot be decoded.
function safePath(segments) {
  const safe = [];
  for (const segment of segments) {
    let decoded;
    try {
      decoded = decodeURIComponent(segment);
    } catch (error) {
      return null;
    }
    if (decoded === "" || decoded === "." || decoded === "..") return null;
    safe.push(encodeURIComponent(decoded));
  }
  return safe.join("/");
}

function fragmentUrl() {
  const route = location.hash.replace(/^#\/?/, "");
  const at = route.indexOf("?");
  const path = at < 0 ? route : route.slice(0, at);
  const [name, ...segments] = path.split("/");
  if (!Object.prototype.hasOwnProperty.call(PAGES, name)) return null;
  const page = PAGES[name];
  if (segments.length > 0 && segments[segments.length - 1] === "") segments.pop();
  if (segments.length > 0 && !page.rest) return null;
  const rest = segments.length > 0 ? safePath(segments) : "";
  if (rest === null || (name === "view" && rest === "")) return null;
  let url = page.fragment(rest);
  if (page.query && at >= 0) {
    const given = new URLSearchParams(route.slice(at + 1));
    const kept = new URLSearchParams();
    for (const key of page.query) if (given.has(key)) kept.set(key, given.get(key));
    if (kept.toString()) url += "?" + kept;
  }
  return url;
}

// Whether `url` is one of the server's own fragments, once resolved (dot
// segments, percent-encoded or not, removed): the only HTML the page takes.
function isFragment(url) {
  const resolved = new URL(url, location.href);
  return resolved.origin === location.origin && resolved.pathname.startsWith("/ui/");
}

// A fragment's HTML (maud's markup, every value escaped), or an Error
// saying why not; a response that is not a fragment's HTML is never used.
async function fetchFragment(url) {
  if (!isFragment(url)) return new Error("not a page of this UI: " + url);
  const response = await call("GET", url);
  if (!response.ok) return new Error(await errorOf(response));
  const type = response.headers.get("content-type") || "";
  if (!isFragment(response.url) || !type.startsWith("text/html")) {
    return new Error("the server did not answer with a page of this UI");
  }
  return { html: await response.text(), headers: response.headers };
}

function showError(where, text) {
  const p = document.createElement("p");
  p.className = "error";
  p.textContent = text;
  where.replaceChildren(p);
}

let rendering = null;
async function render(focus) {
  const url = fragmentUrl();
  rendering = url;
  if (url === null) {
    showError(main, "There is no such page: " + location.hash + ". The pages are #/, #/views, #/view/VIEW, #/runs and #/events.");
    markCurrentNav();
    return;
  }
  let fragment;
  try {
    fragment = await fetchFragment(url);
  } catch (error) {
    say("Could not load the page: " + error.message, true);
    return;
  }
  if (rendering !== url) return; // a later navigation won
  if (fragment instanceof Error) {
    showError(main, fragment.message);
    return;
  }
  main.innerHTML = fragment.html;
  showLatestStates();
  const next = fragment.headers.get("x-trellis-next-sequence");
  if (next !== null) eventsShownUntil = Number(next);
  markCurrentNav();
  if (focus) (main.querySelector("h1") || main).focus();
  loadParts(url);
}

// Parts of a page that come on their own (a view's log): the page is shown
// without waiting for them.
async function loadParts(url) {
  for (const part of main.querySelectorAll("[data-load]")) {
    let fragment;
    try {
      fragment = await fetchFragment(part.dataset.load);
    } catch (error) {
      fragment = new Error("Could not load this part of the page.");
    }
    if (rendering !== url) return;
    if (fragment instanceof Error) showError(part, fragment.message);
    else part.innerHTML = fragment.html;
    part.removeAttribute("data-load");
  }
}

function markCurrentNav() {
  const section = (location.hash.replace(/^#\//, "").split(/[/?]/)[0]) || "";
  document.querySelectorAll("header nav a").forEach((a) => {
    const target = a.getAttribute("href").replace(/^#\//, "");
    const current = target === section || (section === "view" && target === "views");
    if (current) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  });
}

// A path as the API takes it: each segment encoded, the slashes kept.
function pathOf(pattern) {
  return pattern.split("/").map(encodeURIComponent).join("/");
}

const actions = {
  materialize: (d) => ["POST", "/materialize/" + pathOf(d.pattern), "Materializing " + d.pattern],
  invalidate: (d) => ["POST", "/invalidate/" + pathOf(d.pattern), "Invalidated " + d.pattern],
  stop: (d) => ["POST", "/runs/" + encodeURIComponent(d.run) + "/stop", "Stopping run " + d.run],
  enable: (d) => ["POST", "/listeners/" + encodeURIComponent(d.listener) + "/enable", "Enabled " + d.listener],
};

async function act(action, data, el) {
  const [method, url, done] = actions[action](data);
  el.disabled = true;
  try {
    const response = await call(method, url);
    if (!response.ok) {
      say(await errorOf(response), true);
      return;
    }
    const body = await response.json().catch(() => ({}));
    say(body.run ? done + ": run " + body.run : done + ".");
    scheduleRefresh(0);
  } catch (error) {
    say(error.message, true);
  } finally {
    el.disabled = false;
  }
}

main.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (button) act(button.dataset.action, button.dataset, button);
});

main.addEventListener("submit", (event) => {
  const form = event.target;
  event.preventDefault();
  if (form.id === "views-filter") {
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
    location.hash = "#/views" + (params.toString() ? "?" + params : "");
  } else if (form.dataset.action === "materialize") {
    const pattern = form.elements.pattern.value.trim();
    if (pattern) act("materialize", { pattern }, form.querySelector("button"));
  }
});

// Live updates: states change in place; pages that summarise are drawn
// again, at most about once a second.
let refreshTimer = null;
function scheduleRefresh(delay) {
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    if (!tokenDialog.hidden) return;
    render(false);
  }, delay);
}

function summarises() {
  const route = location.hash.replace(/^#\//, "");
  if (route === "" || route.startsWith("runs")) return true;
  const h1 = main.querySelector("h1[data-view]");
  return !!h1;
}

// The state the stream last gave each view. A fragment can be older than
// an event the stream has already brought (it was rendered before the
// event and arrived after it, or the server's table had not caught up with
// its commit yet), and must not undo it: these are shown again over every
// fragment. A stream that is behind brings the newer events after, so the
// page ends where the stream ends. The oldest are forgotten past a bound.
const latestStates = new Map();
const LATEST_STATES_KEPT = 10000;

function showState(el, state) {
  el.querySelectorAll(".view-state").forEach((cell) => cell.replaceChildren(badge(state)));
  const rect = el.querySelector("rect");
  if (rect) rect.setAttribute("class", "state-" + state);
}

function showLatestStates() {
  main.querySelectorAll("[data-view]").forEach((el) => {
    const state = latestStates.get(el.dataset.view);
    if (state !== undefined) showState(el, state);
  });
}

let eventsShownUntil = 0;
function onEvent(data) {
  const event = JSON.parse(data);
  latestStates.delete(event.view);
  latestStates.set(event.view, event.current);
  if (latestStates.size > LATEST_STATES_KEPT) latestStates.delete(latestStates.keys().next().value);
  document.querySelectorAll("[data-view]").forEach((el) => {
    if (el.dataset.view === event.view) showState(el, event.current);
  });
  const table = document.getElementById("events-table");
  if (table && event.sequence >= eventsShownUntil) {
    eventsShownUntil = event.sequence + 1;
    table.tBodies[0].prepend(eventRow(event));
    while (table.tBodies[0].rows.length > 500) table.tBodies[0].deleteRow(-1);
  }
  if (summarises()) scheduleRefresh(1000);
}

function badge(state) {
  const span = document.createElement("span");
  span.className = "state state-" + state;
  span.textContent = state;
  return span;
}

function link(href, text) {
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  return a;
}

function eventRow(event) {
  const row = document.createElement("tr");
  const cells = [
    document.createTextNode(String(event.sequence)),
    document.createTextNode(new Date(event.time).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC")),
    link("#/view/" + event.view, event.view),
    null,
    event.run_id ? link("#/runs/" + event.run_id, event.run_id) : document.createTextNode(""),
    document.createTextNode((event.error || "").split("\n")[0]),
  ];
  cells.forEach((content, index) => {
    const cell = document.createElement("td");
    if (index === 3) {
      cell.append(event.previous + " → ");
      cell.appendChild(badge(event.current));
    } else {
      cell.appendChild(content);
    }
    if (index === 5) cell.className = "error";
    row.appendChild(cell);
  });
  return row;
}

// The /events stream read with fetch, since EventSource cannot send a
// bearer header; it goes on from the last id it saw when it reconnects.
let lastEventId = null;
let streamAbort = null;
async function stream() {
  const controller = new AbortController();
  streamAbort = controller;
  const requestHeaders = headers();
  if (lastEventId !== null) requestHeaders["Last-Event-ID"] = lastEventId;
  try {
    const response = await fetch("/events", { headers: requestHeaders, signal: controller.signal });
    if (!response.ok) throw new Error(await errorOf(response));
    liveBadge.textContent = "live";
    liveBadge.classList.add("on");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch (error) {
    if (controller.signal.aborted) return;
  }
  liveBadge.textContent = "reconnecting…";
  liveBadge.classList.remove("on");
  setTimeout(() => { if (streamAbort === controller) stream(); }, 2000);
}

function dispatch(block) {
  let kind = "message", data = "", id = null;
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) kind = line.slice(6).trim();
    else if (line.startsWith("data:")) data += (data ? "\n" : "") + line.slice(5).replace(/^ /, "");
    else if (line.startsWith("id:")) id = line.slice(3).trim();
  }
  if (id !== null) lastEventId = id;
  if (kind === "view" && data) onEvent(data);
  else if (kind === "gap") {
    // Events were lost to retention: what the stream said of a view may be
    // stale, and the page too.
    latestStates.clear();
    scheduleRefresh(0);
  }
}

function restartStream() {
  if (streamAbort) streamAbort.abort();
  stream();
}

window.addEventListener("hashchange", () => {
  say("");
  render(true);
});
render(false);
stream();
