/* gpuplan web page: a form over the JSON API, hand-written SVG charts, state in the URL.
   No external scripts, fonts or styles: the page works offline. */
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const SVG = "http://www.w3.org/2000/svg";

// fields kept in the URL: form element id -> URL key (same name)
const FIELDS = ["model", "gpu", "count", "tp", "pp", "zero", "shard_group", "itp",
  "method", "precision", "optimizer", "seq_len", "micro_batch", "global_batch", "recompute", "lora_rank", "tokens",
  "weights", "kv_cache", "engine", "prompt_len", "output_len", "concurrency", "load_rate",
  "objective", "preset", "top", "budget_usd", "deadline_days", "max_gpus", "ttft_s", "tpot_ms", "requests_per_s",
  "launch_engine"];
const RADIOS = ["mode", "task"];

const COMPONENTS = [
  ["weights", "Weights", "#2f5fd0"], ["gradients", "Gradients", "#6f8fe6"],
  ["optimizer_states", "Optimizer states", "#8a5cc9"], ["activations", "Activations", "#20a39e"],
  ["logits", "Logits / loss", "#6cc3a0"], ["kv_cache", "KV cache", "#e08a2c"],
  ["temporary", "Temporaries", "#d9b44a"], ["runtime_overhead", "Runtime overhead", "#9aa5b4"],
];

const app = { options: null, models: [], gpus: [], running: false };

// ---------------------------------------------------------------- formatting
const GiB = 2 ** 30;
function fmtBytes(b) {
  if (b == null) return "–";
  if (Math.abs(b) >= 1024 * GiB) return (b / 1024 / GiB).toFixed(2) + " TiB";
  if (Math.abs(b) >= GiB) return (b / GiB).toFixed(b >= 100 * GiB ? 0 : 1) + " GiB";
  return (b / 2 ** 20).toFixed(0) + " MiB";
}
function fmtCount(x, digits = 3) {
  if (x == null || !isFinite(x)) return "–";
  const a = Math.abs(x);
  if (a >= 1e12) return (x / 1e12).toPrecision(digits) + "T";
  if (a >= 1e9) return (x / 1e9).toPrecision(digits) + "B";
  if (a >= 1e6) return (x / 1e6).toPrecision(digits) + "M";
  if (a >= 1e4) return (x / 1e3).toPrecision(digits) + "k";
  return a >= 100 ? Math.round(x).toLocaleString("en-US") : (+x.toPrecision(digits)).toString();
}
function fmtSeconds(s) {
  if (s == null || !isFinite(s)) return "–";
  if (s === 0) return "0 s";
  if (s < 0) return "−" + fmtSeconds(-s);
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toPrecision(3) + " ms";
  if (s < 120) return s.toPrecision(3) + " s";
  if (s < 7200) return (s / 60).toPrecision(3) + " min";
  if (s < 3 * 86400) return (s / 3600).toPrecision(3) + " h";
  return (s / 86400).toPrecision(3) + " days";
}
function fmtUsd(x) {
  if (x == null || !isFinite(x)) return "–";
  if (Math.abs(x) >= 1e6) return "$" + (x / 1e6).toPrecision(3) + "M";
  if (Math.abs(x) >= 1000) return "$" + Math.round(x).toLocaleString("en-US");
  if (Math.abs(x) >= 1) return "$" + x.toFixed(2);
  return "$" + x.toPrecision(2);
}
const fmtTick = (f) => (v) => f(v).replace(/(\.\d*?)0+(?=\D|$)/, "$1").replace(/\.(?=\D|$)/, "");
const fmtPct = (x) => (x == null || !isFinite(x) ? "–" : (100 * x).toFixed(1) + " %");
const titleCase = (s) => String(s).replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());

// ---------------------------------------------------------------- DOM helpers
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) if (c != null) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v != null) node.setAttribute(k, v);
  for (const c of children.flat(Infinity)) if (c != null) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function panel(title, sub, ...children) {
  return el("div", { class: "panel" }, el("h2", {}, title, sub ? el("span", { class: "sub" }, sub) : null), ...children);
}
function kpi(label, value, note, id) {
  return el("div", { class: "kpi", "data-kpi": id || null },
    el("div", { class: "label" }, label), el("div", { class: "value" }, value), note ? el("div", { class: "note" }, note) : null);
}
function pm(u) {
  // error bar: the typical relative error of this kind of scenario on validation runs (estimate/uncertainty.py)
  return u && u.relative_typical != null ? ` ±${Math.round(100 * u.relative_typical)}%` : "";
}
function barNote(u) {
  if (!u) return null;
  if (u.relative_typical == null) return `${u.quantity}: no error bar (${u.category})`;
  return `${u.quantity} ±${Math.round(100 * u.relative_typical)}% typical, ±${Math.round(100 * u.relative_p90)}% P90 ` +
    `(${u.category}; ${u.runs} ${u.basis} runs, ${u.sources} sources)`;
}
function notesList(items, cls) {
  // "details: k=v; ..." is the speed model's machine-readable bookkeeping, not a note for people
  const list = (items || []).filter((t) => t && !String(t).startsWith("details:"));
  if (!list.length) return null;
  return el("ul", { class: "notes" }, list.map((t) => el("li", { class: cls || null }, t)));
}

// ---------------------------------------------------------------- API
async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  };
  let res;
  try {
    res = await fetch(path, opts);
  } catch (e) {
    throw { what: "server", why: "could not be reached (" + e.message + ").", fix: "is `gpuplan web` still running?" };
  }
  let data = null;
  try { data = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) {
    throw (data && data.error) || { what: path, why: "failed with HTTP " + res.status + ".", fix: "" };
  }
  return data;
}

// ---------------------------------------------------------------- form
function fillSelect(select, values, emptyLabel) {
  const keep = select.value;
  select.replaceChildren();
  if (emptyLabel !== null) select.append(el("option", { value: "" }, emptyLabel || "default"));
  for (const v of values) {
    if (typeof v === "object") select.append(el("option", { value: v.value, title: v.title || null }, v.label));
    else select.append(el("option", { value: v }, v));
  }
  if (keep && $$("option", select).some((o) => o.value === keep)) select.value = keep;
}

function radio(name) { const r = $(`input[name="${name}"]:checked`); return r ? r.value : null; }
function setRadio(name, value) {
  const r = $(`input[name="${name}"][value="${CSS.escape(value)}"]`);
  if (r) r.checked = true;
}

