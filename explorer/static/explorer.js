/* The tuning explorer page. Every number shown comes from the server (the engine's own
   functions); this script only holds the parameter set being edited, sends it, and draws. */
"use strict";

const TOKEN = document.querySelector('meta[name="explorer-token"]').content;
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
const CLASS_NAMES = ["workload 0: total", "1: sex × 4 ages", "2: sex × 9 ages", "3: sex × 23 ages"];
const CLASS_COLORS = ["#7f8c9d", "#1f77b4", "#2ca02c", "#d62728"];

const S = {
  safetab: null, phsafe: null,            // the parameter sets being edited
  preset: { safetab: null, phsafe: null }, // what the page opened on (Compare's default A)
  loaded: { safetab: null, phsafe: null }, // a set loaded "as baseline"
  stp: null, ph: null,                     // the last evaluations
  good: { safetab: null, phsafe: null },   // the last parameter sets that evaluated
  presetId: null, populations: [],
  job: null, sim: null,
};

// ------------------------------------------------------------------ helpers
const $ = (id) => document.getElementById(id);
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
function fmt(x, digits = 4) {
  if (x === null || x === undefined) return "—";
  if (x === "Infinity") return "∞";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return x.toLocaleString("en-US");
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(3);
  return x.toLocaleString("en-US", { maximumSignificantDigits: digits + 2 });
}
const full = (x) => (x === null || x === undefined ? "∞" : String(x)); // totals: every digit
function showError(message) { const box = $("error"); box.textContent = message; box.hidden = !message; }

// A parameter the server cannot evaluate: its message next to the field that was edited
// (the banner when no field was), the field marked; cleared by the next good evaluation.
let errorField = null;
function reportError(message, field) {
  clearFieldError();
  if (!field || !field.isConnected) { showError(message); return; }
  showError("");
  errorField = field;
  field.classList.add("invalid");
  field.setAttribute("aria-invalid", "true");
  const bubble = $("field-error");
  bubble.textContent = message;
  bubble.hidden = false;
  const box = field.getBoundingClientRect();
  bubble.style.left = `${Math.max(8, Math.min(box.left + window.scrollX, document.documentElement.clientWidth - 460))}px`;
  bubble.style.top = `${box.bottom + window.scrollY + 4}px`;
  document.body.dataset.fieldError = String(Date.now());
}
function clearFieldError() {
  if (errorField) { errorField.classList.remove("invalid"); errorField.removeAttribute("aria-invalid"); }
  errorField = null;
  $("field-error").hidden = true;
}

