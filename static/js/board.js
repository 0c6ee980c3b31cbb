// The dispatcher board: owns the dashboard socket and renders the live queue from it.
//
// Protocol (triage/realtime.py): a snapshot with a sequence number, then events each carrying the next
// number. A gap, a reconnect or a server "resync" makes us ask for a fresh snapshot; until it comes,
// events are ignored. The selected call's guidance comes from its own socket (ws/calls/<id>/).
// Everything else on the page (actions) is plain forms posted by htmx.

// The statuses and their labels come from the server (triage/models.py, rendered into the page), never typed here.
const VOCABULARY = JSON.parse(document.getElementById("board-vocabulary").textContent);
const ACTIVE = new Set(VOCABULARY.active_statuses);
const STATUS_LABEL = VOCABULARY.status_labels;
const STATUS = VOCABULARY.statuses;  // the values by name: STATUS.DONE
const MAX_QUEUE_ROWS = 200;
const MAX_DONE_ROWS = 50;
const TICK_MS = 500;

const root = document.getElementById("board");
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const state = {
  calls: new Map(), tiers: new Map(), agingEnabled: false,
  seq: null, awaitingSnapshot: true, snapshots: 0, clockOffsetMs: 0,
  selectedId: null, alerted: new Set(), metrics: null, metricsHistory: [], escalated: new Set(),
};
window.triageBoard = state; // for people debugging in the console, and for the browser tests

// --- the dashboard socket --------------------------------------------------------------------------

let socket = null;
let retries = 0;
let reconnectTimer = null;

function wsUrl(path) {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
}

function connect() {
  clearTimeout(reconnectTimer);
  state.awaitingSnapshot = true;
  socket = new WebSocket(wsUrl(root.dataset.wsPath));
  socket.addEventListener("message", (e) => handle(JSON.parse(e.data)));
  socket.addEventListener("close", (e) => {
    if (e.code === 4401) { location.assign(root.dataset.loginUrl); return; }
    if (e.code === 4403) { showOverlay("Not allowed", "Your account has no dispatch-centre role."); return; }
    scheduleReconnect();
  });
}

function scheduleReconnect() {
  // Exponential backoff with jitter (0.5 s … 10 s), so a restarted server is not hit by every board at once.
  const delay = Math.min(10000, 500 * 2 ** retries) * (0.75 + Math.random() * 0.5);
  retries += 1;
  const until = Date.now() + delay;
  const show = () => {
    const left = Math.max(0, Math.ceil((until - Date.now()) / 1000));
    showOverlay("Connection lost", `The board is not live. Reconnecting in ${left} s…`);
    setConn("lost", `Disconnected · retry in ${left} s`);
  };
  show();
  connectionAlarmStart();
  const countdown = setInterval(show, 1000);
  reconnectTimer = setTimeout(() => { clearInterval(countdown); connect(); }, delay);
}

function requestSnapshot() {
  state.awaitingSnapshot = true;
  setConn("syncing", "Resynchronising…");
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "snapshot.request" }));
}

function handle(msg) {
  if (msg.type === "snapshot") { applySnapshot(msg); return; }
  if (state.awaitingSnapshot || state.seq === null) return;
  if (msg.seq <= state.seq) return; // already covered by the snapshot
  if (msg.seq !== state.seq + 1) { requestSnapshot(); return; } // a dropped event: start again
  state.seq = msg.seq;
  root.dataset.seq = String(state.seq);
  if (msg.type === "call.updated") applyCall(msg.call, true);
  else if (msg.type === "call.removed") state.calls.delete(msg.call_id);
  else if (msg.type === "metrics") applyMetrics(msg.metrics);
  else if (msg.type === "resync") { requestSnapshot(); return; }
  scheduleRender();
}

function applySnapshot(snap) {
  const first = state.snapshots === 0;
  state.snapshots += 1;
  state.seq = snap.seq;
  state.awaitingSnapshot = false;
  state.clockOffsetMs = Date.parse(snap.server_time) - Date.now();
  state.agingEnabled = Boolean(snap.aging_enabled);
  state.tiers = new Map(snap.tiers.map((t) => [t.id, t]));
  const previous = state.calls;
  state.calls = new Map();
  for (const call of snap.calls) applyCall(call, !first && !previous.has(call.id));
  state.metricsHistory = snap.metrics_history || [];
  if (snap.metrics) applyMetrics(snap.metrics, false);
  retries = 0;
  root.dataset.seq = String(state.seq);
  root.dataset.live = "1";
  hideOverlay();
  connectionAlarmStop();
  setConn("live", "Live");
  alertTick();
  scheduleRender();
}

function applyCall(call, isNews) {
  if (!call.live) { state.calls.delete(call.id); return; }
  const before = state.calls.get(call.id);
  state.calls.set(call.id, call);
  const urgent = call.level !== null && call.level <= 2 && ACTIVE.has(call.status);
  if (urgent && !state.alerted.has(call.id)) {
    state.alerted.add(call.id);
    if (isNews) announceUrgent(call);
  }
  if (call.id === state.selectedId && before && panelFieldsChanged(before, call)) refreshPanelSoon();
}