function updateVisibility() {
  const task = radio("task"), mode = radio("mode");
  for (const node of $$("[data-task]")) node.hidden = !node.dataset.task.split(" ").includes(task);
  for (const node of $$("[data-mode]")) node.hidden = node.dataset.mode !== mode;
  const gpuEmpty = $("#gpu option[value='']");
  if (gpuEmpty) gpuEmpty.textContent = mode === "recommend" ? "any GPU (let the search choose)" : "choose a GPU…";
  $("#count").placeholder = mode === "recommend" ? "auto" : "1";
  for (const id of ["recompute"]) {
    const first = $(`#${id} option[value='']`);
    if (first) first.textContent = mode === "recommend" ? "auto" : "default";
  }
  const opts = app.options || {};
  const engines = task === "infer" ? opts.serve_launch_engines : opts.train_launch_engines;
  if (engines && engines.length) {
    const select = $("#launch_engine");
    fillSelect(select, engines, "none");
    if (!app.launchChosen) {          // launch files by default, for the engine that suits the task
      const preferred = task === "infer" ? "vllm" : task === "finetune" ? "hf" : "torchrun";
      select.value = engines.includes(preferred) ? preferred : engines[0];
    }
  }
  $("#run").textContent = mode === "recommend" ? "Recommend hardware" : "Estimate";
}

function gpuOptions(gpus) {
  const select = $("#gpu");
  const keep = select.value;
  select.replaceChildren(el("option", { value: "" }, "choose a GPU…"));
  const groups = {};
  for (const g of gpus) (groups[g.segment || "other"] = groups[g.segment || "other"] || []).push(g);
  const order = ["datacenter", "workstation", "geforce", "edge", "tpu", "apple", "other"];
  const rank = (seg) => (order.indexOf(seg) < 0 ? order.length : order.indexOf(seg));   // unknown segments last
  for (const seg of Object.keys(groups).sort((a, b) => rank(a) - rank(b))) {
    const og = el("optgroup", { label: titleCase(seg) });
    for (const g of groups[seg]) {
      const gib = g.usable_memory_gib != null ? g.usable_memory_gib : g.usable_memory_bytes / GiB;
      og.append(el("option", { value: g.id }, `${g.name} · ${Math.round(gib)} GiB`));
    }
    select.append(og);
  }
  if (keep) select.value = keep;
}

function modelInfo() {
  const name = $("#model").value.trim().toLowerCase();
  const m = app.models.find((x) => x.name === name || (x.hf_id || "").toLowerCase() === name || (x.aliases || []).includes(name));
  const box = $("#model-info");
  if (!name) { box.textContent = ""; return; }
  if (!m) { box.textContent = app.models.length ? "Not a bundled name: pick one from the list." : ""; return; }
  const parts = [m.hf_id, m.params_total ? fmtCount(m.params_total) + " params" : null,
    m.is_moe && m.params_active ? fmtCount(m.params_active) + " active" : null,
    m.max_position_embeddings ? fmtCount(m.max_position_embeddings) + " context" : null];
  box.textContent = parts.filter(Boolean).join(" · ");
}

const val = (id) => { const n = document.getElementById(id); return n ? n.value.trim() : ""; };
const int = (id) => { const v = val(id); return v === "" ? undefined : Math.round(Number(v)); };
const num = (id) => { const v = val(id); return v === "" ? undefined : Number(v); };
const str = (id) => { const v = val(id); return v === "" ? undefined : v; };
function prune(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined && !(typeof v === "number" && !isFinite(v))) out[k] = v;
  return out;
}

function modelRef() {
  const text = $("#config").value.trim();
  if (text) {
    let cfg;
    try { cfg = JSON.parse(text); } catch (e) {
      throw { what: "pasted config.json", why: "is not valid JSON (" + e.message + ").", fix: "paste the whole file." };
    }
    if (!cfg || typeof cfg !== "object" || Array.isArray(cfg)) {
      throw { what: "pasted config.json", why: "is not a JSON object.", fix: "paste a Hugging Face config.json." };
    }
    return cfg;
  }
  const name = val("model");
  if (!name) throw { what: "model", why: "is empty.", fix: "type a model name, e.g. llama-3.1-8b." };
  return name;
}

function scenarioFromForm(mode) {
  const task = radio("task");
  const s = { model: modelRef(), task };
  const hardware = prune({ gpu: str("gpu"), count: int("count") });
  if (mode === "estimate") {
    if (!hardware.gpu) throw { what: "GPU", why: "is not chosen.", fix: "pick a GPU, or switch to Recommend hardware." };
    s.hardware = hardware;
  } else if (Object.keys(hardware).length) {
    s.hardware = hardware;
  }
  if (task === "infer") {
    const par = prune({ tp: int("itp") });
    if (Object.keys(par).length) s.parallel = par;
    const inf = prune({ weights: str("weights"), kv_cache: str("kv_cache"), engine: str("engine"),
      prompt_len: int("prompt_len"), output_len: int("output_len"), concurrency: int("concurrency") });
    const rate = num("load_rate");
    if (mode === "estimate" && rate > 0) inf.load = { rate_per_s: rate, requests: 1000 };
    if (Object.keys(inf).length) s.infer = inf;
  } else {
    const zero = val("zero");
    const par = prune({ tp: int("tp"), pp: int("pp"), zero: zero === "" ? undefined : Number(zero),
      shard_group: int("shard_group") });
    if (Object.keys(par).length) s.parallel = par;
    const method = str("method");
    const tr = prune({ method, precision: str("precision"), optimizer: str("optimizer"),
      seq_len: int("seq_len"), micro_batch: int("micro_batch"), global_batch: int("global_batch"),
      recompute: str("recompute"), lora_rank: int("lora_rank"), tokens: num("tokens") });
    if (Object.keys(tr).length) s.train = tr;
  }
  return s;
}

// ---------------------------------------------------------------- URL state
function stateToQuery() {
  const q = new URLSearchParams();
  for (const r of RADIOS) q.set(r, radio(r));
  for (const id of FIELDS) {
    const v = val(id);
    const node = document.getElementById(id);
    if (v !== "" && node && !node.closest("[hidden]")) q.set(id, v);
  }
  return q;
}
function queryToState(q) {
  app.launchChosen = true;      // a shared link says exactly which launch files it wants
  for (const r of RADIOS) if (q.get(r)) setRadio(r, q.get(r));
  updateVisibility();
  for (const id of FIELDS) {
    const node = document.getElementById(id);
    if (!node) continue;
    const v = q.get(id);
    if (v == null) { node.value = ""; continue; }
    if (node.tagName === "SELECT" && !$$("option", node).some((o) => o.value === v)) {
      node.append(el("option", { value: v }, v));     // keep unknown values visible; the server explains them
    }
    node.value = v;
  }
  modelInfo();
}
function shareLink() { return location.origin + location.pathname + "?" + stateToQuery().toString(); }