async function api(path, body, raw = false) {
  const init = { headers: { "X-Explorer-Token": TOKEN } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { message = (await response.json()).error || message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  if (raw) return response;
  const type = response.headers.get("content-type") || "";
  return type.includes("application/json") && !response.headers.get("content-disposition")
    ? response.json() : response.text();
}
const settings = () => ({ delta: Number($("delta").value), decimals: Number($("decimals").value) });
const clone = (x) => JSON.parse(JSON.stringify(x));

function keepFocus(render) {
  const active = document.activeElement;
  const sel = active && active.dataset && active.dataset.role
    ? `[data-role="${active.dataset.role}"][data-key="${CSS.escape(active.dataset.key || "")}"]` : null;
  render();
  if (sel) { const again = document.querySelector(sel); if (again) again.focus(); }
}

// ------------------------------------------------------------------ SafeTab-P
let stpPending = null;
// Evaluate the edited SafeTab-P set; on a refusal the set goes back to the last one that
// evaluated (the field keeps what was typed, with the message beside it). Returns success.
async function evaluateSafeTab(targets, field) {
  const request = { state: S.safetab, targets: targets || null, ...settings() };
  stpPending = request;
  try {
    const result = await api("/api/safetab-p/evaluate", request);
    if (stpPending !== request) return true;
    S.safetab = result.state; S.stp = result; S.good.safetab = clone(result.state);
    showError(""); clearFieldError();
    keepFocus(renderSafeTab);
    saveEdits();
    document.body.dataset.stpReady = String(Date.now());
    return true;
  } catch (error) {
    if (stpPending !== request) return false;
    if (S.good.safetab) S.safetab = clone(S.good.safetab);
    reportError(error.message, field);
    return false;
  }
}

function stpTotalsCard(name, summary, unit) {
  const big = summary[unit];
  const lines = unit === "rho"
    ? [`bounded (change one record) ρ = ${full(summary.bounded_rho)}`,
       `(ε, δ=${$("delta").value}): analytic ${fmt(summary.epsilon_analytic)}, optimal ${fmt(summary.epsilon_optimal)}`]
    : [`bounded ε = ${full(summary.bounded_epsilon)}`,
       `(ε, δ=${$("delta").value}) by exact Rényi: ${fmt(summary.epsilon_rdp)}`];
  return el("div", { class: "total-card" },
    el("h3", { text: `SafeTab-P ${name} total ${unit === "rho" ? "ρ" : "ε"}` }),
    el("div", { class: "big", id: `stp-total-${name}`, text: full(big) }),
    el("div", { class: "small", text: `exact ${summary[unit + "_exact"]}` }),
    ...lines.map((line) => el("div", { class: "small", text: line })));
}

function renderSafeTab() {
  const r = S.stp; const cfg = S.safetab.config; const unit = r.unit;
  $("source").textContent = S.safetab.source;
  $("stp-totals").replaceChildren(...Object.entries(r.report.passes).map(([n, s]) => stpTotalsCard(n, s, unit)));
  $("stp-defn").value = r.privacy_defn;
  $("stp-fraction").value = cfg.privacy_budget_p_stage_1_fraction;
  $("stp-suppression").value = cfg.zero_suppression_chance;
  $("stp-stability").textContent = r.stability;
  $("stp-sensitivity").textContent = `${fmt(r.sensitivity)} (${unit === "rho" ? "L2" : "L1"})`;
  const param = unit === "rho" ? "σ²" : "scale";
  const head = el("tr", {}, el("th", { class: "key", text: "level (geography, iteration)" }),
    el("th", { text: unit === "rho" ? "ρ" : "ε" }), el("th", { text: "95% MOE" }), el("th", { text: "exact MOE" }),
    el("th", { text: `${param} stage 1` }), el("th", { text: `${param} stage 2` }), el("th", { text: `${param} total-only` }),
    el("th", { text: "thresholds t0 / t1 / t2" }), el("th", { text: "suppression T" }),
    el("th", { text: "T1 MOE w0" }), el("th", { text: "w1" }), el("th", { text: "w2" }), el("th", { text: "w3" }));
  const rows = [head];
  let lastPass = null;
  for (const row of r.levels) {
    const thresholds = row.thresholds || ["", "", ""];
    const tr = el("tr", { class: [row.tabulated ? "" : "off", lastPass && lastPass !== row.pass ? "pass-start" : ""].join(" "), "data-key": row.key },
      el("td", { class: "key", text: row.key }),
      el("td", {}, el("input", { "data-role": "budget", "data-key": row.key, value: row.budget, onchange: onBudget })),
      el("td", {}, el("input", { "data-role": "moe", "data-key": row.key, value: row.tabulated ? Number(row.moe).toFixed(3) : "", onchange: onMoe })),
      el("td", { text: row.tabulated ? fmt(row.moe_exact) : "" }),
      el("td", { text: row.stage_1 ? fmt(row.stage_1.value) : "" }),
      el("td", { text: row.stage_2 ? fmt(row.stage_2.value) : "" }),
      el("td", { text: row.total_only ? fmt(row.total_only.value) : "" }),
      el("td", {}, ...[0, 1, 2].map((i) => el("input", { class: "thr", "data-role": `thr${i}`, "data-key": row.key, value: thresholds[i], onchange: onThreshold }))),
      el("td", { text: row.suppression_threshold ?? (row.tabulated ? "none (state+)" : "") }),
      ...[0, 1, 2, 3].map((w) => el("td", { text: row.workload_total_moe ? fmt(row.workload_total_moe[w], 2) : "" })));
    rows.push(tr); lastPass = row.pass;
  }
  $("stp-levels").replaceChildren(...rows);
  fillSelect($("stp-workload-level"), Object.keys(r.curves.workload), "(COUNTY, 2)");
  fillSelect($("stp-suppression-level"), Object.keys(r.curves.suppression), "(COUNTY, 2)");
  plotWorkload(); plotSuppression(); plotMoe(); plotEpsDelta($("plot-epsdelta"), r.curves.epsilon_delta, "SafeTab-P");
  $("export-command").textContent = `das budget report --config safetab-p-config.json --specs ${S.safetab.specs || "PARAMS"}`;
  if (document.querySelector("#panel-compare.active")) runCompare();
}

function fillSelect(select, values, preferred) {
  const current = select.value;
  select.replaceChildren(...values.map((v) => el("option", { value: v, text: v })));
  if (values.includes(current)) select.value = current;
  else if (values.includes(preferred)) select.value = preferred;
}

function onBudget(event) {
  const key = event.target.dataset.key;
  const row = S.stp.levels.find((x) => x.key === key);
  const text = event.target.value.trim();
  S.safetab.config[row.budget_key] = budgetValue(text);
  if (Number(text) > 0 && !row.thresholds) S.safetab.config.thresholds_p[key] = defaultThresholds(row);
  evaluateSafeTab(null, event.target);
}
// What the operator typed, as the config holds it: ∞ as "Infinity", a number, else the text
// itself (the server names what it cannot read, e.g. "abc" or an empty field).
function budgetValue(text) {
  if (/^inf/i.test(text)) return "Infinity";
  return text !== "" && Number.isFinite(Number(text)) ? Number(text) : text;
}
function onMoe(event) { evaluateSafeTab({ [event.target.dataset.key]: budgetValue(event.target.value.trim()) }, event.target); }
function onThreshold(event) {
  const key = event.target.dataset.key;
  const inputs = [0, 1, 2].map((i) => document.querySelector(`[data-role="thr${i}"][data-key="${CSS.escape(key)}"]`));
  S.safetab.config.thresholds_p[key] = inputs.map((x) => Math.round(Number(x.value)));
  evaluateSafeTab(null, event.target);
}
function defaultThresholds(row) {
  if (row.iteration_level === 1) return [4971, 19971, 149971];
  return row.state_or_above ? [471, 971, 6971] : [971, 4971, 19971];
}

function thresholdLines(values, color = "#999") {
  return values.map((x) => ({ type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { dash: "dot", color, width: 1 } }));
}
function layout(extra) {
  return Object.assign({ margin: { l: 56, r: 12, t: 10, b: 44 }, legend: { orientation: "h", y: -0.2 },
    font: { family: "system-ui, sans-serif", size: 11 } }, extra);
}
function plotWorkload() {
  const key = $("stp-workload-level").value; const curve = S.stp.curves.workload[key]; if (!curve) return;
  const row = S.stp.levels.find((x) => x.key === key);
  const traces = curve.p.map((p, k) => ({ x: curve.n, y: p, name: CLASS_NAMES[k], mode: "lines", line: { color: CLASS_COLORS[k] } }));
  Plotly.react("plot-workload", traces, layout({ xaxis: { type: "log", title: { text: "true size n of the group" } },
    yaxis: { title: { text: "probability" }, range: [0, 1.02] }, shapes: thresholdLines(row.thresholds) }), PLOT_CONFIG);
}
function plotSuppression() {
  const key = $("stp-suppression-level").value; const curve = S.stp.curves.suppression[key];
  if (!curve) { Plotly.purge("plot-suppression"); return; }
  Plotly.react("plot-suppression", [
    { x: curve.n, y: curve.p_given_total_only, name: "given a total only (workload 0)", mode: "lines", line: { color: "#d62728" } },
    { x: curve.n, y: curve.p, name: "any group of size n", mode: "lines", line: { color: "#1f77b4", dash: "dash" } },
  ], layout({ xaxis: { title: { text: `true size n (T = ${curve.threshold})` } }, yaxis: { title: { text: "P(suppressed)" }, range: [0, 1.02] },
    shapes: thresholdLines([curve.threshold], "#d62728") }), PLOT_CONFIG);
}
function plotMoe() {
  const m = S.stp.curves.moe_vs_budget; const unit = S.stp.unit === "rho" ? "ρ" : "ε";
  const points = m.points;
  Plotly.react("plot-moe", [
    { x: m.budget, y: m.moe, name: `MOE(${unit}), f = ${S.stp.stage_1_fraction}`, mode: "lines", line: { color: "#555" } },
    { x: points.map((p) => p.budget), y: points.map((p) => p.moe), text: points.map((p) => p.key), name: "levels",
      mode: "markers", marker: { size: 9, color: "#1f5fbf" }, hovertemplate: "%{text}<br>budget %{x}<br>MOE %{y:.2f}<extra></extra>" },
  ], layout({ xaxis: { type: "log", title: { text: `level budget ${unit}` } }, yaxis: { type: "log", title: { text: "95% MOE of a stage-2 cell" } } }), PLOT_CONFIG);
}
function plotEpsDelta(div, byPass, product) {
  const traces = [];
  const dash = { epsilon_analytic: "dash", epsilon_optimal: "solid", epsilon_rdp: "solid", epsilon_pure: "dot" };
  const label = { epsilon_analytic: "analytic", epsilon_optimal: "optimal", epsilon_rdp: "exact Rényi", epsilon_pure: "pure ε" };
  Object.entries(byPass).forEach(([name, curves], i) => {
    if (!curves) return;
    for (const k of Object.keys(label)) {
      if (!curves[k]) continue;
      traces.push({ x: curves.delta, y: curves[k], name: `${product} ${name} ${label[k]}`, mode: "lines",
        line: { dash: dash[k], color: ["#1f5fbf", "#d62728"][i % 2] } });
    }
  });
  Plotly.react(div, traces, layout({ xaxis: { type: "log", title: { text: "δ" }, autorange: "reversed", exponentformat: "power" }, yaxis: { title: { text: "ε" } },
    shapes: thresholdLines([Number($("delta").value)]) }), PLOT_CONFIG);
}

// ------------------------------------------------------------------ PHSafe
let phPending = null;
async function evaluatePHSafe(targets, field) {
  const request = { state: S.phsafe, targets: targets || null, ...settings() };
  phPending = request;
  try {
    const result = await api("/api/phsafe/evaluate", request);
    if (phPending !== request) return true;
    S.phsafe = result.state; S.ph = result; S.good.phsafe = clone(result.state);
    showError(""); clearFieldError();
    keepFocus(renderPHSafe);
    saveEdits();
    document.body.dataset.phReady = String(Date.now());
    return true;
  } catch (error) {
    if (phPending !== request) return false;
    if (S.good.phsafe) S.phsafe = clone(S.good.phsafe);
    reportError(error.message, field);
    return false;
  }
}

function renderPHSafe() {
  const r = S.ph;
  const cards = Object.entries(r.passes).filter(([, p]) => p.totals).map(([name, p]) => el("div", { class: "total-card" },
    el("h3", { text: `PHSafe ${name} total ${p.unit === "rho" ? "ρ" : "ε"}` }),
    el("div", { class: "big", id: `ph-total-${name}`, text: full(p.totals[p.unit]) }),
    el("div", { class: "small", text: `exact ${p.totals[p.unit + "_exact"]}` }),
    el("div", { class: "small", text: p.unit === "rho"
      ? `bounded ρ = ${full(p.totals.bounded_rho)}; (ε, δ): analytic ${fmt(p.totals.epsilon_analytic)}, optimal ${fmt(p.totals.epsilon_optimal)}`
      : `bounded ε = ${full(p.totals.bounded_epsilon)}; (ε, δ) exact Rényi ${fmt(p.totals.epsilon_rdp)}` })));
  $("ph-totals").replaceChildren(...cards);
  const blocks = [];
  for (const [name, p] of Object.entries(r.passes)) {
    const param = p.unit === "rho" ? "σ²" : "scale";
    const taus = Object.entries(S.phsafe.passes[name].tau).map(([table, tau]) => el("label", {}, `τ ${table} `,
      el("input", { type: "number", min: 1, value: tau, "data-role": "tau", "data-key": `${name}/${table}`, onchange: onTau, style: "width:56px" })));
    const head = el("tr", {}, el("th", { class: "key", text: "table" }), el("th", { class: "key", text: "level" }),
      el("th", { text: "τ" }), el("th", { text: "Δ" }), el("th", { text: p.unit === "rho" ? "ρ" : "ε" }),
      el("th", { text: "90% MOE" }), el("th", { text: "exact MOE" }), el("th", { text: param }));
    const rows = p.rows.map((row) => el("tr", { class: row.measured ? "" : "off" },
      el("td", { class: "key", text: row.table }), el("td", { class: "key", text: row.level }),
      el("td", { text: row.tau ?? "" }), el("td", { text: row.sensitivity ?? "" }),
      el("td", {}, el("input", { "data-role": "ph-budget", "data-key": `${name}/${row.key}`, value: row.budget, onchange: onPhBudget })),
      el("td", {}, el("input", { "data-role": "ph-moe", "data-key": `${name}/${row.key}`, value: row.measured ? Number(row.moe).toFixed(2) : "", onchange: onPhMoe })),
      el("td", { text: row.measured ? fmt(row.moe_exact) : "" }), el("td", { text: row.measured ? fmt(row.noise_value) : "" })));
    blocks.push(el("div", { class: "card" }, el("h3", { text: `${name} pass (${p.privacy_defn})` }),
      el("div", { class: "controls" }, ...taus), el("div", { class: "table-wrap" }, el("table", { class: "grid" }, head, ...rows))));
  }
  $("ph-passes").replaceChildren(...blocks);
  fillSelect($("ph-moe-pass"), Object.keys(r.passes), "US");
  plotPhMoe();
  plotEpsDelta($("plot-ph-epsdelta"), Object.fromEntries(Object.entries(r.passes).map(([n, p]) => [n, p.epsilon_delta])), "PHSafe");
  if (document.querySelector("#panel-compare.active")) runCompare();
}
function plotPhMoe() {
  const p = S.ph.passes[$("ph-moe-pass").value]; if (!p) return;
  const traces = Object.values(p.moe_vs_budget.curves).map((c) => ({ x: c.budget, y: c.moe, mode: "lines",
    name: `Δ = ${c.sensitivity} (${c.tables.join(", ")})` }));
  const pts = p.moe_vs_budget.points;
  traces.push({ x: pts.map((q) => q.budget), y: pts.map((q) => q.moe), text: pts.map((q) => q.key), mode: "markers", name: "queries",
    marker: { size: 8, color: "#222" }, hovertemplate: "%{text}<br>budget %{x}<br>MOE %{y:.1f}<extra></extra>" });
  Plotly.react("plot-ph-moe", traces, layout({ xaxis: { type: "log", title: { text: "query budget" } }, yaxis: { type: "log", title: { text: "90% MOE of a cell" } } }), PLOT_CONFIG);
}
function splitKey(key) { const i = key.indexOf("/"); return [key.slice(0, i), key.slice(i + 1)]; }
function onPhBudget(event) {
  const [pass, query] = splitKey(event.target.dataset.key); const [table, level] = splitKey(query);
  const text = event.target.value.trim();
  S.phsafe.passes[pass].privacy_budget[table][level] = budgetValue(text);
  evaluatePHSafe(null, event.target);
}
function onPhMoe(event) {
  const [pass, query] = splitKey(event.target.dataset.key);
  evaluatePHSafe({ [pass]: { [query]: budgetValue(event.target.value.trim()) } }, event.target);
}
function onTau(event) {
  const [pass, table] = splitKey(event.target.dataset.key);
  S.phsafe.passes[pass].tau[table] = Math.round(Number(event.target.value));
  evaluatePHSafe(null, event.target);
}

async function runTruncation() {
  const select = $("ph-trunc-population");
  const label = select.selectedOptions.length ? select.selectedOptions[0].text : "";
  try {
    $("ph-trunc-note").textContent = `Computing what τ truncates on the synthetic population ${label}…`;
    const r = await api("/api/phsafe/truncation", { state: S.phsafe, data_dir: select.value });
    $("ph-trunc-note").textContent = `Computed on the synthetic population ${label} (${r.data_dir}), ${r.pass} pass: share of each joined table's in-universe persons that τ drops (markers: the τ on the page).`;
    const traces = []; const marks = [];
    for (const [table, t] of Object.entries(r.tables)) {
      const share = t.persons_dropped.map((d) => (t.persons ? d / t.persons : 0));
      traces.push({ x: r.taus, y: share, name: table, mode: "lines+markers", marker: { size: 4 } });
      if (t.tau) marks.push({ x: [t.tau], y: [share[r.taus.indexOf(t.tau)] ?? 0], name: `${table} τ = ${t.tau}`, mode: "markers", marker: { size: 12, symbol: "diamond-open" }, showlegend: false });
    }
    Plotly.react("plot-ph-trunc", [...traces, ...marks], layout({ xaxis: { title: { text: "τ" } }, yaxis: { title: { text: "share of persons dropped" }, tickformat: ".1%" } }), PLOT_CONFIG);
    document.body.dataset.truncReady = String(Date.now());
  } catch (error) { $("ph-trunc-note").textContent = ""; showError(error.message); }
}

// ------------------------------------------------------------------ Compare
async function runCompare() {
  const product = $("cmp-product").value; const key = product === "safetab-p" ? "safetab" : "phsafe";
  const a = $("cmp-baseline").value === "loaded" && S.loaded[key] ? S.loaded[key] : S.preset[key];
  const b = S[key];
  if (!a || !b) return;
  try {
    const r = await api("/api/compare", { product, a, b, delta: settings().delta });
    const cell = (pair, digits) => el("td", { class: pair.differs ? "diff" : "" }, fmtPair(pair.a, digits));
    const fmtPair = (v, digits) => (Array.isArray(v) ? v.join(" / ") : fmt(v, digits));
    $("cmp-settings").replaceChildren(...Object.entries(r.settings).map(([k, pair]) =>
      el("span", { class: pair.differs ? "diff" : "" }, `${k}: ${fmtPair(pair.a)} → ${fmtPair(pair.b)}   `)));
    $("cmp-totals").replaceChildren(...Object.entries(r.totals).map(([name, fields]) => el("div", { class: "card" },
      el("h3", { text: `${name} pass totals: A → B` }),
      ...Object.entries(fields).map(([k, pair]) => el("div", { class: pair.differs ? "diff" : "" }, `${k}: ${full(pair.a)} → ${full(pair.b)}`)))));
    const fields = product === "safetab-p" ? ["budget", "moe", "thresholds", "suppression_threshold"] : ["budget", "tau", "moe"];
    const head = el("tr", {}, el("th", { class: "key", text: "level" }), ...fields.flatMap((f) => [el("th", { text: `${f} A` }), el("th", { text: `${f} B` })]));
    const rows = r.rows.map((row) => el("tr", { class: fields.some((f) => row[f].differs) ? "changed" : "" },
      el("td", { class: "key", text: row.key }),
      ...fields.flatMap((f) => [cell(row[f], 3), el("td", { class: row[f].differs ? "diff" : "" }, fmtPair(row[f].b, 3))])));
    $("cmp-table").replaceChildren(head, ...rows);
    document.body.dataset.cmpReady = String(Date.now());
  } catch (error) { showError(error.message); }
}

// ------------------------------------------------------------------ Simulate
const PRODUCT_NAMES = { "safetab-p": "SafeTab-P", phsafe: "PHSafe" };
const persons = (n) => `${Number(n).toLocaleString("en-US")} persons`;
function populationLabel(p) { return `${p.product}, ${persons(p.persons)}, seed ${p.seed}`; }
// The workspace's populations (synthesized now or by an earlier session): listed when the page
// opens and whenever a picker is shown; folders that no longer verify are named with why.
function fillPopulations(select) {
  for (const sel of document.querySelectorAll(".population-select")) {
    const product = sel.dataset.product || $("sim-product").value;
    const options = S.populations.filter((p) => p.product === product).map((p) => el("option", { value: p.path, text: populationLabel(p) }));
    const current = sel.value;
    sel.replaceChildren(...options);
    if (select && options.some((o) => o.value === select)) sel.value = select;
    else if (options.some((o) => o.value === current)) sel.value = current;
    const note = $(sel.id === "sim-population" ? "sim-populations-note" : "ph-trunc-populations-note");
    note.textContent = options.length ? "" : `no ${PRODUCT_NAMES[product]} population in the workspace yet: synthesize one on the Simulate tab`;
  }
}
async function refreshPopulations(select) {
  try {
    const r = await api("/api/populations");
    S.populations = r.populations;
    fillPopulations(select);
    const refused = r.refused.map((x) => `${x.path.split("/").pop()} (${x.reason})`);
    if (refused.length) $("sim-populations-note").textContent += ` Not usable: ${refused.join("; ")}.`;
    document.body.dataset.populationsReady = String(Date.now());
  } catch (error) { showError(error.message); }
}
async function synthesize() {
  const product = $("sim-product").value; const n = Number($("synth-persons").value); const seed = Number($("synth-seed").value);
  try {
    $("sim-message").textContent = `Synthesizing a ${PRODUCT_NAMES[product]} population of ${persons(n)} (seed ${seed})…`;
    $("synth-run").disabled = true;
    const r = await api("/api/synth", { product, persons: n, seed, safetab_p: S.safetab, phsafe: S.phsafe });
    $("sim-message").textContent = `Synthesized a ${PRODUCT_NAMES[product]} population: ${persons(r.persons)}, seed ${r.seed}, in ${r.seconds} s (${r.path})`;
    await refreshPopulations(r.path);
  } catch (error) {
    $("sim-message").textContent = `Synthesis of a ${PRODUCT_NAMES[product]} population failed (see the message above)`;
    showError(error.message);
  } finally { $("synth-run").disabled = false; }
}
async function startSimulation() {
  const product = $("sim-product").value;
  const body = { product, data_dir: $("sim-population").value,
    replicates: Number($("sim-replicates").value), seed: Number($("sim-seed").value),
    state: product === "safetab-p" ? S.safetab : S.phsafe, pass: $("sim-pass").value, interval: $("sim-interval").value };
  try {
    S.job = await api("/api/simulate", body);
    S.sim = null; $("sim-results").replaceChildren(); showError("");
    $("sim-message").textContent = S.job.summary;
    $("sim-start").disabled = true; $("sim-cancel").disabled = false;
    pollJob();
  } catch (error) { showError(error.message); }
}
async function pollJob() {
  if (!S.job) return;
  const job = await api(`/api/jobs/${S.job.id}`);
  $("sim-bar").style.width = `${Math.round(job.progress * 100)}%`;
  $("sim-message").textContent = job.summary;
  if (job.status === "running") { setTimeout(pollJob, 400); return; }
  $("sim-start").disabled = false; $("sim-cancel").disabled = true; S.job = null;
  document.body.dataset.simStatus = job.status;
  if (job.status === "failed") showError(job.error);
  if (job.status === "done") { S.sim = job.result; renderSimulation(); }
}
async function cancelSimulation() { if (S.job) await api(`/api/jobs/${S.job.id}/cancel`, {}); }

function share(x) { return x === null || x === undefined ? "—" : `${(100 * x).toFixed(1)}%`; }
function renderSimulation() {
  const r = S.sim; const stp = r.product === "safetab-p";
  document.querySelectorAll(".stp-only").forEach((n) => { n.hidden = !stp; });
  document.querySelectorAll("#sim-plots .ph-only").forEach((n) => { n.hidden = stp; });
  const conf = stp ? "95%" : "90%";
  if (stp) {
    const head = el("tr", {}, el("th", { class: "key", text: "level" }), el("th", { text: "stage-2 answers" }),
      el("th", { text: `within predicted ${conf} MOE` }), el("th", { text: `empirical ${conf} error quantile` }), el("th", { text: "predicted MOE" }),
      ...[0, 1, 2, 3].map((w) => el("th", { text: `T1 w${w}: within MOE (n)` })));
    const rows = Object.entries(r.levels).map(([key, v]) => el("tr", {}, el("td", { class: "key", text: key }),
      el("td", { text: fmt(v.cells.count) }), el("td", { text: share(v.cells.within_moe) }), el("td", { text: fmt(v.cells.quantile) }),
      el("td", { text: fmt(v.cells.predicted_moe) }),
      ...[0, 1, 2, 3].map((w) => { const t = v.totals_by_workload[String(w)]; return el("td", { text: t && t.count ? `${share(t.within_moe)} (${t.count})` : "—" }); })));
    $("sim-results").replaceChildren(el("h4", { text: `SafeTab-P, ${r.replicates} replicate(s), seed ${r.seed}, stability ${r.stability}` }),
      el("div", { class: "table-wrap" }, el("table", { class: "grid" }, head, ...rows)));
    const keys = Object.keys(r.levels);
    plotSimMoe(keys.map((k) => ({ key: k, ...r.levels[k].cells })));
    fillSelect($("sim-workload-level"), keys.filter((k) => r.levels[k].workload), "(USA, 2)");
    fillSelect($("sim-suppression-level"), keys.filter((k) => r.levels[k].suppression), "(COUNTY, 2)");
    plotSimWorkload(); plotSimSuppression();
  } else {
    const acc = r.accuracy;
    const head = el("tr", {}, el("th", { class: "key", text: "query" }), el("th", { text: "cells" }), el("th", { text: "within predicted 90% MOE" }),
      el("th", { text: "empirical 90% error quantile" }), el("th", { text: "predicted MOE" }));
    const rows = r.queries.map((q) => el("tr", {}, el("td", { class: "key", text: q.key }), el("td", { text: fmt(q.count) }),
      el("td", { text: share(q.within_moe) }), el("td", { text: fmt(q.quantile) }), el("td", { text: fmt(q.predicted_moe) })));
    $("sim-results").replaceChildren(el("h4", { text: `PHSafe ${r.pass}, ${r.replicates} replicate(s), seed ${r.seed}, ${r.interval} intervals` }),
      el("p", { text: `cells within their 90% MOE: ${share(acc.moe_within_overall.fraction)} of ${fmt(acc.moe_within_overall.cells)}; ` +
        `count-table 90% interval coverage: ${share(acc.count_coverage_overall.fraction)}; average-table coverage: ${share(acc.ratio_coverage_overall.fraction)}` }),
      el("div", { class: "table-wrap" }, el("table", { class: "grid" }, head, ...rows)));
    plotSimMoe(r.queries);
    const counts = acc.count_coverage || {};
    const tables = Object.keys(counts);
    const ratios = acc.ratio_coverage || {};
    Plotly.react("plot-sim-coverage", [
      { type: "bar", x: tables, y: tables.map((t) => counts[t].all.fraction), name: "count tables" },
      { type: "bar", x: Object.keys(ratios), y: Object.values(ratios).map((x) => x.all.fraction), name: "averages" },
    ], layout({ yaxis: { title: { text: "coverage" }, range: [0, 1] }, shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: 0.9, y1: 0.9, line: { dash: "dot" } }] }), PLOT_CONFIG);
  }
  document.body.dataset.simReady = String(Date.now());
}
function plotSimMoe(items) {
  const ok = items.filter((i) => i.count);
  const top = Math.max(1, ...ok.map((i) => Math.max(i.predicted_moe, i.quantile)));
  Plotly.react("plot-sim-moe", [
    { x: [0.5, top * 1.2], y: [0.5, top * 1.2], mode: "lines", name: "empirical = predicted", line: { dash: "dot", color: "#999" } },
    { x: ok.map((i) => i.predicted_moe), y: ok.map((i) => i.quantile), text: ok.map((i) => `${i.key}: ${i.count} answers, ${share(i.within_moe)} within`),
      mode: "markers", name: "levels", marker: { size: 9 }, hovertemplate: "%{text}<extra></extra>" },
  ], layout({ xaxis: { type: "log", title: { text: "predicted MOE" } }, yaxis: { type: "log", title: { text: "empirical error quantile" } } }), PLOT_CONFIG);
}
function plotSimWorkload() {
  const v = S.sim && S.sim.levels[$("sim-workload-level").value]; if (!v || !v.workload) return;
  const w = v.workload; const traces = [];
  w.empirical.forEach((emp, k) => {
    traces.push({ x: w.n, y: w.predicted[k], mode: "lines", name: `${CLASS_NAMES[k]} predicted`, line: { color: CLASS_COLORS[k] } });
    traces.push({ x: w.n, y: emp, mode: "markers", name: "empirical", showlegend: k === 0, marker: { color: CLASS_COLORS[k], size: 7 },
      text: w.groups.map((g) => `${g} groups`), hovertemplate: "n≈%{x:.0f}: %{y:.3f} (%{text})<extra></extra>" });
  });
  Plotly.react("plot-sim-workload", traces, layout({ xaxis: { type: "log", title: { text: "true size n (bin mean)" } }, yaxis: { title: { text: "share of groups" }, range: [0, 1.02] } }), PLOT_CONFIG);
}
function plotSimSuppression() {
  const v = S.sim && S.sim.levels[$("sim-suppression-level").value];
  if (!v || !v.suppression) { Plotly.purge("plot-sim-suppression"); return; }
  const s = v.suppression;
  Plotly.react("plot-sim-suppression", [
    { x: s.n, y: s.predicted[0], mode: "lines", name: "predicted", line: { color: "#d62728" } },
    { x: s.n, y: s.empirical[0], mode: "markers", name: "empirical (workload-0 groups)", marker: { size: 7, color: "#222" },
      text: s.groups.map((g) => `${g} groups`), hovertemplate: "n≈%{x:.0f}: %{y:.3f} (%{text})<extra></extra>" },
  ], layout({ xaxis: { title: { text: `true size n (T = ${s.threshold})` } }, yaxis: { title: { text: "P(suppressed)" }, range: [0, 1.02] }, shapes: thresholdLines([s.threshold], "#d62728") }), PLOT_CONFIG);
}