function applyMetrics(metrics, append = true) {
  state.metrics = metrics;
  if (append) {
    state.metricsHistory.push(metrics);
    if (state.metricsHistory.length > 120) state.metricsHistory.shift();
  }
  renderMetrics();
}

// --- ordering and timers ------------------------------------------------------------------------------

function nowMs() { return Date.now() + state.clockOffsetMs; }

// The level the queue orders a call by. The server computes it with the scheduler's aging and says when it
// next improves (level_changes); the board only looks the current one up, it never computes aging itself.
function effectiveLevel(call, atMs) {
  let level = call.effective_level;
  for (const change of call.level_changes || []) if (Date.parse(change.at) <= atMs) level = change.level;
  return level ?? 6; // untriaged calls sort last
}

function queueOrder() {
  const now = nowMs();
  const active = [];
  const finished = [];
  for (const call of state.calls.values()) (ACTIVE.has(call.status) ? active : finished).push(call);
  // Linked calls are grouped: an incident's calls sit together where its most urgent call would be.
  const groups = new Map();
  for (const call of active) {
    if (call.incident_id === null || call.incident_id === undefined) continue;
    const g = groups.get(call.incident_id) || { level: 99, created: Infinity };
    g.level = Math.min(g.level, effectiveLevel(call, now));
    g.created = Math.min(g.created, Date.parse(call.created_at));
    groups.set(call.incident_id, g);
  }
  const group = (call) => groups.get(call.incident_id) || { level: effectiveLevel(call, now), created: Date.parse(call.created_at) };
  active.sort((a, b) => group(a).level - group(b).level || group(a).created - group(b).created
    || effectiveLevel(a, now) - effectiveLevel(b, now)
    || Date.parse(a.created_at) - Date.parse(b.created_at) || a.id - b.id);
  finished.sort((a, b) => Date.parse(b.done_at || b.created_at) - Date.parse(a.done_at || a.created_at));
  return { active, finished };
}

function timerInfo(call, now) {
  const end = call.done_at ? Date.parse(call.done_at) : now;
  const elapsed = Math.max(0, (end - Date.parse(call.created_at)) / 1000);
  const tier = state.tiers.get(call.tier_id);
  let level = "ok";
  let target = "";
  if (tier) {
    const waitingForFirstToken = ACTIVE.has(call.status) && !call.first_token_at;
    const [mean, p90, what] = waitingForFirstToken
      ? [tier.ttft_target_mean_s, tier.ttft_target_p90_s, "first guidance"]
      : [tier.e2e_target_mean_s, tier.e2e_target_p90_s, "complete guidance"];
    if (elapsed > p90) level = "alert";
    else if (elapsed > mean) level = "warn";
    target = `${what} target ${fmtSeconds(mean)} (p90 ${fmtSeconds(p90)})`;
  }
  return { elapsed, level, target };
}

function fmtSeconds(s) {
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 120) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  return `${m}:${String(Math.floor(s % 60)).padStart(2, "0")}`;
}

function timerHtml(call, now) {
  const t = timerInfo(call, now);
  const flag = t.level === "alert" ? " <span class=\"flag\">LATE</span>" : t.level === "warn" ? " <span class=\"flag\">SLOW</span>" : "";
  return `<span class="timer timer-${t.level}" title="${esc(t.target)}">${fmtSeconds(t.elapsed)}${flag}</span>`;
}

// --- rendering -------------------------------------------------------------------------------------

let renderPending = false;
function scheduleRender() {
  if (renderPending) return;
  renderPending = true;
  requestAnimationFrame(() => { renderPending = false; render(); });
}

function esiBadge(call, now) {
  if (call.level === null) return "<span class=\"esi esi-none\">ESI –</span>";
  const note = call.overridden ? ` <span class="override-mark" title="Overridden by a dispatcher (classifier said ESI ${esc(call.predicted_esi)})">overridden</span>` : "";
  const point = call.decision_point ? ` <span class="decision-point" title="ESI decision point">${esc(call.decision_point)}</span>` : "";
  const unsure = call.uncertain ? " <span class=\"uncertain\" title=\"The algorithm and the model disagree, or the probability is split: check the call\">uncertain</span>" : "";
  const held = call.held ? ` <span class="held" title="Uncertain: held at the more urgent level until a dispatcher confirms (key v) or overrides; the classifier said ESI ${esc(call.predicted_esi)}">held</span>` : "";
  const off = call.off_protocol ? " <span class=\"off-protocol-badge\" title=\"The model said something the protocol does not: its guidance was replaced by the protocol's own text\">off-protocol</span>" : "";
  const brief = call.guidance_brief ? " <span class=\"brief-badge\" title=\"Key questions only: generated while the surge controller protected ESI 1-2; regenerate it for the full protocol\">key questions only</span>" : "";
  const aged = effectiveLevel(call, now);
  const agedNote = aged < call.level ? ` <span class="aged" title="Waiting moved it up: queued as ESI ${aged}">→ ${aged}</span>` : "";
  return `<span class="esi esi-${call.level}">ESI ${call.level}</span>${agedNote}${point}${dispatchHtml(call)}${unsure}${held}${off}${brief}${note}`;
}

