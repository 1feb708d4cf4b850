// lagwatch dashboard: polls /dashboard/api every few seconds and re-renders. No framework, no third-party code.
// Every name from Kafka (clusters, groups, topics, owners) reaches the page as text nodes, never as HTML.
// A cluster may hold 100k groups: the api sends the worst few hundred (those matching the filter box's text) and
// totals over all of them; the tiles show the totals, the table says how many of how many it shows.
"use strict";

const API = "/dashboard/api";
const SVG_NS = "http://www.w3.org/2000/svg";
const params = new URLSearchParams(location.search);
// At most an hour: setTimeout treats delays past 2^31 - 1 ms (~24.8 days) as 0, so a link with a huge ?refresh=
// would make the page poll the api back to back.
const REFRESH_MS = Math.min(3600, Math.max(1, Number(params.get("refresh")) || 5)) * 1000;
const GROUP_STATUSES = ["ERR", "WARN", "OK"];
const FILTER_DELAY_MS = 300; // typing in the filter box asks the api once the typing pauses
// The page's link keeps the open groups while it stays this short: Kafka allows 32 kB group names, and a request
// line over 8 kB is refused (the api's and most proxies' limit), so a longer link would not load the page again.
const MAX_LINK_QUERY = 4000;

const state = {
  cluster: params.get("cluster"), // null: the api's first cluster
  q: params.get("q") || "", // the filter box: groups whose name holds it (any case)
  limit: params.get("limit"), // null: the api's default number of rows
  // the matching groups passed over, worst first (the page); a link's junk or negative offset: the first page
  offset: Math.max(0, Math.trunc(Number(params.get("offset")))) || 0,
  incidentOffset: Math.max(0, Math.trunc(Number(params.get("incident_offset")))) || 0, // the same, of open incidents
  open: new Set(params.getAll("group")), // groups whose partitions are shown
  clusters: [],
  overview: null, // of state.cluster; null while it loads
  details: new Map(), // group -> status object with partitions and windows
  error: null,
  updatedAt: null,
};
let timer = null;
let filterTimer = null;
let cycle = 0; // the latest refresh: an older one still in flight (the user clicked meanwhile) drops its answer

// --- data -------------------------------------------------------------------------------------------------------