// ------------------------------------------------------------------ load / export
// Edits kept in this browser (localStorage, per product and pass) so a reload does not lose
// them: saved after every good evaluation that differs from the preset, removed when equal.
const STORE = "das-explorer:v1:";
const storeKeys = () => ["safetab-p", ...["US", "PR"].map((p) => `phsafe:${p}`)].map((k) => STORE + k);
function readStored(key) {
  try { return JSON.parse(localStorage.getItem(STORE + key)); } catch (_) { return null; }
}
function writeStored(key, value, preset) {
  const same = preset !== undefined && JSON.stringify(value.state) === JSON.stringify(preset);
  try {
    if (same) localStorage.removeItem(STORE + key); else localStorage.setItem(STORE + key, JSON.stringify(value));
  } catch (_) { /* storage full or disabled: edits are simply not kept */ }
}
function saveEdits() {
  if (!S.preset.safetab) return;
  if (S.safetab) writeStored("safetab-p", { preset: S.presetId, state: S.safetab }, S.preset.safetab);
  if (S.phsafe) {
    for (const [name, config] of Object.entries(S.phsafe.passes)) {
      writeStored(`phsafe:${name}`, { preset: S.presetId, state: config, source: S.phsafe.source }, S.preset.phsafe.passes[name]);
    }
  }
  showEdited();
}
function showEdited() {
  const edited = storeKeys().filter((k) => localStorage.getItem(k) !== null).map((k) => k.slice(STORE.length));
  $("edited-badge").hidden = !edited.length;
  $("edited-badge").title = edited.length ? `edited: ${edited.join(", ")}; kept in this browser's local storage and restored when the page is reopened` : "";
  $("reset-edits").disabled = !edited.length;
}
function forgetEdits() { for (const key of storeKeys()) localStorage.removeItem(key); }