// The centre's own terms beside the ESI: its priority code and response mode, the units in the tooltip.
function dispatchHtml(call) {
  const d = call.dispatch_priority;
  if (!d) return "";
  const units = d.resources.length
    ? d.resources.map((r) => `${r.count} ${r.unit}${r.lights_and_sirens ? " (lights and sirens)" : ""}`).join(", ")
    : "no vehicle";
  return `<br><span class="dispatch-priority response-${esc(d.response_mode)}" title="Dispatch priority ${esc(d.priority_code)}, ${esc(d.response_mode)}: ${esc(units)}">P${esc(d.priority_code)} · ${esc(d.response_mode)}</span>`;
}

function reasonsHtml(call) {
  if (!call.reasons || !call.reasons.length) return "";
  return `<br><small class="reasons">${call.reasons.map(esc).join(" · ")}</small>`;
}

function protocolHtml(call) {
  const p = call.protocol;
  if (!p) return "";
  const confidence = p.confidence === null ? "" : ` (${Number(p.confidence).toFixed(2)})`;
  const also = p.runner_up_title ? ` · also: ${esc(p.runner_up_title)}` : "";
  if (p.switched_by) return `<br><small class="protocol">Protocol: ${esc(p.title)} · switched by ${esc(p.switched_by)}</small>`;
  if (p.unclear) {
    return `<br><small class="protocol protocol-unclear" title="Below the selector's confidence threshold: the family's key questions are read">Protocol: unclear (${esc(p.family_title)}) · likeliest: ${esc(p.title)}${confidence}${also}</small>`;
  }
  return `<br><small class="protocol">Protocol: ${esc(p.title)}${confidence}${also}</small>`;
}

// A row's class and cells. The timer cell is the ticking clock (tickTimers), patched like the others.
function rowClass(call) {
  const escalated = state.escalated.has(call.id) ? " escalated" : "";
  return `call-row esi-row-${call.level ?? "none"}${call.id === state.selectedId ? " selected" : ""}${escalated}`;
}

function rowCells(call, now) {
  const tier = state.tiers.get(call.tier_id);
  const preempt = call.preemption_count ? ` <span class="preempts" title="Preempted ${call.preemption_count} times">${call.preemption_count}× preempted</span>` : "";
  const ack = call.acknowledged ? " <span class=\"ack\" title=\"Acknowledged\">✔ ack</span>" : "";
  const overdue = state.escalated.has(call.id) ? " <span class=\"overdue\" title=\"Not acknowledged within its tier's time: escalated to the supervisors\">not acknowledged</span>" : "";
  const claimed = call.assigned_to ? ` <span class="claimed" title="Being worked by ${esc(call.assigned_to)}">${esc(call.assigned_to)}</span>` : "";
  const linked = call.incident_id ? ` <span class="incident${call.incident_confirmed ? " confirmed" : ""}" title="${call.incident_confirmed ? "Linked" : "Proposed as linked"} with other calls about the same incident${call.guidance_source_id ? `; takes the guidance of call #${call.guidance_source_id}` : ""}">incident ${call.incident_id}${call.incident_confirmed ? "" : "?"}</span>` : "";
  return [
    esiBadge(call, now),
    `<a href="/calls/${call.id}/" data-select="${call.id}" tabindex="-1">#${call.id}</a><br><small class="muted">${esc(call.external_id)}</small>${claimed}${linked}`,
    `${esc(call.summary)}${protocolHtml(call)}${reasonsHtml(call)}${call.location ? `<br><small class="muted">${esc(call.location)}</small>` : ""}`,
    `<span class="status status-${call.status}">${STATUS_LABEL[call.status] || esc(call.status)}</span>${preempt}${ack}${overdue}`,
    timerHtml(call, now),
    tier ? `<span class="swatch" style="background:${esc(tier.colour)}" aria-hidden="true"></span> ${esc(tier.name)}` : "–",
  ];
}

const CELL_CLASS = ["", "", "summary", "", "", ""];

function newRow(id) {
  const tr = document.createElement("tr");
  tr.dataset.id = String(id);
  tr.tabIndex = -1;  // focusable by script (the selected row takes focus), not a tab stop of its own
  for (const cls of CELL_CLASS) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    tr.append(td);
  }
  tr.cells[4].dataset.timer = String(id);
  return tr;
}