// `body`, when given, is POSTed as JSON: a group's name goes there, as it may not fit in a URL.
async function getJSON(path, body = undefined) {
  const asked = { headers: { Accept: "application/json" }, cache: "no-store" };
  if (body !== undefined) {
    asked.method = "POST";
    asked.headers["Content-Type"] = "application/json";
    asked.body = JSON.stringify(body);
  }
  const response = await fetch(path, asked);
  let answer = null;
  try {
    answer = await response.json();
  } catch {
    // not JSON (a proxy's error page): the status says enough
  }
  if (!response.ok) {
    const error = new Error(answer && answer.message ? answer.message : `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return answer;
}

function overviewPath(cluster) {
  const query = new URLSearchParams();
  if (cluster) query.set("cluster", cluster);
  if (state.q) query.set("q", state.q);
  if (state.limit) query.set("limit", state.limit);
  if (state.offset) query.set("offset", state.offset);
  if (state.incidentOffset) query.set("incident_offset", state.incidentOffset);
  const text = query.toString();
  return `${API}/overview${text ? `?${text}` : ""}`;
}

async function loadOverview() {
  try {
    return await getJSON(overviewPath(state.cluster));
  } catch (error) {
    if (error.status !== 404 || !state.cluster) throw error;
    state.cluster = null; // a cluster that went away: fall back to the first one
    return getJSON(overviewPath(null));
  }
}

async function loadDetail(cluster, group) {
  try {
    return (await getJSON(`${API}/group`, { cluster, group })).status;
  } catch (error) {
    if (error.status === 404) return null; // expired or deleted since the overview
    throw error;
  }
}

// The next poll waits at least twice as long as this one took, so a slow api (a big cluster) is not polled flat out.
async function refresh() {
  const mine = ++cycle;
  const started = performance.now();
  clearTimeout(timer);
  try {
    const overview = await loadOverview();
    const live = new Set(overview.groups.map((g) => g.group));
    const open = [...state.open].filter((g) => live.has(g));
    const details = await Promise.all(open.map((g) => loadDetail(overview.cluster, g)));
    if (mine !== cycle) return;
    state.clusters = overview.clusters;
    state.overview = overview;
    state.cluster = overview.cluster;
    state.details = new Map(open.map((g, i) => [g, details[i]]));
    state.error = null;
    state.updatedAt = new Date(overview.generated_at); // shared by every viewer polling within a few seconds
  } catch (error) {
    if (mine !== cycle) return;
    state.error = error.message || String(error);
  }
  render();
  timer = setTimeout(refresh, Math.max(REFRESH_MS, 2 * (performance.now() - started)));
}

function remember() {
  const query = new URLSearchParams();
  if (state.cluster) query.set("cluster", state.cluster);
  if (state.q) query.set("q", state.q);
  if (state.limit) query.set("limit", state.limit);
  if (state.offset) query.set("offset", state.offset);
  if (state.incidentOffset) query.set("incident_offset", state.incidentOffset);
  if (params.get("refresh")) query.set("refresh", params.get("refresh"));
  let length = query.toString().length;
  for (const group of state.open) {
    const part = new URLSearchParams({ group }).toString().length + 1; // with its "&"
    if (length + part > MAX_LINK_QUERY) continue; // open on this page, not in its link
    query.append("group", group);
    length += part;
  }
  history.replaceState(null, "", `${location.pathname}?${query}`);
}

// --- formatting -------------------------------------------------------------------------------------------------

const number = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));
const percent = (x) => `${Math.round(x * 100)}%`;
const clock = (ms) => new Date(ms).toLocaleTimeString("en-GB", { hour12: false });

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

const ago = (ms) => (ms ? `${duration(Math.max(0, Date.now() - ms) / 1000)} ago` : "—");

// Lag in seconds; a lower bound (the log-end history does not reach back far enough) reads "at least".
function lagSeconds(seconds, lowerBound) {
  const text = el("span", { class: "lag-seconds" }, duration(seconds));
  if (!lowerBound || seconds === null) return text;
  return el("span", { title: "at least: the log-end history does not reach back to the committed offset" }, "≥ ", text);
}

// --- DOM helpers ------------------------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attrs);
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttributes(node, attrs);
  node.append(...children);
  return node;
}

function setAttributes(node, attrs) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
}

const badge = (status) => el("span", { class: `badge s-${status}` }, status);
// A group's name as a table shows it: cut short with an ellipsis past the room its column has (Kafka allows 32 kB
// names, and one would push every other column off the page), whole on hover.
const groupName = (group) => el("span", { class: "name", title: group }, group);
const nameCell = (...content) => el("td", { class: "name-cell" }, ...content);
const empty = (text) => el("p", { class: "empty" }, text);

function table(headers, rows) {
  const head = el(
    "tr",
    {},
    headers.map(([label, cls]) => el("th", { class: cls }, label)),
  );
  return el("table", {}, el("thead", {}, head), el("tbody", {}, rows));
}

// Total lag over the group's windows (see dashboard_data.py): a line with a light area under it.
function sparkline(points, status) {
  const width = 140;
  const height = 28;
  const values = points.map(([, lag]) => lag);
  const top = Math.max(1, ...values);
  const first = points[0][0];
  const span = Math.max(1, points[points.length - 1][0] - first);
  const xy = points.map(([at, lag]) => [
    ((at - first) / span) * (width - 2) + 1,
    height - 2 - (lag / top) * (height - 4),
  ]);
  if (xy.length === 1) xy.unshift([1, xy[0][1]]); // one point: a flat line
  const line = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  const area = `1,${height} ${line} ${width - 1},${height}`;
  const title = `total lag, ${clock(first)} to now: ${values.map(number).join(" → ")}`;
  return svg(
    "svg",
    { class: "spark", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-points": values.join(",") },
    svg("title", {}, title),
    svg("polygon", { class: `s-${status}`, points: area }),
    svg("polyline", { class: `s-${status}`, points: line }),
  );
}

// A partition's window, oldest slot first: a bar per commit, its height the lag when it was stored.
function windowBars(window, status) {
  const slot = 10;
  const height = 24;
  const top = Math.max(1, ...window.map((e) => (e && e.lag) || 0));
  const bars = window.map((entry, i) => {
    const x = i * slot;
    if (!entry) return svg("rect", { class: "slot", x, y: height - 2, width: slot - 2, height: 2 });
    const h = Math.max(2, ((entry.lag || 0) / top) * (height - 2));
    const text = `offset ${number(entry.offset)}, lag ${number(entry.lag)}, committed ${clock(entry.timestamp)}`;
    return svg(
      "rect",
      { class: `bar s-${status}`, x, y: height - h, width: slot - 2, height: h },
      svg("title", {}, text),
    );
  });
  return svg("svg", { class: "window", width: window.length * slot, height, role: "img" }, ...bars);
}

// --- rendering --------------------------------------------------------------------------------------------------

function render() {
  renderHeader();
  const overview = state.overview;
  renderServices(overview);
  if (!overview) {
    replace("summary");
    replace("shown");
    replace("pager");
    replace("groups", empty(state.error ? "No data: the api could not be reached." : "Loading…"));
    replace("incidents");
    replace("changes");
    replace("silences");
    return;
  }
  renderSummary(overview);
  renderGroups(overview);
  renderIncidents(overview);
  renderChanges(overview);
  renderSilences(overview);
}

// What a cluster without one of its services shows: data that no longer moves, which nothing else on the page says.
const WITHOUT = {
  ingest: "no ingest worker (commits are not read)",
  evaluator: "no evaluator (statuses do not change)",
  notifier: "no notifier (alerts are not sent)",
};

function renderServices(overview) {
  const banner = document.getElementById("services");
  const missing = Object.entries(overview?.services || {})
    .filter(([, running]) => running === 0)
    .map(([service]) => service);
  banner.hidden = !missing.length;
  banner.dataset.missing = missing.join(" ");
  const said = missing.map((service) => WITHOUT[service] || `no ${service}`);
  banner.textContent = missing.length ? `Not running for ${overview.cluster}: ${said.join(", ")}.` : "";
}

function replace(id, ...children) {
  document.getElementById(id).replaceChildren(...children);
}

function renderHeader() {
  replace(
    "clusters",
    ...state.clusters.map((name) =>
      el(
        "button",
        { class: name === state.cluster ? "active" : null, "data-cluster": name, onclick: () => selectCluster(name) },
        name,
      ),
    ),
  );
  const freshness = document.getElementById("freshness");
  const every = `refreshes every ${REFRESH_MS / 1000} s`;
  freshness.textContent = state.updatedAt ? `Updated ${clock(state.updatedAt)} · ${every}` : every;
  freshness.classList.toggle("stale", Boolean(state.error));
  const banner = document.getElementById("error");
  banner.hidden = !state.error;
  const since = state.updatedAt ? ` Showing data from ${clock(state.updatedAt)}.` : "";
  banner.textContent = state.error ? `Could not refresh: ${state.error}.${since}` : "";
}

// The cluster's totals as the api counts them over all its groups (the rows are only the worst few hundred).
function renderSummary(overview) {
  const groups = overview.groups;
  const counts = overview.status_counts;
  const count = (status) => (counts ? counts[status] || 0 : groups.filter((g) => g.status === status).length);
  const total = overview.totallag ?? groups.reduce((sum, g) => sum + g.totallag, 0);
  const incidents = overview.incident_count ?? overview.incidents.length;
  const tile = (label, value, status) =>
    el(
      "div",
      { class: `tile${status ? ` s-${status}` : ""}`, "data-tile": label },
      el("div", { class: "value" }, value),
      el("div", { class: "label" }, label),
    );
  replace(
    "summary",
    tile("groups", number(overview.group_count ?? groups.length)),
    ...GROUP_STATUSES.map((s) => tile(s, number(count(s)), s)),
    tile("total lag (messages)", number(total)),
    tile("open incidents", number(incidents), incidents ? "ERR" : null),
  );
}

// "showing 1–200 of 100,000, worst first" when the rows are not every group that matches; what the filter matches.
function shownText(overview) {
  const matching = overview.q ? ` matching “${overview.q}”` : "";
  const shown = overview.shown ?? overview.groups.length;
  const matched = overview.matched ?? overview.groups.length;
  const first = overview.offset || 0;
  if (overview.truncated || first) {
    const range = shown ? `${number(first + 1)}–${number(first + shown)}` : "none";
    return `showing ${range} of ${number(matched)}${matching}, worst first`;
  }
  if (overview.q) return `${number(matched)} of ${number(overview.group_count)} groups${matching}`;
  return "";
}

function renderGroups(overview) {
  if (!overview.cluster) {
    replace("shown");
    replace("pager");
    replace("groups", empty("No clusters yet: none is configured and the ingest has written none to Redis."));
    return;
  }
  replace("shown", shownText(overview));
  replace("pager", ...pager(overview));
  if (!overview.groups.length) {
    const text = overview.offset
      ? `No groups this far down: ${number(overview.matched)} match; “worse” goes back.`
      : overview.q
        ? `No consumer group of cluster ${overview.cluster} has “${overview.q}” in its name.`
        : `No consumer groups with recent commits in cluster ${overview.cluster}.`;
    replace("groups", empty(text));
    return;
  }
  const headers = [
    ["Status"],
    ["Group"],
    ["Partitions", "num"],
    ["Total lag", "num"],
    ["Max lag", "num"],
    ["Behind by", "num"],
    ["Catches up", "num"],
    ["Complete", "num"],
    ["Total lag, recent"],
    ["Last commit"],
    ["Incident"],
  ];
  const rows = overview.groups.flatMap((g) => {
    const row = groupRow(g);
    return state.open.has(g.group) ? [row, detailRow(g, headers.length)] : [row];
  });
  replace("groups", table(headers, rows));
}

function groupRow(g) {
  const open = state.open.has(g.group);
  const maxlag = g.maxlag ? `${number(g.maxlag.current_lag)} (${g.maxlag.topic}:${g.maxlag.partition})` : "—";
  return el(
    "tr",
    { class: `group-row s-${g.status}`, "data-group": g.group, "data-status": g.status },
    el("td", {}, badge(g.status)),
    nameCell(
      el(
        "button",
        { class: "link", "aria-expanded": String(open), onclick: () => toggleGroup(g.group) },
        groupName(g.group),
      ),
    ),
    el("td", { class: "num" }, number(g.partition_count)),
    el("td", { class: "num", "data-field": "totallag" }, number(g.totallag)),
    el("td", { class: "num" }, maxlag),
    el(
      "td",
      { class: "num", "data-field": "max_lag_seconds" },
      lagSeconds(g.max_lag_seconds, g.max_lag_seconds_lower_bound),
    ),
    el("td", { class: "num", "data-field": "group_catchup" }, catchUp(g.velocity)),
    el("td", { class: "num" }, percent(g.complete)),
    el("td", {}, sparkline(g.sparkline, g.status)),
    el("td", { class: "muted" }, ago(g.last_commit)),
    el(
      "td",
      {},
      g.incident ? el("span", { title: g.incident.incident_id }, `open ${ago(g.incident.started_at)}`) : "—",
    ),
  );
}

function detailRow(g, columns) {
  const detail = state.details.get(g.group);
  const content = detail ? [insight(detail), partitionsTable(detail)] : empty("This group has no windows any more.");
  return el("tr", { class: "detail", "data-detail": g.group }, el("td", { colspan: columns }, content));
}

// When the lag is cleared at this pace (or that it is not), and why (lagwatch's velocity and explanation).
function catchUp(v) {
  if (!v) return "—";
  if (v.catchup === "caught_up") return "caught up";
  if (v.catchup === "keeping_up") return "keeping up";
  if (v.catchup === "never") return "never at this rate";
  if (v.catchup === "catching_up") return `~${duration(v.catchup_seconds)}`;
  return "—";
}

// One decimal, or two significant digits under 1: a quiet topic's 0.022/s is not "0.0/s" (as the explanations say it).
function rate(n) {
  if (n === null || n === undefined) return "—";
  const x = Number(n);
  return `${x === 0 || Math.abs(x) >= 0.95 ? x.toFixed(1) : Number(x.toPrecision(2))}/s`;
}

// Retention risk: messages already deleted unread, or when the oldest unread one goes.
function retentionNote(r) {
  if (!r) return "";
  if (r.skipped_messages) return el("span", { "data-field": "skipped" }, ` · ${number(r.skipped_messages)} messages deleted unread`);
  if (r.retention_risk_seconds === null || r.retention_risk_seconds === undefined) return "";
  return el("span", { "data-field": "retention" }, ` · retention deletes unread messages in ~${duration(r.retention_risk_seconds)}`);
}

function insight(status) {
  const v = status.velocity;
  const why = status.explanation;
  if (!v && !why && !status.retention) return null;
  const growth = v && v.lag_growth_per_second !== null ? ` (lag ${v.lag_growth_per_second > 0 ? "+" : ""}${rate(v.lag_growth_per_second)})` : "";
  return el(
    "p",
    { class: "insight", "data-field": "insight" },
    el("strong", {}, "Catches up: "),
    el("span", { "data-field": "catchup" }, `${catchUp(v)}${growth}`),
    v ? ` · consuming ${rate(v.consume_rate)}, producing ${rate(v.produce_rate)}` : "",
    retentionNote(status.retention),
    why ? el("span", { "data-field": "explanation", "data-code": why.code }, ` · ${why.text}`) : "",
  );
}

function partitionsTable(status) {
  const headers = [
    ["Topic"],
    ["Partition", "num"],
    ["Status"],
    ["Lag", "num"],
    ["Behind by", "num"],
    ["Catches up", "num"],
    ["Window (lag per commit)"],
    ["Committed offsets"],
    ["Owner"],
    ["Client"],
  ];
  const rows = status.partitions.map((p) => {
    const entries = p.window.filter(Boolean);
    const offsets = entries.length
      ? `${number(entries[0].offset)} → ${number(entries[entries.length - 1].offset)}`
      : "—";
    return el(
      "tr",
      { "data-partition": `${p.topic}:${p.partition}`, "data-status": p.status },
      el("td", {}, p.topic),
      el("td", { class: "num" }, p.partition),
      el("td", {}, badge(p.status)),
      el("td", { class: "num", "data-field": "current_lag" }, number(p.current_lag)),
      el(
        "td",
        { class: "num", "data-field": "current_lag_seconds" },
        lagSeconds(p.current_lag_seconds, p.current_lag_seconds_lower_bound),
      ),
      el("td", { class: "num", "data-field": "catchup" }, catchUp(p.velocity)),
      el("td", {}, windowBars(p.window, p.status)),
      el("td", { class: "muted" }, offsets),
      el("td", {}, p.owner || "—"),
      el("td", {}, p.client_id || "—"),
    );
  });
  return table(headers, rows);
}

// A panel listing `items` as a table, or saying `emptyText` when there are none; `note` below it, if any.
function listPanel(id, items, emptyText, headers, row, note = null) {
  const notes = note ? [el("p", { class: "muted", "data-note": id }, note)] : [];
  replace(id, items.length ? table(headers, items.map(row)) : empty(emptyText), ...notes);
}

// At most as many open incidents as group rows, worst first, those whose group's name holds the filter's text; paged
// apart from the groups (a wide outage opens thousands): the note says which of how many these are.
function incidentsText(overview) {
  const all = overview.incident_count ?? overview.incidents.length;
  const matched = overview.incident_matched ?? all;
  const first = overview.incident_offset || 0;
  const shown = overview.incidents.length;
  const matching = overview.q && matched < all ? ` matching “${overview.q}” (${number(all)} open in all)` : "";
  if (!overview.incidents_truncated && !first) return matching ? `${number(matched)} open${matching}` : null;
  const range = shown ? `${number(first + 1)}–${number(first + shown)}` : "none";
  return `showing ${range} of ${number(matched)} open incidents${matching}, worst first`;
}

function renderIncidents(overview) {
  const headers = [["Status"], ["Group"], ["Opened"], ["Incident"]];
  const all = overview.incident_count ?? overview.incidents.length;
  let emptyText = all ? "None shown." : "No open incidents.";
  if (overview.incident_offset) emptyText = "No open incidents this far down; “worse” goes back.";
  else if (all && overview.q) emptyText = `No open incident's group has “${overview.q}” in its name.`;
  const note = incidentsText(overview);
  listPanel("incidents", overview.incidents, emptyText, headers, (i) =>
    el(
      "tr",
      { "data-incident": i.group },
      el("td", {}, badge(i.status)),
      nameCell(groupName(i.group)),
      el("td", { class: "muted" }, i.started_at ? `${clock(i.started_at)} (${ago(i.started_at)})` : "—"),
      el("td", { class: "muted" }, i.incident_id),
    ),
    note,
  );
  const buttons = incidentPager(overview);
  if (buttons.length) document.getElementById("incidents").append(el("p", { class: "pager" }, ...buttons));
}

function renderChanges(overview) {
  const headers = [["At"], ["Group"], ["Change"], ["Total lag", "num"], ["Behind by", "num"]];
  const emptyText = "No status changes recorded yet (the evaluator records them).";
  listPanel("changes", overview.changes, emptyText, headers, (c) =>
    el(
      "tr",
      { "data-change": c.group, "data-status": c.status },
      el("td", { class: "muted" }, clock(c.at)),
      nameCell(groupName(c.group)),
      el("td", { class: "transition" }, c.previous_status ? badge(c.previous_status) : "", " → ", badge(c.status)),
      el("td", { class: "num" }, number(c.totallag)),
      el("td", { class: "num" }, lagSeconds(c.max_lag_seconds ?? null, c.max_lag_seconds_lower_bound)),
    ),
  );
}

// Silences (maintenance windows) that hold now or will: made and ended through /api/v1/silences.
function renderSilences(overview) {
  const headers = [["State"], ["Matches"], ["From"], ["Until"], ["Reason"], ["By"]];
  const emptyText = "No silences (POST /api/v1/silences mutes a group, topic or cluster for a while).";
  const matcher = (m) => `${m.name} ${m.regex ? "=~" : "="} ${m.value}`;
  const moment = (seconds) => new Date(seconds * 1000).toLocaleString("en-GB", { hour12: false });
  listPanel("silences", overview.silences || [], emptyText, headers, (s) =>
    el(
      "tr",
      { "data-silence": s.id, "data-state": s.state },
      el("td", {}, s.state),
      el("td", {}, (s.matchers || []).map(matcher).join(", ")),
      el("td", { class: "muted" }, moment(s["starts-at"])),
      el("td", { class: "muted" }, moment(s["ends-at"])),
      el("td", {}, s.reason || "—"),
      el("td", { class: "muted" }, s["created-by"]),
    ),
  );
}

// --- interaction ------------------------------------------------------------------------------------------------

// Worse and better pages, `step` rows each, shown when the rows are not all that match: `first` rows passed over,
// `more` past these; `attribute` names the buttons, `go(offset)` turns to a page.
function pagerButtons(first, more, step, attribute, go) {
  if (!more && !first) return [];
  const button = (label, offset, enabled) =>
    el("button", { class: "page", [attribute]: label, disabled: !enabled, onclick: () => go(offset) }, label);
  return [button("worse", Math.max(0, first - step), first > 0), button("better", first + step, Boolean(more))];
}

// The groups' pages, `limit` rows each.
function pager(overview) {
  const step = Math.max(1, overview.limit || overview.shown || 1);
  return pagerButtons(overview.offset || 0, overview.truncated, step, "data-page", (offset) => turn("offset", offset));
}

// The open incidents' pages, `limit` each, apart from the groups'.
function incidentPager(overview) {
  const step = Math.max(1, overview.limit || overview.incidents.length || 1);
  const go = (offset) => turn("incidentOffset", offset);
  return pagerButtons(overview.incident_offset || 0, overview.incidents_truncated, step, "data-incident-page", go);
}

// A page of the groups ("offset") or of the open incidents ("incidentOffset").
function turn(which, offset) {
  state[which] = offset;
  remember();
  refresh();
}

function selectCluster(name) {
  if (name === state.cluster) return;
  state.cluster = name;
  state.offset = 0;
  state.incidentOffset = 0;
  state.open.clear();
  state.overview = null;
  remember();
  render();
  refresh();
}

// The filter box: once typing pauses, ask for the groups whose name holds its text (kept in the link, like the rest).
function filterGroups(text) {
  if (text === state.q) return;
  state.q = text;
  state.offset = 0; // the worst of what now matches
  state.incidentOffset = 0;
  remember();
  refresh();
}

const filterBox = document.getElementById("filter");
filterBox.value = state.q;
filterBox.addEventListener("input", () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => filterGroups(filterBox.value), FILTER_DELAY_MS);
});

function toggleGroup(group) {
  if (state.open.has(group)) state.open.delete(group);
  else state.open.add(group);
  remember();
  render();
  refresh();
}

refresh();