async function loadPreset(id, restore = false) {
  const p = await api(`/api/preset/${encodeURIComponent(id)}`);
  S.presetId = id;
  try { localStorage.setItem(STORE + "preset", id); } catch (_) { /* not kept */ }
  S.preset = { safetab: clone(p.safetab_p), phsafe: clone(p.phsafe) };
  S.good = { safetab: null, phsafe: null };
  S.safetab = p.safetab_p; S.phsafe = p.phsafe;
  const restored = [];
  if (restore) {
    const stp = readStored("safetab-p");
    if (stp && stp.state) { S.safetab = stp.state; restored.push("SafeTab-P"); }
    for (const name of ["US", "PR"]) {
      const ph = readStored(`phsafe:${name}`);
      if (ph && ph.state) { S.phsafe.passes[name] = ph.state; S.phsafe.source = ph.source || S.phsafe.source; restored.push(`PHSafe ${name}`); }
    }
  }
  const [stpOk, phOk] = await Promise.all([evaluateSafeTab(), evaluatePHSafe()]);
  if (restore && restored.length && (!stpOk || !phOk)) {
    // Kept edits the server now refuses (e.g. tighter engine bounds): that product's preset.
    const message = $("error").textContent;
    if (!stpOk) localStorage.removeItem(STORE + "safetab-p");
    if (!phOk) ["US", "PR"].forEach((name) => localStorage.removeItem(`${STORE}phsafe:${name}`));
    await loadPreset(id, true);
    showError(`Edits kept in this browser could not be evaluated and were discarded (the preset is shown instead):\n${message}`);
    return;
  }
  showEdited();
  document.body.dataset.restored = restored.join(", ");
}
async function resetToPreset() {
  forgetEdits();
  clearFieldError(); showError("");
  await loadPreset(S.presetId || $("preset").value);
}
async function loadPath() {
  try {
    const r = await api("/api/load", { path: $("load-path").value.trim() });
    const asBaseline = $("load-as-baseline").checked;
    if (r.safetab_p) { if (asBaseline) S.loaded.safetab = r.safetab_p; else { S.safetab = r.safetab_p; await evaluateSafeTab(); } }
    if (r.phsafe) {
      const merged = { ...(asBaseline ? S.loaded.phsafe || clone(S.phsafe) : S.phsafe) };
      merged.passes = { ...merged.passes, ...r.phsafe.passes }; merged.source = r.phsafe.source;
      if (asBaseline) S.loaded.phsafe = merged; else { S.phsafe = merged; await evaluatePHSafe(); }
    }
    if (asBaseline) $("cmp-baseline").value = "loaded";
    showError("");
  } catch (error) { showError(error.message); }
}
async function importFile(event) {
  const file = event.target.files[0]; if (!file) return;
  try {
    const r = await api("/api/import", { text: await file.text(), name: file.name, safetab_p: S.safetab });
    if (r.safetab_p) { S.safetab = r.safetab_p; await evaluateSafeTab(); }
    if (r.phsafe_pass) { S.phsafe.passes[r.phsafe_pass.pass] = r.phsafe_pass.config; S.phsafe.source = r.phsafe_pass.source; await evaluatePHSafe(); }
  } catch (error) { showError(error.message); }
  event.target.value = "";
}
// The server names the file (product and pass: safetab-p-config.json, phsafe-us-config.json…).
async function exportConfig(product, config) {
  try {
    const response = await api("/api/export", { product, config }, true);
    const name = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") || "")[1];
    const url = URL.createObjectURL(new Blob([await response.text()], { type: "application/json" }));
    const a = el("a", { href: url, download: name });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 5000);
    $("export-message").textContent = `Downloaded ${name}: rename it config.json to run it.`;
    showError("");
  } catch (error) { showError(error.message); }
}