// Keyed update: each call keeps its <tr> for as long as it is shown; a cell is rewritten only when its content
// changed, and rows are moved into order without being re-created. Keyboard focus and a screen reader's place
// survive the board's updates (up to 4 a second in a burst), which a rebuild with innerHTML wiped each time.
function patchRows(tbody, calls, now, emptyText) {
  const focused = document.activeElement;
  const focusedId = focused && focused.closest ? focused.closest("tr[data-id]")?.dataset.id : undefined;
  const existing = new Map();
  for (const tr of tbody.querySelectorAll(":scope > tr")) {
    if (tr.dataset.id) existing.set(tr.dataset.id, tr); else tr.remove();  // the "no calls" placeholder
  }
  let cursor = tbody.firstElementChild;
  for (const call of calls) {
    const key = String(call.id);
    let tr = existing.get(key);
    existing.delete(key);
    if (!tr) tr = newRow(call.id);
    const cls = rowClass(call);
    if (tr.className !== cls) tr.className = cls;
    const selected = call.id === state.selectedId;
    if (selected !== tr.hasAttribute("aria-current")) {
      if (selected) tr.setAttribute("aria-current", "true"); else tr.removeAttribute("aria-current");
    }
    rowCells(call, now).forEach((html, i) => {
      const td = tr.cells[i];
      if (td.dataset.html !== html) { td.innerHTML = html; td.dataset.html = html; }
    });
    if (tr === cursor) cursor = cursor.nextElementSibling;
    else tbody.insertBefore(tr, cursor);  // moves the row (or inserts a new one) before the cursor
  }
  for (const tr of existing.values()) tr.remove();
  if (!calls.length && emptyText) tbody.innerHTML = `<tr><td colspan="6" class="muted">${esc(emptyText)}</td></tr>`;
  // A row moved ahead of others was detached for a moment, which drops focus: give it back.
  if (focusedId !== undefined && document.activeElement !== focused) {
    const again = focused.isConnected ? focused : tbody.querySelector(`tr[data-id="${focusedId}"]`);
    if (again) again.focus({ preventScroll: true });
  }
}

function render() {
  const now = nowMs();
  const { active, finished } = queueOrder();
  patchRows($("queue-body"), active.slice(0, MAX_QUEUE_ROWS), now, "No calls waiting.");
  $("queue-more").textContent = active.length > MAX_QUEUE_ROWS ? `…and ${active.length - MAX_QUEUE_ROWS} more (search to find them)` : "";
  $("queue-count").textContent = `(${active.length})`;
  patchRows($("done-body"), finished.slice(0, MAX_DONE_ROWS), now, "");
  $("done-count").textContent = `(${finished.length})`;
  renderEscalations();
}

function tickTimers() {
  const now = nowMs();
  for (const cell of document.querySelectorAll("[data-timer]")) {
    const call = state.calls.get(Number(cell.dataset.timer));
    if (call && !call.done_at) {
      const html = timerHtml(call, now);
      if (cell.dataset.html !== html) { cell.innerHTML = html; cell.dataset.html = html; }
    }
  }
}

let ticks = 0;
setInterval(() => {
  tickTimers();
  alertTick();
  ticks += 1;
  if (state.agingEnabled && ticks % 4 === 0) scheduleRender(); // a level change the server announced may be due
}, TICK_MS);

// --- metrics panel: hand-rolled SVG sparklines, no library --------------------------------------------

function sparkline(values, label) {
  const points = values.map((v, i) => [i, v]).filter(([, v]) => typeof v === "number");
  if (points.length < 2) return `<svg class="spark" viewBox="0 0 120 28" role="img" aria-label="${esc(label)}: not enough data yet"></svg>`;
  const max = Math.max(...points.map(([, v]) => v)) || 1;
  const n = Math.max(values.length - 1, 1);
  const path = points.map(([i, v]) => `${(i / n * 118 + 1).toFixed(1)},${(27 - v / max * 25).toFixed(1)}`).join(" ");
  return `<svg class="spark" viewBox="0 0 120 28" role="img" aria-label="${esc(label)}: trend over the last ${values.length} samples, peak ${fmtNum(max)}"><polyline points="${path}" /></svg>`;
}

function fmtNum(v, digits = 1) { return typeof v === "number" ? v.toFixed(digits) : "–"; }
function fmtSec(v, digits = 1) { return typeof v === "number" ? `${v.toFixed(digits)} s` : "–"; }
function fmtPct(v) { return typeof v === "number" ? `${Math.round(v * 100)}%` : "–"; }