// ---------------------------------------------------------------- charts
function memoryChart(mem) {
  const W = 760, H = 92, L = 24, R = 24, T = 26, BAR = 36;
  const peak = mem.peak_bytes_per_gpu, cap = mem.capacity_bytes_per_gpu;
  const scaleMax = Math.max(peak, cap) * 1.04 || 1;
  const x = (b) => L + (W - L - R) * (b / scaleMax);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", id: "memory-chart", role: "img",
    "aria-label": `memory per GPU: ${fmtBytes(peak)} of ${fmtBytes(cap)}` });
  // ticks every "nice" GiB step
  const stepGiB = niceStep(scaleMax / GiB, 6);
  for (let g = 0; g * GiB <= scaleMax; g += stepGiB) {
    root.append(svg("line", { x1: x(g * GiB), x2: x(g * GiB), y1: T - 4, y2: T + BAR + 4, class: "grid" }));
    root.append(svg("text", { x: x(g * GiB), y: T + BAR + 18, "text-anchor": "middle" }, `${g} GiB`));
  }
  let acc = 0;
  for (const [key, label, color] of COMPONENTS) {
    const v = (mem.components || {})[key] || 0;
    if (v <= 0) continue;
    const rect = svg("rect", { x: x(acc), y: T, width: Math.max(0.5, x(acc + v) - x(acc)), height: BAR, fill: color,
      "data-component": key });
    rect.append(svg("title", {}, `${label}: ${fmtBytes(v)}`));
    root.append(rect);
    acc += v;
  }
  root.append(svg("line", { x1: x(cap), x2: x(cap), y1: T - 10, y2: T + BAR + 6, class: "cap" }));
  const anchor = x(cap) > W - 140 ? "end" : "start";
  root.append(svg("text", { x: x(cap) + (anchor === "end" ? -6 : 6), y: T - 12, class: "cap-label", "text-anchor": anchor },
    `usable ${fmtBytes(cap)}`));
  root.append(svg("text", { x: L, y: T - 12, "font-weight": "600", fill: "#18202b" }, `peak ${fmtBytes(peak)}`));
  return root;
}

function niceStep(range, target) {
  const raw = range / Math.max(1, target);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}
function niceTicks(lo, hi, n = 5) {
  const step = niceStep(hi - lo, n);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

// ticks at round values of the unit the range is best read in (ms, s, min, h, days)
function timeTicks(lo, hi, n = 5) {
  const span = Math.max(Math.abs(hi), Math.abs(lo));
  const unit = span >= 3 * 86400 ? 86400 : span >= 2 * 3600 ? 3600 : span >= 120 ? 60 : span >= 1 ? 1 : 1e-3;
  return niceTicks(lo / unit, hi / unit, n).map((v) => +(v * unit).toPrecision(12));
}

/* A line/scatter chart. series: [{name, color, points: [{x, y, hollow, title}], line: bool}]
   opts: {id, xLabel, yLabel, logX, fmtX, fmtY, front: [[x, y], ...]} */
function xyChart(series, opts) {
  const W = opts.width || 640, H = opts.height || 320, L = 64, R = 16, T = 16, B = 46;
  const okPoint = (p) => p.x != null && p.y != null && isFinite(p.x) && isFinite(p.y) && (!opts.logX || p.x > 0) && (!opts.logY || p.y > 0);
  const pts = series.flatMap((s) => s.points).filter(okPoint);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", id: opts.id, role: "img", "aria-label": opts.yLabel + " vs " + opts.xLabel });
  if (!pts.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data to plot"));
    return root;
  }
  const tx = (v) => (opts.logX ? Math.log2(v) : v);
  const ty = (v) => (opts.logY ? Math.log10(v) : v);
  let x0 = Math.min(...pts.map((p) => tx(p.x))), x1 = Math.max(...pts.map((p) => tx(p.x)));
  let y0 = opts.logY ? Math.floor(Math.min(...pts.map((p) => ty(p.y)))) : opts.yFromZero === false ? Math.min(...pts.map((p) => p.y)) : 0;
  let y1 = opts.logY ? Math.ceil(Math.max(...pts.map((p) => ty(p.y))) + 1e-9) : Math.max(...pts.map((p) => p.y));
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y1 = y0 + (Math.abs(y0) || 1); }
  const padX = (x1 - x0) * 0.04; x0 -= padX; x1 += padX;
  if (!opts.logY) {
    y1 += (y1 - y0) * 0.08;
    if (opts.yFromZero === false) y0 -= (y1 - y0) * 0.05;
  }
  const X = (v) => L + (W - L - R) * ((tx(v) - x0) / (x1 - x0));
  const Y = (v) => T + (H - T - B) * (1 - (ty(v) - y0) / (y1 - y0));
  const yt = opts.logY ? Array.from({ length: y1 - y0 + 1 }, (_, i) => 10 ** (y0 + i))
    : (opts.timeY ? timeTicks(y0, y1, 5) : niceTicks(y0, y1, 5)).filter((v) => v >= y0);
  for (const v of yt) {
    root.append(svg("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" }));
    root.append(svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, opts.fmtY(v)));
  }
  const xt = opts.logX
    ? Array.from(new Set(pts.map((p) => p.x))).sort((a, b) => a - b)
    : (opts.timeX ? timeTicks(x0, x1, 6) : niceTicks(x0, x1, 6));
  for (const v of xt) {
    if (!opts.logX && (v < x0 || v > x1)) continue;
    root.append(svg("line", { x1: X(v), x2: X(v), y1: T, y2: H - B, class: "grid" }));
    root.append(svg("text", { x: X(v), y: H - B + 16, "text-anchor": "middle" }, opts.fmtX(v)));
  }
  root.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  root.append(svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
  root.append(svg("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }, opts.xLabel));
  root.append(svg("text", { x: 14, y: (T + H - B) / 2, transform: `rotate(-90 14 ${(T + H - B) / 2})`, "text-anchor": "middle" }, opts.yLabel));
  if (opts.front && opts.front.length > 1) {
    const sorted = opts.front.filter((p) => isFinite(p[0]) && isFinite(p[1])).sort((a, b) => a[0] - b[0]);
    root.append(svg("polyline", { class: "front", points: sorted.map((p) => `${X(p[0])},${Y(p[1])}`).join(" ") }));
  }
  for (const s of series) {
    const ok = s.points.filter(okPoint);
    if (s.line && ok.length > 1) {
      root.append(svg("polyline", { fill: "none", stroke: s.color, "stroke-width": 2,
        points: ok.map((p) => `${X(p.x)},${Y(p.y)}`).join(" ") }));
    }
    for (const p of ok) {
      const c = svg("circle", { cx: X(p.x), cy: Y(p.y), r: p.r || 4.5, class: "pt", fill: p.hollow ? "#fff" : s.color,
        stroke: s.color, "stroke-width": 2, "data-series": s.name });
      if (p.title) c.append(svg("title", {}, p.title));
      root.append(c);
    }
  }
  return root;
}

function chartLegend(series) {
  return el("div", { class: "legend" }, series.map((s) => el("div", { class: "item" },
    el("span", { class: "swatch", "data-color": s.color }), s.name)));
}
function paintSwatches(root) {   // CSP forbids inline style attributes; set colours through the CSSOM
  for (const sw of $$(".swatch[data-color]", root)) sw.style.background = sw.dataset.color;
}

// ---------------------------------------------------------------- renderers
function showError(err) {
  const box = $("#error");
  const e = err && err.what ? err : { what: "request", why: String((err && err.message) || err), fix: "" };
  const matches = e.close_matches || e.matches || [];
  // replaceChildren() writes a null argument as the text "null": pass only the parts that exist
  box.replaceChildren(...[el("h3", {}, `${e.what}`), el("div", {}, e.why || ""),
    matches.length ? el("div", { class: "fix" }, "Close matches: ",
      matches.map((m, i) => [i ? ", " : "", el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); applyMatch(e, m); } }, m)])) : null,
    e.fix ? el("div", { class: "fix" }, "Fix: " + e.fix) : null].filter((c) => c != null));
  box.hidden = false;
}
function applyMatch(e, m) {
  const what = (e.what || "").toLowerCase();
  if (what.startsWith("model")) { $("#config").value = ""; $("#model").value = m; modelInfo(); }
  else if (what.startsWith("gpu")) $("#gpu").value = m;
  else return;
  $("#plan-form").requestSubmit();
}