// ------------------------------------------------------------------ wiring
function showPanel(name) {
  document.querySelectorAll("nav button").forEach((b) => b.classList.toggle("active", b.dataset.panel === name));
  document.querySelectorAll(".panel").forEach((p) => p.classList.toggle("active", p.id === `panel-${name}`));
  window.dispatchEvent(new Event("resize"));
  if (name === "compare") runCompare();
  if (name === "simulate" || name === "phsafe") refreshPopulations();
}
function wire() {
  document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => showPanel(b.dataset.panel)));
  $("delta").addEventListener("change", (e) => { evaluateSafeTab(null, e.target); evaluatePHSafe(null, e.target); });
  $("decimals").addEventListener("change", (e) => { evaluateSafeTab(null, e.target); });
  $("stp-defn").addEventListener("change", (e) => { S.safetab.config.privacy_defn = e.target.value; evaluateSafeTab(null, e.target); });
  $("stp-fraction").addEventListener("change", (e) => { S.safetab.config.privacy_budget_p_stage_1_fraction = budgetValue(e.target.value.trim()); evaluateSafeTab(null, e.target); });
  $("stp-suppression").addEventListener("change", (e) => { S.safetab.config.zero_suppression_chance = budgetValue(e.target.value.trim()); evaluateSafeTab(null, e.target); });
  $("reset-edits").addEventListener("click", resetToPreset);
  $("stp-workload-level").addEventListener("change", plotWorkload);
  $("stp-suppression-level").addEventListener("change", plotSuppression);
  $("ph-moe-pass").addEventListener("change", plotPhMoe);
  $("ph-trunc-run").addEventListener("click", runTruncation);
  $("cmp-product").addEventListener("change", runCompare);
  $("cmp-baseline").addEventListener("change", runCompare);
  $("sim-product").addEventListener("change", () => {
    const ph = $("sim-product").value === "phsafe";
    document.querySelectorAll(".controls .ph-only").forEach((n) => { n.hidden = !ph; });
    fillPopulations();
  });
  $("sim-product").dispatchEvent(new Event("change"));
  $("synth-run").addEventListener("click", synthesize);
  $("sim-start").addEventListener("click", startSimulation);
  $("sim-cancel").addEventListener("click", cancelSimulation);
  $("sim-workload-level").addEventListener("change", plotSimWorkload);
  $("sim-suppression-level").addEventListener("change", plotSimSuppression);
  $("preset-load").addEventListener("click", () => { forgetEdits(); loadPreset($("preset").value); });
  $("load-run").addEventListener("click", loadPath);
  $("import-file").addEventListener("change", importFile);
  $("export-safetab").addEventListener("click", () => exportConfig("safetab-p", S.safetab.config));
  for (const name of ["US", "PR"]) {
    $(`export-ph-${name}`).addEventListener("click", () => S.phsafe.passes[name]
      ? exportConfig("phsafe", S.phsafe.passes[name]) : showError(`no PHSafe ${name} pass loaded`));
  }
}

async function start() {
  wire();
  try {
    const presets = await api("/api/presets");
    $("preset").replaceChildren(...presets.presets.map((p) => el("option", { value: p.id, text: p.name })));
    const kept = localStorage.getItem(STORE + "preset");
    const id = presets.presets.some((p) => p.id === kept) ? kept : presets.default;
    $("preset").value = id;
    await Promise.all([loadPreset(id, true), refreshPopulations()]);
  } catch (error) { showError(error.message); }
}
start();