function renderMetrics() {
  const m = state.metrics;
  if (!m) return;
  const hist = state.metricsHistory;
  const series = (f) => hist.map((p) => { try { return f(p); } catch { return null; } });
  $("metrics-window").textContent = `(finished calls, last ${Math.round(m.window_s / 60)} min)`;
  const waitRows = [1, 2, 3, 4, 5].map((l) => {
    const w = m.waiting_s[String(l)];
    return `<tr><th scope="row"><span class="esi esi-${l}">ESI ${l}</span></th><td>${fmtSec(w.p50)}</td><td>${fmtSec(w.p90)}</td><td>${w.n}</td>
      <td>${sparkline(series((p) => p.waiting_s[String(l)].p90), `ESI ${l} waiting p90`)}</td></tr>`;
  }).join("");
  const slo = m.slo.map((s) => `<tr><th scope="row">${esc(s.name)}</th><td>${fmtPct(s.attained)}</td><td>${s.n}</td>
      <td><meter min="0" max="1" low="0.8" high="0.9" optimum="1" value="${s.attained ?? 0}" aria-label="${esc(s.name)} SLO attainment">${fmtPct(s.attained)}</meter></td></tr>`).join("");
  const engine = m.engine_stale ? "<p class=\"muted\">Inference engine: no recent report.</p>" : "";
  const surge = $("surge-mode");
  if (surge) {
    surge.hidden = !m.surge_protect;
    surge.textContent = m.surge_protect ? "Surge: ESI 1–2 protected (extra generation slots); lower levels wait longer, no call is dropped" : "";
  }
  $("metrics").innerHTML = `
    <div class="metric-grid">
      <div class="metric wide"><h3>Waiting time (completion − arrival)</h3>
        <table class="compact"><thead><tr><th scope="col">Level</th><th scope="col">p50</th><th scope="col">p90</th><th scope="col">n</th><th scope="col">p90 trend</th></tr></thead><tbody>${waitRows}</tbody></table></div>
      <div class="metric"><h3>Time to first token</h3><p class="big">${fmtSec(m.ttft_s.p50, 2)} <small>p50</small> · ${fmtSec(m.ttft_s.p90, 2)} <small>p90</small></p>${sparkline(series((p) => p.ttft_s.p90), "TTFT p90")}</div>
      <div class="metric"><h3>Preemptions / min</h3><p class="big">${fmtNum(m.preemptions_per_min)}</p>${sparkline(series((p) => p.preemptions_per_min), "Preemptions per minute")}</div>
      <div class="metric"><h3>KV cache use</h3><p class="big">${fmtPct(m.kv_use)}</p>${sparkline(series((p) => p.kv_use), "KV use")}</div>
      <div class="metric"><h3>Tokens / s</h3><p class="big">${fmtNum(m.tokens_per_s)}</p>${sparkline(series((p) => p.tokens_per_s), "Tokens per second")}</div>
      <div class="metric wide"><h3>SLO attainment per tier <small class="muted">(TTFT and E2E within p90 targets)</small></h3>
        <table class="compact"><thead><tr><th scope="col">Tier</th><th scope="col">Met</th><th scope="col">n</th><th scope="col"><span class="sr-only">Bar</span></th></tr></thead><tbody>${slo}</tbody></table></div>
    </div>${engine}`;
}

// --- selection, the side panel and the guidance stream -----------------------------------------------

function visibleIds() {
  return [...document.querySelectorAll("#queue-body tr[data-id], #done-body tr[data-id]")].map((r) => Number(r.dataset.id));
}

function select(id) {
  if (id === state.selectedId) return;
  state.selectedId = id;
  for (const row of document.querySelectorAll("tr[data-id]")) {
    const on = Number(row.dataset.id) === id;
    row.classList.toggle("selected", on);
    if (on) row.setAttribute("aria-current", "true"); else row.removeAttribute("aria-current");
    if (on) { row.scrollIntoView({ block: "nearest" }); row.focus({ preventScroll: true }); }
  }
  loadPanel();
  openGuidance(id);
}

const PANEL_REFRESH_HEADER = "X-Panel-Refresh";
function loadPanel(refresh = false) {
  if (state.selectedId === null || !window.htmx) return;
  window.htmx.ajax("GET", `${root.dataset.panelUrl}${state.selectedId}/panel/`,
    { target: "#call-panel", swap: "innerHTML", headers: refresh ? { [PANEL_REFRESH_HEADER]: "1" } : {} });
}

// A refresh already on its way when the dispatcher opened a dialog must not land on it: swapping the panel would
// close the dialog under their hands (and wipe a half-typed reason). Their own choices (another call) still swap.
document.body.addEventListener("htmx:beforeSwap", (e) => {
  const headers = (e.detail.requestConfig && e.detail.requestConfig.headers) || {};
  if (headers[PANEL_REFRESH_HEADER] && e.detail.target && e.detail.target.id === "call-panel"
      && document.querySelector("#call-panel dialog[open]")) e.detail.shouldSwap = false;
});

let panelTimer = null;
function refreshPanelSoon() {
  clearTimeout(panelTimer);
  panelTimer = setTimeout(() => {
    if (!document.querySelector("#call-panel dialog[open]")) loadPanel(true); // never wipe a half-typed reason
  }, 300);
}

function panelFieldsChanged(a, b) {
  return a.status !== b.status || a.level !== b.level || a.uncertain !== b.uncertain || a.held !== b.held || a.off_protocol !== b.off_protocol || a.guidance_brief !== b.guidance_brief || JSON.stringify(a.protocol) !== JSON.stringify(b.protocol) || a.acknowledged !== b.acknowledged || a.live !== b.live;
}