function renderEstimate(est) {
  const view = $("#estimate-view");
  const mem = est.memory, perf = est.performance || {}, cost = est.cost || {};
  const s = est.scenario, hw = s.hardware;
  const fits = mem.fits;
  const taskName = { train: "pre-training", finetune: "fine-tuning", infer: "serving" }[s.task] || s.task;
  const layout = `dp${s.parallel.dp} tp${s.parallel.tp} pp${s.parallel.pp}` + (s.parallel.zero ? ` ZeRO-${s.parallel.zero}` : "");
  const what = s.task === "infer" ? `${s.infer.weights} weights, ${s.infer.engine}` :
    `${s.train.method}, ${s.train.precision}, seq ${fmtCount(s.train.seq_len)} × mb ${s.train.micro_batch}`;
  const head = el("div", { class: "panel", id: "summary" },
    el("div", { class: "headline" },
      el("span", { class: "title" }, `${est.model.name} · ${taskName} · ${hw.count}× ${est.gpu.name}`),
      el("span", { class: "badge " + (fits ? "good" : "bad"), id: "fit-badge" }, fits ? "fits" : "does not fit")),
    el("div", { class: "hint" }, `${layout} · ${what}`),
    el("div", { class: "kpis" },
      kpi("Peak memory / GPU", fmtBytes(mem.peak_bytes_per_gpu) + pm(mem.uncertainty), `of ${fmtBytes(mem.capacity_bytes_per_gpu)} usable · at ${mem.phase}`, "peak"),
      s.task === "infer" ? [
        kpi("Throughput", fmtCount(perf.output_tokens_per_s) + " tok/s" + pm(perf.uncertainty), `output tokens, concurrency ${s.infer.concurrency}`, "throughput"),
        kpi("TTFT", fmtSeconds(perf.ttft_s) + pm(perf.uncertainty), "time to first token", "ttft"),
        kpi("TPOT", fmtSeconds(perf.tpot_s) + pm(perf.uncertainty), "time per output token", "tpot"),
      ] : [
        kpi("Step time", fmtSeconds(perf.step_time_s) + pm(perf.uncertainty), `${fmtCount(perf.tokens_per_s_per_gpu)} tok/s per GPU`, "step"),
        kpi("MFU", fmtPct(perf.mfu), "model FLOPs utilisation", "mfu"),
        kpi("Time to train", fmtSeconds(perf.time_to_train_s) + pm(perf.uncertainty), s.train.tokens ? `${fmtCount(s.train.tokens)} tokens` : "set tokens to train", "ttt"),
      ],
      kpi("Cost per hour", fmtUsd(cost.usd_per_hour), cost.basis ? cost.basis.split(",")[0] : "", "usd_hour"),
      s.task === "infer" ? kpi("$ / M output tokens", fmtUsd(cost.usd_per_million_tokens) + pm(cost.uncertainty), "at this concurrency", "usd_mtok")
        : kpi("Total cost", fmtUsd(cost.usd_total) + pm(cost.uncertainty), `${fmtUsd(cost.usd_per_million_tokens)} per M tokens`, "usd_total")));
  const bars = notesList([mem.uncertainty, perf.uncertainty].map(barNote).filter(Boolean), "bar");
  if (bars) { bars.id = "error-bars"; head.append(bars); }
  const warnings = notesList(est.warnings, "warn");
  if (warnings) head.append(warnings);

  const legendRows = COMPONENTS.filter(([k]) => (mem.components[k] || 0) > 0).map(([k, label, color]) => el("div", { class: "item" },
    el("span", { class: "swatch", "data-color": color }), label,
    el("span", { class: "num" }, fmtBytes(mem.components[k])),
    el("span", { class: "pct" }, (100 * mem.components[k] / mem.peak_bytes_per_gpu).toFixed(1) + "%")));
  const limits = Object.assign({}, mem.limits || {}, est.fit_limits || {});
  const limitNames = { max_micro_batch: "largest micro-batch", max_seq_len: "longest sequence", max_concurrency: "most concurrent requests",
    max_context: "longest context", kv_tokens: "KV-cache tokens", max_batch: "largest batch", kv_pool_bytes: "KV pool" };
  const chips = Object.entries(limits).filter(([, v]) => v != null).map(([k, v]) =>
    el("span", { class: "chip", "data-limit": k }, (limitNames[k] || titleCase(k)) + ": ", el("b", {}, k.includes("bytes") ? fmtBytes(v) : fmtCount(v, 4))));
  const memPanel = panel("Memory per GPU", `peak at ${mem.phase}${mem.cpu_bytes ? ` · host memory ${fmtBytes(mem.cpu_bytes)}` : ""}`,
    memoryChart(mem), el("div", { class: "legend" }, legendRows),
    chips.length ? el("div", {}, el("h2", { class: "mt" }, "What fits", el("span", { class: "sub" }, "on this hardware, other settings unchanged")),
      el("div", { class: "chips", id: "fit-limits" }, chips)) : null,
    notesList(mem.notes));
  paintSwatches(memPanel);

  const perfPanel = panel("Speed", s.task === "infer" ? `serving ${s.infer.concurrency} concurrent request${s.infer.concurrency > 1 ? "s" : ""}` : "one optimizer step",
    speedTable(s, perf), notesList(perf.notes));
  const d = cost.details || {};
  const alts = [d.rent].concat(d.rent_alternatives || []).filter(Boolean);
  const own = d.own;
  const costPanel = panel("Cost", cost.basis || "",
    alts.length ? el("div", { class: "scroll" }, el("table", { class: "data", id: "offers" },
      el("thead", {}, el("tr", {}, el("th", {}, "provider"), el("th", {}, "instance"), el("th", { class: "num" }, "GPUs billed"), el("th", { class: "num" }, "$/hour"))),
      el("tbody", {}, alts.map((o, i) => el("tr", { class: i === 0 ? "best" : null },
        el("td", {}, o.provider || "–"), el("td", {}, o.instance_type || "–"), el("td", { class: "num" }, o.gpus_billed ?? "–"),
        el("td", { class: "num" }, fmtUsd(o.usd_per_hour))))))) : el("div", { class: "hint" }, "No rental price in the catalog for this GPU."),
    own ? el("div", { class: "hint mt" }, `Buying: ${fmtUsd(own.capex_usd_total)} up front (${own.capex_basis || "catalog price"}); ` +
      `${fmtUsd(own.amortized_usd_per_gpu_hour)}/GPU-hour amortised over ${own.years} years plus ${fmtUsd(own.power_usd_per_gpu_hour)}/GPU-hour power` +
      (d.breakeven_months != null ? `; buying pays off after ${(+d.breakeven_months).toFixed(1)} months of continuous use.` : ".")) : null);
  view.replaceChildren(head, memPanel, el("div", { class: "two" }, perfPanel, costPanel));
  view.hidden = false;
}