const OFF_PROTOCOL_STATE = "off-protocol: the model left the protocol, its own text is shown";
let guidance = null;
function openGuidance(id) {
  if (guidance) { guidance.closedByUs = true; guidance.ws.close(); }
  const text = $("guidance-text");
  text.textContent = "";
  setGuidanceState("connecting…");
  const g = { ws: new WebSocket(wsUrl(`${root.dataset.callWsPath}${id}/`)), lastIndex: -1, done: false, closedByUs: false, offProtocol: false };
  guidance = g;
  g.ws.addEventListener("message", (e) => {
    const msg = JSON.parse(e.data);
    if (msg.type === "replay") {
      text.textContent = msg.text;
      g.lastIndex = msg.index;
      g.done = msg.done;
      g.offProtocol = Boolean(msg.off_protocol);
      setGuidanceState(g.offProtocol ? OFF_PROTOCOL_STATE : msg.done ? "complete" : msg.text ? "streaming…" : "waiting for the model…");
    } else if (msg.type === "token" && msg.index > g.lastIndex) {
      g.lastIndex = msg.index;
      if (!g.offProtocol) {
        text.append(msg.text);
        setGuidanceState("streaming…");
      }
    } else if (msg.type === "guidance") {
      // The stream guard found a sentence that is not in the protocol: the protocol's own text is shown.
      g.offProtocol = true;
      text.textContent = msg.text;
      setGuidanceState(OFF_PROTOCOL_STATE);
    } else if (msg.type === "restart") {
      g.lastIndex = -1;
      g.offProtocol = false;
      g.done = false;
      text.textContent = "";
      setGuidanceState("regenerating under the new protocol…");
    } else if (msg.type === "done") {
      g.done = true;
      if (!g.offProtocol) setGuidanceState(msg.status === STATUS.DONE ? "complete" : msg.status);
    }
    text.classList.toggle("off-protocol", Boolean(g.offProtocol));
    root.dataset.guidanceIndex = String(g.lastIndex);
  });
  g.ws.addEventListener("close", () => {
    if (!g.closedByUs && !g.done && guidance === g) setTimeout(() => { if (guidance === g) openGuidance(id); }, 1000);
  });
}

function setGuidanceState(s) { $("guidance-state").textContent = s ? `(${s})` : ""; }

// --- alerts: sound by priority until acknowledged, escalation, the connection alarm -------------------------
//
// The centre's policy is data on the tiers (admin): an unacknowledged call sounds every ``alert_repeat_s`` of its
// tier (0: silent) until someone acknowledges it, and escalates to the supervisors when nobody has within
// ``acknowledge_within_s`` of its triage (0: never). Every board computes both from the same server data, so
// every dispatcher and supervisor sees the same escalations. Sound is on unless this browser switched it off;
// a browser that blocks audio until the first click is named on the board until then. When the live
// connection drops, a distinct alarm sounds until the board is live again: a silent board is the worst failure.

const SOUND_KEY = "triage.sound";
const CONNECTION_ALARM_MS = 4000;
const TONES = {  // kind: [frequencies, seconds each]
  esi1: [[988, 988, 988], 0.16], esi2: [[880, 880], 0.18], call: [[660], 0.25],
  escalation: [[660, 990, 660, 990], 0.15], connection: [[440, 330, 440, 330], 0.25],
};
let audio = null;
const soundToggle = $("sound-toggle");
const soundOn = () => localStorage.getItem(SOUND_KEY) !== "0";
soundToggle.checked = soundOn();
soundToggle.addEventListener("change", () => {
  localStorage.setItem(SOUND_KEY, soundToggle.checked ? "1" : "0");
  if (soundToggle.checked) play("call");
  showSoundState();
});
state.sounds = [];  // what sounded: {kind, id, at}; the browser tests read it
state.lastAlert = new Map();  // call id -> when it last sounded

function ensureAudio() {
  if (!audio) audio = new (window.AudioContext || window.webkitAudioContext)();
  if (audio.state === "suspended") audio.resume().then(showSoundState, () => {});
  return audio;
}

// The first click or key on the page lets a browser that blocks autoplay play our sounds.
for (const type of ["pointerdown", "keydown"]) document.addEventListener(type, () => { if (soundOn()) ensureAudio(); }, { capture: true });

function showSoundState() {
  const blocked = soundOn() && (!audio || audio.state !== "running");
  $("sound-blocked").hidden = !blocked;
  state.audioState = audio ? audio.state : "none";
}

function play(kind, id = null) {
  if (!soundOn()) return;
  state.sounds.push({ kind, id, at: Date.now() });
  if (state.sounds.length > 500) state.sounds.shift();
  const ctx = ensureAudio();
  showSoundState();
  const [frequencies, each] = TONES[kind];
  frequencies.forEach((frequency, i) => {
    const start = ctx.currentTime + i * each * 1.2;
    const osc = ctx.createOscillator();
    const gain = ctx.createGain();
    osc.type = "square";
    osc.frequency.value = frequency;
    gain.gain.setValueAtTime(0.0001, start);
    gain.gain.exponentialRampToValueAtTime(0.2, start + 0.02);
    gain.gain.exponentialRampToValueAtTime(0.0001, start + each);
    osc.connect(gain).connect(ctx.destination);
    osc.start(start);
    osc.stop(start + each + 0.05);
  });
}

function toneOf(call) { return call.level === 1 ? "esi1" : call.level === 2 ? "esi2" : "call"; }

// Every tick: which unacknowledged calls are due to sound again, and which are overdue for acknowledgement.
function alertTick() {
  if (root.dataset.live !== "1") return;  // the connection alarm speaks for a board that is not live
  const now = nowMs();
  const escalated = new Set();
  for (const call of state.calls.values()) {
    if (call.acknowledged || call.level === null || call.status === STATUS.CANCELLED) continue;
    const tier = state.tiers.get(call.tier_id);
    if (!tier) continue;
    const since = Date.parse(call.triaged_at || call.created_at);
    // the server records it at its sweep; between sweeps the board sees it at once from the same rule
    if (call.escalated || (tier.acknowledge_within_s > 0 && now - since > tier.acknowledge_within_s * 1000)) escalated.add(call.id);
    if (tier.alert_repeat_s > 0 && now - (state.lastAlert.get(call.id) ?? -Infinity) >= tier.alert_repeat_s * 1000) {
      state.lastAlert.set(call.id, now);
      play(toneOf(call), call.id);
    }
  }
  const fresh = [...escalated].filter((id) => !state.escalated.has(id));
  const changed = fresh.length || [...state.escalated].some((id) => !escalated.has(id));
  state.escalated = escalated;
  if (fresh.length && root.dataset.supervisor === "1") play("escalation", fresh[0]);
  if (changed) scheduleRender();
}

function renderEscalations() {
  const box = $("escalations");
  const calls = [...state.escalated].map((id) => state.calls.get(id)).filter(Boolean);
  box.hidden = !calls.length;
  if (!calls.length) { box.innerHTML = ""; return; }
  const who = root.dataset.supervisor === "1" ? "Supervisor: " : "";
  const html = `<strong>${who}${calls.length} call${calls.length > 1 ? "s" : ""} not acknowledged in time</strong> ` +
    calls.map((c) => `<button type="button" data-select="${c.id}">ESI ${c.level} #${c.id}</button>`).join(" ");
  if (box.dataset.html !== html) { box.innerHTML = html; box.dataset.html = html; }
}

function announceUrgent(call) {
  const banner = $("priority-banner");
  banner.innerHTML = `<strong>New ESI ${call.level} call #${call.id}</strong> ${esc(call.summary)}
    <button type="button" data-select="${call.id}">Show</button> <button type="button" data-dismiss-banner>Dismiss</button>`;
  banner.className = `banner banner-esi-${call.level}`;
  banner.hidden = false;
}

let connectionAlarm = null;
function connectionAlarmStart() {
  if (connectionAlarm || state.snapshots === 0) return;  // not before the board was live once
  play("connection");
  connectionAlarm = setInterval(() => play("connection"), CONNECTION_ALARM_MS);
}
function connectionAlarmStop() { clearInterval(connectionAlarm); connectionAlarm = null; }

// --- overlay and connection indicator ----------------------------------------------------------------

function showOverlay(title, detail) {
  $("overlay-title").textContent = title;
  $("overlay-detail").textContent = detail;
  $("overlay").hidden = false;
  root.dataset.live = "0";
}
function hideOverlay() { $("overlay").hidden = true; }
function setConn(kind, text) {
  const el = $("conn-status");
  el.className = `conn conn-${kind}`;
  el.textContent = text;
}

// --- input: clicks, dialogs, keyboard shortcuts ----------------------------------------------------------

document.addEventListener("click", (e) => {
  const sel = e.target.closest("[data-select]");
  if (sel) { e.preventDefault(); select(Number(sel.dataset.select)); return; }
  const row = e.target.closest("tr[data-id]");
  if (row) { select(Number(row.dataset.id)); return; }
  const opener = e.target.closest("[data-open-dialog]");
  if (opener) { openDialog(opener.dataset.openDialog); return; }
  if (e.target.closest("[data-close-dialog]")) { e.target.closest("dialog").close(); return; }
  if (e.target.closest("[data-dismiss-banner]")) $("priority-banner").hidden = true;
});

function openDialog(id) {
  const dialog = document.getElementById(id);
  if (!dialog) return;
  dialog.showModal();
  const field = dialog.querySelector("textarea, input:not([type=hidden]), select");
  if (field) field.focus();
}

document.body.addEventListener("htmx:afterRequest", (e) => {
  const dialog = e.target.closest && e.target.closest("dialog");
  if (dialog && e.detail.successful) { dialog.close(); e.target.reset(); }
});

$("help-button").addEventListener("click", () => $("help-dialog").showModal());

function move(delta) {
  const ids = visibleIds();
  if (!ids.length) return;
  const at = ids.indexOf(state.selectedId);
  const next = at === -1 ? (delta > 0 ? 0 : ids.length - 1) : Math.min(ids.length - 1, Math.max(0, at + delta));
  select(ids[next]);
}

function panelAction(kind) {
  const panel = $("call-panel");
  if (kind === "override" || kind === "close" || kind === "protocol") {
    const opener = panel.querySelector(`[data-open-dialog^="${kind}-dialog"]`);
    if (opener) openDialog(opener.dataset.openDialog);
    return;
  }
  const form = panel.querySelector(`form[data-action="${kind}"]`);
  if (form) submitPanelForm(form);
}

// A key pressed just as the panel is swapped in finds a form htmx has not processed yet: submitted as it stands,
// the browser would post it natively and leave the board. Processing it first (idempotent) keeps it on htmx.
function submitPanelForm(form) {
  if (window.htmx) window.htmx.process(form);
  form.requestSubmit();
}