const TIME_LABELS = {
  compute: "compute", exposed_comm: "exposed communication", bubble: "pipeline bubble", offload: "offload transfers",
  optimizer: "optimizer step", prefill: "prefill (one prompt)", decode_step: "one decode step",
  decode_memory: "· reading weights and KV cache", decode_compute: "· decode compute", tp_comm: "· tensor-parallel all-reduce",
  overhead: "· fixed per-step cost", compute_matmul: "· matmuls", compute_attention: "· attention",
  compute_memory_bound: "· memory-bound kernels",
};
const COUNT_LABELS = { microbatches: "micro-batches per step", batch: "sequences decoded together",
  kv_capacity_tokens: "KV-cache capacity (tokens)", replicas: "model replicas" };

function speedTable(s, perf) {
  const rows = [];
  const b = perf.breakdown || {};
  if (s.task === "infer") {
    const latency = perf.ttft_s != null && perf.tpot_s != null ? perf.ttft_s + s.infer.output_len * perf.tpot_s : null;
    rows.push(["output tokens per second", fmtCount(perf.output_tokens_per_s)],
      ["request latency", fmtSeconds(latency) + ` (${s.infer.output_len} tokens)`]);
  }
  const parent = (k) => (k.startsWith("compute_") ? "compute" : k.startsWith("decode_") && k !== "decode_step" ? "decode_step" : k);
  const keys = Object.keys(b);
  const first = (k) => keys.indexOf(parent(k)) >= 0 ? keys.indexOf(parent(k)) : keys.indexOf(k);
  const ordered = keys.slice().sort((x, y) => first(x) - first(y) || (parent(x) === x ? -1 : parent(y) === y ? 1 : 0) || keys.indexOf(x) - keys.indexOf(y));
  for (const k of ordered) {
    const v = b[k];
    if (typeof v !== "number" || !isFinite(v)) continue;
    const comm = /^comm_([a-z]+)(_s)?$/.exec(k);
    if (comm && !(k in TIME_LABELS)) { if (v > 0) rows.push([`${comm[1].toUpperCase()} communication`, fmtSeconds(v)]); continue; }
    if (k in COUNT_LABELS) rows.push([COUNT_LABELS[k], fmtCount(v, 4)]);
    else if (v > 0) rows.push([TIME_LABELS[k] || titleCase(k.replace(/_s$/, "")), fmtSeconds(v)]);
  }
  if (!rows.length) return el("div", { class: "hint" }, "No breakdown for this task.");
  return el("table", { class: "data", id: "speed-table" }, el("tbody", {}, rows.map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", { class: "num" }, v)))));
}

function renderServing(res) {
  const view = $("#serving-view");
  const curve = res.curve || [];
  const tput = { name: "output tokens/s", color: "#2f5fd0", line: true,
    points: curve.map((p) => ({ x: p.concurrency, y: p.output_tokens_per_s, hollow: p.fits === false,
      title: `concurrency ${p.concurrency}: ${fmtCount(p.output_tokens_per_s)} tok/s${p.fits === false ? " (does not fit)" : ""}` })) };
  const ttft = { name: "TTFT", color: "#e08a2c", line: true,
    points: curve.map((p) => ({ x: p.concurrency, y: p.ttft_s, hollow: p.fits === false, title: `concurrency ${p.concurrency}: TTFT ${fmtSeconds(p.ttft_s)}` })) };
  const tpot = { name: "TPOT", color: "#8a5cc9", line: true,
    points: curve.map((p) => ({ x: p.concurrency, y: p.tpot_s, hollow: p.fits === false, title: `concurrency ${p.concurrency}: TPOT ${fmtSeconds(p.tpot_s)}` })) };
  const c1 = xyChart([tput], { id: "serving-chart", xLabel: "concurrent requests", yLabel: "output tokens/s", logX: true,
    width: 500, height: 320, fmtX: (v) => String(v), fmtY: (v) => fmtCount(v) });
  const c2 = xyChart([ttft, tpot], { id: "latency-chart", xLabel: "concurrent requests", yLabel: "latency (log scale)", logX: true,
    logY: true, width: 500, height: 320, fmtX: (v) => String(v), fmtY: fmtTick(fmtSeconds) });
  const table = el("div", { class: "scroll" }, el("table", { class: "data", id: "serving-table" },
    el("thead", {}, el("tr", {}, ["concurrency", "batch", "output tok/s", "TTFT", "TPOT", "fits"].map((h, i) => el("th", { class: i ? "num" : null }, h)))),
    el("tbody", {}, curve.map((p) => el("tr", {}, el("td", {}, p.concurrency), el("td", { class: "num" }, p.batch ?? "–"),
      el("td", { class: "num" }, fmtCount(p.output_tokens_per_s)), el("td", { class: "num" }, fmtSeconds(p.ttft_s)),
      el("td", { class: "num" }, fmtSeconds(p.tpot_s)), el("td", { class: "num" }, p.fits === false ? "no" : "yes"))))));
  const p = panel("Serving: throughput and latency vs concurrency", "hollow points do not fit in memory",
    el("div", { class: "two" }, el("div", {}, c1, chartLegend([tput])), el("div", {}, c2, chartLegend([ttft, tpot]))), table);
  paintSwatches(p);
  const lp = res.load ? loadPanel(res.load) : null;
  view.replaceChildren(...(lp ? [p, lp] : [p]));
  view.hidden = false;
}

/* Serving under load (the scenario's infer.load): the percentile table at the simulated rate and the
   latency / goodput curves versus rate from the simulator's sweep (10 %-100 % of the capacity). */
function loadPanel(load) {
  const sw = (load.sweep || []).filter((q) => q.rate_per_s > 0);
  const line = (name, color, key) => ({ name, color, line: true,
    points: sw.map((q) => ({ x: q.rate_per_s, y: q[key], title: `${q.rate_per_s.toPrecision(3)} req/s: ${name} ${fmtSeconds(q[key])}` })) });
  const lat = [line("TTFT p50", "#e08a2c", "ttft_p50_s"), line("TTFT p99", "#b5561b", "ttft_p99_s"),
    line("TPOT p50", "#8a5cc9", "tpot_p50_s"), line("TPOT p99", "#5b3a8c", "tpot_p99_s")];
  const hasGood = sw.some((q) => q.goodput_requests_per_s != null);
  const thr = [{ name: "requests/s served", color: "#2f5fd0", line: true,
    points: sw.map((q) => ({ x: q.rate_per_s, y: q.requests_per_s, title: `${q.rate_per_s.toPrecision(3)} req/s offered: ${(q.requests_per_s || 0).toPrecision(3)} served` })) }];
  if (hasGood) thr.push({ name: "goodput (meets the SLO)", color: "#2a9d5b", line: true,
    points: sw.map((q) => ({ x: q.rate_per_s, y: q.goodput_requests_per_s, title: `${q.rate_per_s.toPrecision(3)} req/s: goodput ${(q.goodput_requests_per_s || 0).toPrecision(3)}` })) });
  const fmtR = (v) => (v >= 10 ? v.toFixed(0) : v.toPrecision(2));
  const charts = sw.length ? el("div", { class: "two" },
    el("div", {}, xyChart(lat, { id: "load-latency-chart", xLabel: "arrival rate (requests/s)", yLabel: "latency (log scale)",
      logY: true, width: 500, height: 320, fmtX: fmtR, fmtY: fmtTick(fmtSeconds) }), chartLegend(lat)),
    el("div", {}, xyChart(thr, { id: "load-goodput-chart", xLabel: "arrival rate (requests/s)", yLabel: "requests/s",
      width: 500, height: 320, fmtX: fmtR, fmtY: (v) => fmtR(v) }), chartLegend(thr))) : null;
  const rows = [["TTFT", load.ttft_s], ["TPOT", load.tpot_s], ["end-to-end", load.e2e_s], ["queueing", load.queue_s]];
  const table = el("div", { class: "scroll" }, el("table", { class: "data", id: "load-table" },
    el("thead", {}, el("tr", {}, ["latency", "mean", "p50", "p90", "p99"].map((h, i) => el("th", { class: i ? "num" : null }, h)))),
    el("tbody", {}, rows.map(([name, st]) => el("tr", {}, el("td", {}, name),
      ...["mean", "p50", "p90", "p99"].map((k) => el("td", { class: "num" }, fmtSeconds((st || {})[k]))))))));
  const cap = load.capacity_per_s != null ? `capacity ${fmtR(load.capacity_per_s)} req/s per replica` : "";
  const sub = `${load.engine}, ${load.requests} requests at ${fmtR(load.rate_per_s || 0)} req/s` +
    (load.overloaded ? " — OVERLOADED" : "") + (cap ? ` · ${cap}` : "");
  const p = panel("Serving under load: latency percentiles and goodput vs arrival rate", sub,
    ...(charts ? [charts] : []), table, notesList(load.notes));
  paintSwatches(p);
  return p;
}

function renderLaunch(res) {
  const view = $("#launch-view");
  const names = Object.keys(res.files || {}).sort();
  if (!names.length) { view.hidden = true; return; }
  const pre = el("pre", { id: "launch-code" });
  const tabs = el("div", { class: "tabs", role: "tablist" });
  const show = (name) => {
    pre.textContent = res.files[name];
    pre.dataset.file = name;
    for (const t of $$(".tab", tabs)) t.setAttribute("aria-selected", t.dataset.file === name ? "true" : "false");
  };
  for (const name of names) tabs.append(el("button", { type: "button", class: "tab", role: "tab", "data-file": name, onclick: () => show(name) }, name));
  const copy = el("button", { type: "button", class: "small copy", id: "copy-file", onclick: async () => {
    await copyText(pre.textContent);
    copy.textContent = "copied ✓";
    setTimeout(() => { copy.textContent = "copy"; }, 1500);
  } }, "copy");
  show(names[0]);
  view.replaceChildren(panel("Launch files", `${res.engine} · ${names.length} file${names.length > 1 ? "s" : ""}`,
    tabs, el("div", { class: "codebox" }, pre, copy), notesList(res.notes)));
  view.hidden = false;
}

async function launch(scenario, engine) {
  try {
    renderLaunch(await api("/api/launch", { scenario, engine }));
  } catch (err) {
    const e = err && err.what ? err : { what: "launch", why: String(err) };
    $("#launch-view").replaceChildren(panel("Launch files", engine,
      el("div", { class: "hint", id: "launch-error" }, `No ${engine} files for this plan: ${e.what} ${e.why}`, e.fix ? ` ${e.fix}` : "")));
    $("#launch-view").hidden = false;
  }
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (e) {
    const ta = el("textarea", { "aria-hidden": "true" });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (e2) { ok = false; }
    ta.remove();
    return ok;
  }
}

// recommendation ----------------------------------------------------------------
const METRICS = {
  usd_total: ["total cost", fmtUsd], usd_per_hour: ["$ per hour", fmtUsd],
  usd_per_million_tokens: ["$ per million tokens", fmtUsd], time_to_train_s: ["time to train", fmtSeconds],
  s_per_billion_tokens: ["time per billion tokens", fmtSeconds], request_latency_s: ["request latency", fmtSeconds],
  step_time_s: ["step time", fmtSeconds],
};
const metric = (name) => METRICS[name] || [titleCase(name || "value"), (v) => fmtCount(v)];

function planFacts(p) {
  const s = p.scenario || {}, e = p.estimate || {};
  const mem = e.memory || {}, perf = e.performance || {}, cost = e.cost || {};
  return {
    gpu: p.gpu || (s.hardware || {}).gpu, count: p.count || (s.hardware || {}).count,
    summary: p.summary || "", peak: mem.peak_bytes_per_gpu, cap: mem.capacity_bytes_per_gpu,
    time: perf.time_to_train_s, step: perf.step_time_s, tokPerGpu: perf.tokens_per_s_per_gpu,
    tps: perf.output_tokens_per_s, tpot: perf.tpot_s, ttft: perf.ttft_s,
    usdHour: cost.usd_per_hour, usdTotal: cost.usd_total, usdMtok: cost.usd_per_million_tokens,
    provider: ((cost.details || {}).rent || {}).provider,
  };
}
const planKey = (p) => (p.summary || "") + "|" + JSON.stringify(p.scenario || {});

function renderRecommend(rec, task) {
  const view = $("#recommend-view");
  const plans = rec.plans || [];
  const pareto = rec.pareto || [];
  const front = new Set(pareto.map(planKey));
  const infer = task === "infer";
  const obj = rec.objective || {};
  const [costLabel, costFmt] = metric(obj.cost_metric);
  const [timeLabel, timeFmt] = metric(obj.time_metric);
  const hasTotal = plans.some((p) => planFacts(p).usdTotal != null);
  const headers = ["#", "plan", "peak / GPU"].concat(infer ? ["tok/s", "TTFT", "TPOT", "$/hour", "$/M tok"]
    : ["tok/s/GPU", hasTotal ? "time to train" : "step time", "$/hour", hasTotal ? "total" : "$/M tok"]).concat([""]);
  const rows = plans.map((p, i) => {
    const f = planFacts(p);
    const why = (p.why || []).concat(p.warnings || []);
    return el("tr", { class: [i === 0 ? "best" : "", front.has(planKey(p)) ? "onfront" : ""].join(" ").trim() || null, "data-rank": p.rank || i + 1 },
      el("td", {}, String(p.rank || i + 1)),
      el("td", { title: why.join("\n") || null }, f.summary || `${f.count}× ${f.gpu}`, f.provider ? el("div", { class: "hint" }, "cheapest offer: " + f.provider) : null),
      el("td", { class: "num" }, fmtBytes(f.peak)),
      infer ? [el("td", { class: "num" }, fmtCount(f.tps)), el("td", { class: "num" }, fmtSeconds(f.ttft)), el("td", { class: "num" }, fmtSeconds(f.tpot)),
        el("td", { class: "num" }, fmtUsd(f.usdHour)), el("td", { class: "num" }, fmtUsd(f.usdMtok))]
        : [el("td", { class: "num" }, fmtCount(f.tokPerGpu)), el("td", { class: "num" }, fmtSeconds(hasTotal ? f.time : f.step)),
          el("td", { class: "num" }, fmtUsd(f.usdHour)), el("td", { class: "num" }, fmtUsd(hasTotal ? f.usdTotal : f.usdMtok))],
      el("td", {}, el("button", { type: "button", class: "small use-plan", title: "open this plan: memory, speed, cost and launch files", onclick: () => usePlan(p) }, "open")));
  });
  const table = el("div", { class: "scroll" }, el("table", { class: "data", id: "plans-table" },
    el("thead", {}, el("tr", {}, headers.map((h, i) => el("th", { class: i >= 2 && h ? "num" : null }, h)))), el("tbody", {}, rows)));

  const pointsOf = (list, r) => list.map((p) => ({ x: p.time_value, y: p.cost_value, r,
    title: `${p.summary}: ${timeFmt(p.time_value)}, ${costFmt(p.cost_value)}` }))
    .filter((q) => q.x != null && q.y != null && isFinite(q.x) && isFinite(q.y));
  const series = [
    { name: "other plans shown", color: "#9aa5b4", points: pointsOf(plans.filter((p) => !front.has(planKey(p))), 4.5) },
    { name: "Pareto front", color: "#2f5fd0", points: pointsOf(pareto, 6) },
  ];
  const chart = xyChart(series, { id: "pareto-chart", front: series[1].points.map((q) => [q.x, q.y]), yFromZero: false,
    width: 900, height: 360, xLabel: timeLabel, yLabel: costLabel, fmtX: fmtTick(timeFmt), fmtY: costFmt,
    timeX: timeFmt === fmtSeconds, timeY: costFmt === fmtSeconds });
  const rejected = rec.rejected || [];
  const byKind = {};
  for (const r of rejected) byKind[r.kind || "other"] = (byKind[r.kind || "other"] || 0) + 1;
  const rejItems = rejected.slice(0, 400).map((r) => typeof r === "string" ? el("li", {}, r) :
    el("li", { "data-kind": r.kind || null }, el("b", {}, r.option || "option"), ` — ${r.reason}`,
      r.alternative ? el("span", {}, ` (${r.alternative})`) : null));
  const stats = rec.stats || {};
  const sub = `${plans.length} plan${plans.length === 1 ? "" : "s"} · objective ${obj.name || "default"}` +
    (stats.layouts ? ` · ${fmtCount(stats.layouts)} layouts on ${stats.gpus_searched} GPUs searched in ${fmtSeconds(stats.seconds)}` : "");
  const notes = notesList([].concat(rec.preset ? [`Use case ${rec.preset.name}: ${rec.preset.summary}`] : [],
    (rec.preset && rec.preset.why) || [], rec.assumptions || []));
  const top = panel("Recommended plans", sub,
    plans.length ? table : el("div", { class: "hint" }, "No feasible plan: the rejected options below say why."), notes);
  const chartPanel = panel("Cost vs time", "Pareto front: no other plan is both cheaper and faster", chart, chartLegend(series));
  paintSwatches(chartPanel);
  const rejPanel = panel("Rejected options", Object.entries(byKind).map(([k, n]) => `${n} ${k}`).join(" · "),
    el("details", { class: "rejected" }, el("summary", {}, `show ${rejected.length} rejected option${rejected.length === 1 ? "" : "s"} with reasons`), el("ul", {}, rejItems)));
  view.replaceChildren(top, plans.length ? chartPanel : el("span"), rejected.length ? rejPanel : el("span"));
  view.hidden = false;
}

function usePlan(p) {
  const s = p.scenario || {};
  setRadio("mode", "estimate");
  updateVisibility();
  if (s.hardware) { $("#gpu").value = s.hardware.gpu || ""; $("#count").value = s.hardware.count || ""; }
  const par = s.parallel || {};
  const set = (id, v) => { const n = document.getElementById(id); if (n && v != null) n.value = String(v); };
  if (s.task === "infer") {
    set("itp", par.tp);
    for (const k of ["weights", "kv_cache", "engine", "prompt_len", "output_len", "concurrency"]) set(k, (s.infer || {})[k]);
    set("load_rate", ((s.infer || {}).load || {}).rate_per_s);
  } else {
    set("tp", par.tp); set("pp", par.pp); set("zero", par.zero); set("shard_group", par.shard_group);
    for (const k of ["method", "precision", "optimizer", "seq_len", "micro_batch", "global_batch", "recompute", "lora_rank", "tokens"]) set(k, (s.train || {})[k]);
  }
  $("#plan-form").requestSubmit();
}

// ---------------------------------------------------------------- run
function setStatus(text) { const s = $("#status"); s.textContent = text || ""; s.hidden = !text; }

async function run(push = true) {
  if (app.running) return;
  app.running = true;
  const button = $("#run");
  button.disabled = true;
  $("#error").hidden = true;
  const mode = radio("mode"), task = radio("task");
  try {
    const scenario = scenarioFromForm(mode);
    const q = stateToQuery();
    if (push && location.search !== "?" + q.toString()) history.pushState(null, "", "?" + q.toString());
    $("#welcome").hidden = true;
    for (const id of ["estimate-view", "recommend-view", "serving-view", "launch-view"]) $("#" + id).hidden = true;
    const engine = val("launch_engine");
    if (mode === "estimate") {
      setStatus("Estimating…");
      const est = await api("/api/estimate", scenario);
      renderEstimate(est);
      const jobs = [];
      if (task === "infer") jobs.push(api("/api/serving-curve", { scenario }).then(renderServing));
      if (engine) jobs.push(launch(scenario, engine));
      await Promise.all(jobs);
    } else {
      setStatus("Searching GPUs, counts and layouts…");
      const constraints = prune({ budget_usd: num("budget_usd"), deadline_days: num("deadline_days"), max_gpus: int("max_gpus"),
        ttft_s: task === "infer" ? num("ttft_s") : undefined,
        tpot_s: task === "infer" && num("tpot_ms") != null ? num("tpot_ms") / 1000 : undefined,
        requests_per_s: task === "infer" ? num("requests_per_s") : undefined });
      const body = prune({ scenario, objective: str("objective"), preset: str("preset"), top: int("top") });
      if (Object.keys(constraints).length) body.constraints = constraints;
      const rec = await api("/api/recommend", body);
      renderRecommend(rec, task);
      const best = (rec.plans || [])[0];
      if (best && best.scenario) {
        const jobs = [];
        if (task === "infer") jobs.push(api("/api/serving-curve", { scenario: best.scenario }).then(renderServing));
        if (engine) jobs.push(launch(best.scenario, engine));
        await Promise.all(jobs);
      }
    }
    setStatus("");
  } catch (err) {
    setStatus("");
    showError(err);
  } finally {
    app.running = false;
    button.disabled = false;
    document.body.dataset.ready = "1";
  }
}

async function init() {
  const form = $("#plan-form");
  form.addEventListener("submit", (ev) => { ev.preventDefault(); run(true); });
  form.addEventListener("change", (ev) => {
    if (ev.target.name === "task" && ev.target.value === "finetune" && !val("method")) $("#method").value = "lora";
    if (ev.target.name === "mode" || ev.target.name === "task") updateVisibility();
  });
  $("#model").addEventListener("input", modelInfo);
  $("#launch_engine").addEventListener("change", () => { app.launchChosen = true; });
  $("#share").addEventListener("click", async () => {
    history.replaceState(null, "", "?" + stateToQuery().toString());
    const ok = await copyText(shareLink());
    $("#share").textContent = ok ? "Link copied ✓" : "Link in address bar";
    setTimeout(() => { $("#share").textContent = "Copy link"; }, 1600);
  });
  window.addEventListener("popstate", () => { queryToState(new URLSearchParams(location.search)); if (location.search) run(false); });
  try {
    const [options, models, gpus] = await Promise.all([api("/api/options"), api("/api/models"), api("/api/gpus")]);
    app.options = options; app.models = models.models; app.gpus = gpus.gpus;
    for (const select of $$("select[data-vocab]")) {
      const key = select.dataset.vocab;
      let values = options[key] || [];
      if (key === "presets" && options.preset_summaries) values = values.map((v) => ({ value: v, label: v, title: options.preset_summaries[v] }));
      fillSelect(select, values, key === "presets" ? "none" : "default");
    }
    $("#model-list").replaceChildren(...app.models.map((m) => el("option", { value: m.name },
      `${m.hf_id}${m.params_total ? " · " + fmtCount(m.params_total) : ""}`)));
    gpuOptions(app.gpus);
  } catch (err) {
    showError(err);
  }
  updateVisibility();
  const q = new URLSearchParams(location.search);
  if (q.has("model") || q.has("gpu")) {
    queryToState(q);
    await run(false);
  } else {
    if (!$("#model").value) $("#model").value = "llama-3.1-8b";
    if (!$("#gpu").value && app.gpus.some((g) => g.id === "h100-sxm")) $("#gpu").value = "h100-sxm";
    modelInfo();
    document.body.dataset.ready = "1";
  }
}

document.addEventListener("DOMContentLoaded", init);