// Single-key shortcuts can be switched off (WCAG 2.1.4: they clash with speech input and some screen readers);
// the choice is remembered on this browser. Every action stays a button.
// Times in this computer's zone instead of the centre's (a dispatcher working remotely, a supervisor in another
// centre): a cookie the server reads when it renders the panel (config/middleware.py).
const TIME_ZONE_COOKIE = "triage_tz";
const localZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
const localTimeBox = $("local-time");
$("local-zone").textContent = localZone;
// An IANA name ("America/Chicago") is a valid cookie value as it stands.
localTimeBox.checked = document.cookie.split("; ").includes(`${TIME_ZONE_COOKIE}=${localZone}`);
localTimeBox.addEventListener("change", () => {
  document.cookie = localTimeBox.checked
    ? `${TIME_ZONE_COOKIE}=${localZone}; path=/; max-age=31536000; SameSite=Lax`
    : `${TIME_ZONE_COOKIE}=; path=/; max-age=0; SameSite=Lax`;
  loadPanel();
});

const SHORTCUTS_KEY = "triage-shortcuts";
const shortcutsOn = () => localStorage.getItem(SHORTCUTS_KEY) !== "off";
const shortcutsBox = $("shortcuts-enabled");
shortcutsBox.checked = shortcutsOn();
shortcutsBox.addEventListener("change", () => localStorage.setItem(SHORTCUTS_KEY, shortcutsBox.checked ? "on" : "off"));

// --- the command line: what CAD dispatchers type ----------------------------------------------------------
//
// "/" (or a click) focuses it; Enter runs one command on the selected call, through the same forms the buttons
// submit (so the server's rules, audit and answers are the same): "#123" or "123" selects a call, "O 2 reason"
// overrides the level, "A" acknowledges, "V" confirms a held verdict, "C outcome" closes (without an outcome:
// the close dialog), "P protocol" switches the protocol, "R" retries, "X" cancels, "M" claims.
const commandInput = $("command");
const commandResult = $("command-result");

function setForm(form, values) {
  for (const [name, value] of Object.entries(values)) form.elements[name].value = value;
  submitPanelForm(form);
}

function panelForm(kind) {
  const panel = $("call-panel").querySelector(".call-panel");
  if (!panel || Number(panel.dataset.callId) !== state.selectedId) return null;
  return panel.querySelector(`form[data-action="${kind}"]`);
}

function runCommand(text) {
  const [verb = "", ...rest] = text.trim().split(/\s+/);
  const arg = rest.join(" ");
  const id = verb.replace(/^#/, "");
  if (/^\d+$/.test(id)) {
    if (!state.calls.has(Number(id))) return `No live call #${id} on the board`;
    select(Number(id));
    return `Call #${id} selected`;
  }
  if (state.selectedId === null) return "Select a call first (j/k, a click, or #id)";
  const kind = { O: "override", A: "acknowledge", V: "confirm", C: "close", P: "protocol", R: "retry", X: "cancel", M: "claim",
    L: "link-confirm", S: "link-split" }[verb.toUpperCase()];
  if (!kind) return `Unknown command "${verb}": O level reason · A · V · C outcome · P protocol · R · X · M · L · S · #id`;
  const form = panelForm(kind);
  if (!form) return `"${verb}" does not apply to call #${state.selectedId} now (or its panel is still loading)`;
  if (kind === "override") {
    const [level, ...why] = rest;
    if (!/^[1-5]$/.test(level || "") || !why.length) return "Override needs a level and a reason: O 2 caller now unconscious";
    setForm(form, { level, reason: why.join(" ") });
  } else if (kind === "close" && !arg) {
    panelAction("close");
  } else if (kind === "close") {
    setForm(form, { outcome: arg });
  } else if (kind === "protocol") {
    const options = [...form.elements.protocol.options];
    const wanted = arg.toLowerCase();
    const match = options.find((o) => o.value === wanted) || options.find((o) => o.textContent.toLowerCase().startsWith(wanted));
    if (!arg || !match) return `No protocol "${arg}"`;
    setForm(form, { protocol: match.value });
  } else {
    submitPanelForm(form);
  }
  return `${verb.toUpperCase()} sent for call #${state.selectedId}`;
}

$("command-form").addEventListener("submit", (e) => {
  e.preventDefault();
  commandResult.textContent = runCommand(commandInput.value);
  commandInput.value = "";
});
commandInput.addEventListener("keydown", (e) => { if (e.key === "Escape") commandInput.blur(); });

document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey || !shortcutsOn()) return;
  const t = e.target;
  if (t.closest && (t.closest("input, textarea, select, [contenteditable]") || t.closest("dialog[open]"))) return;
  const actions = {
    j: () => move(1), k: () => move(-1), "?": () => $("help-dialog").showModal(),
    o: () => panelAction("override"), a: () => panelAction("acknowledge"), v: () => panelAction("confirm"),
    c: () => panelAction("close"), x: () => panelAction("cancel"), p: () => panelAction("protocol"), r: () => panelAction("retry"),
    m: () => panelAction("claim"), "/": () => commandInput.focus(),
  };
  const act = actions[e.key];
  if (act) { e.preventDefault(); act(); }
});

connect();
