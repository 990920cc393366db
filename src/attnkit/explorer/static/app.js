// attnkit explorer: renders the payloads of /api/translate and /api/caption (or, in an exported
// file, the ones in window.ATTNKIT_DATA). No framework, no network beyond this server.
"use strict";

const DATA = window.ATTNKIT_DATA || null;
const SVGNS = "http://www.w3.org/2000/svg";
const state = { models: DATA ? DATA.models || [] : [], translations: [], captions: [], words: false, method: "",
  captionMethod: "", pair: "", verses: [] };
// a translation model's language pair, the key of the pair picker ("es>en")
const pairOf = (m) => `${m.src_lang}>${m.tgt_lang}`;
// "Spanish → English"; "" when a side is unknown ("?": a Hugging Face translator that names no language)
const pairName = (key) => (key.split(">").some((c) => !c || c === "?" || c === "undefined") ? "" : key.split(">").map(langName).join(" → "));
const translateHeading = (name) => (name ? `Translate ${name}` : "Translate");
const named = (m) => Boolean(pairName(pairOf(m)));  // the model says both of its languages

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const k of kids.flat()) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function sv(tag, attrs = {}, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const k of kids.flat()) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
const blue = (w) => `rgba(31,119,180,${Math.max(0, Math.min(1, w)).toFixed(3)})`;
const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
const clean = (p) => p.replace(/\u2581/g, " ").trim() || p;

// A 503 with Retry-After is the server saying "busy, come back then" (its queue or lane is full): the request
// is asked again after that many seconds, up to BUSY_TRIES times, and onBusy(seconds, message) lets the page
// say so meanwhile. Any other error is thrown with the server's message.
const BUSY_TRIES = 5, BUSY_MAX_S = 120;
function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(t); reject(new DOMException("aborted", "AbortError")); });
  });
}
async function api(path, options, onBusy = null) {
  for (let tries = 1; ; tries++) {
    const r = await fetch(path, options);
    let body;
    try { body = await r.json(); } catch (e) { throw new Error(`${r.status} ${r.statusText}`); }
    const retry = Number(r.headers.get("Retry-After"));
    if (r.status === 503 && retry > 0 && retry <= BUSY_MAX_S && tries < BUSY_TRIES) {
      if (onBusy) onBusy(retry, body.error);
      await pause(1000 * retry, options && options.signal);
      continue;
    }
    if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
    return body;
  }
}
function modelInfo(name) { return state.models.find((m) => m.name === name) || { name, scores: {} }; }
// a language's English name from its code, by the browser's own table ("es" → "Spanish"); the code if unknown
function langName(code) {
  try { return new Intl.DisplayNames(["en"], { type: "language" }).of(code) || code; } catch (e) { return code; }
}

// ---------------------------------------------------------------- one matrix, in SVG
function matrixSvg(att, rows, cols, cell = 14, gold = null, font = 10, links = null) {
  const left = 8 + 0.62 * font * Math.max(...rows.map((r) => r.length), 1);
  const top = 8 + 0.62 * font * Math.max(...cols.map((c) => c.length), 1);
  const W = left + cols.length * cell + 4 * font, H = top + rows.length * cell + 4;  // room for the last rotated label
  const svg = sv("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "matrix", "font-size": font,
    "font-family": "system-ui, sans-serif" });
  svg.append(sv("rect", { x: 0, y: 0, width: W, height: H, fill: "#fff" }));
  const cx = (j) => left + j * cell + cell / 2 + 0.3 * font;  // a rotated label's foot, centred on its column
  cols.forEach((c, j) => svg.append(sv("text", { x: cx(j), y: top - 4, transform: `rotate(-60 ${cx(j)} ${top - 4})` }, c)));
  rows.forEach((r, i) => svg.append(sv("text", { x: left - 4, y: top + i * cell + cell / 2, "text-anchor": "end",
    "dominant-baseline": "central" }, r)));
  att.forEach((row, i) => row.forEach((w, j) => {
    const rect = sv("rect", { x: left + j * cell, y: top + i * cell, width: cell - 1, height: cell - 1,
      fill: blue(w), class: "cell", "data-r": i, "data-c": j, "data-w": w });
    rect.append(sv("title", {}, `${rows[i]} → ${cols[j]}: ${fmt(w)}`));
    svg.append(rect);
  }));
  if (gold) { // gold links [source word, target word]: sure as squares, possible-only as dots
    const sure = new Set(gold.sure.map(([a, b]) => `${a}-${b}`));
    gold.possible.forEach(([a, b]) => {
      const x = left + a * cell, y = top + b * cell;
      svg.append(sure.has(`${a}-${b}`)
        ? sv("rect", { x: x + 2, y: y + 2, width: cell - 5, height: cell - 5, fill: "none", stroke: "#d62728",
            "stroke-width": 1.5, class: "gold-sure" })
        : sv("circle", { cx: x + cell / 2 - 0.5, cy: y + cell / 2 - 0.5, r: 2, fill: "#ff7f0e", class: "gold-possible" }));
    });
  }
  (links || []).forEach(([a, b]) => svg.append(sv("circle", { cx: left + a * cell + cell / 2 - 0.5,
    cy: top + b * cell + cell / 2 - 0.5, r: cell / 2 - 3, fill: "none", stroke: "#000", "stroke-width": 1,
    class: "model-link" })));  // links read from this matrix [source word, target word]: black rings
  return svg;
}

function heatCanvas(mat, px = 3) {
  const n = mat.length, m = mat[0] ? mat[0].length : 0;
  const c = el("canvas", { width: Math.max(1, m * px), height: Math.max(1, n * px), class: "hcell" });
  const g = c.getContext("2d");
  mat.forEach((row, i) => row.forEach((w, j) => { g.fillStyle = blue(w); g.fillRect(j * px, i * px, px, px); }));
  return c;
}

// ---------------------------------------------------------------- translation cards
function currentView(p) { // the chosen attribution method's matrix when there is one, else the attention
  const a = p.attribution;
  // whole words: a model trained with guided alignment shows its guided head, the matrix its links are read from
  const own = p.words.links_matrix ? { att: p.words.links_matrix, from: p.words.links_from } : { att: p.words.attention };
  if (state.words) return { src: p.words.source, tgt: p.words.target, att: a ? a.words : own.att, words: true,
    links: a ? a.links : p.words.links, from: a ? null : own.from,
    rule: (!a && p.words.links_rule) || "argmax both ways, grow-diag-final-and" };
  return { src: p.source_pieces.map(clean), tgt: p.target_pieces.map(clean), att: a ? a.scores : p.attention, words: false };
}

// a model still training (served from its run's folder): the checkpoint this answer was made with, so a learner
// sees attention form as the server moves on to newer checkpoints; nothing for a finished model
function stepBadge(p) {
  if (p.step === undefined || p.step === null) return "";
  return el("span", { class: "step", "data-step": p.step, title: `checkpoint ${p.checkpoint}` }, `step ${p.step} `);
}

function renderTranslation(p) {
  const info = modelInfo(p.model);
  const bleu = info.scores && info.scores.test_bleu !== undefined ? `test BLEU ${fmt(info.scores.test_bleu, 2)}` : "";
  const card = el("div", { class: "card model-card", "data-model": p.model, "data-kind": p.kind });
  card.append(el("h3", {}, `${p.model} `, stepBadge(p), el("span", { class: "score" }, `${p.kind} · ${bleu} · beam ${p.beam}`)));
  card.append(el("div", { class: "translation" }, p.translation));
  const v = currentView(p);
  const note = methodNote(p, state.method);
  if (note) card.append(el("div", { class: "method-note", "data-method": p.attribution ? p.attribution.method : "" }, note));
  if (!v.att) {
    card.append(el("p", { class: "no-attention" }, `${p.model} has no attention. It reads the whole ` +
      `${langName(p.src_lang)} sentence into one fixed vector and writes every ${langName(p.tgt_lang)} word from ` +
      "that same vector, so there is no alignment to show: that is the point of the comparison (compare its " +
      "long sentences with the others')."));
    card.append(exportsFor(card, p, "translation"));
    return card;
  }
  const status = el("div", { class: "status" }, "hover a word or a cell");
  const srcRow = el("div", { class: "tokens src" }, v.src.map((t, j) => el("span", { class: "tok", "data-i": j }, t)));
  const tgtRow = el("div", { class: "tokens tgt" }, v.tgt.map((t, i) => el("span", { class: "tok", "data-i": i }, t)));
  card.append(el("div", { class: "label" }, `source (${langName(p.src_lang)})`), srcRow, el("div", { class: "label" },
    `target (${langName(p.tgt_lang)}) — hover to see where it looks, click for that decoder step`), tgtRow);
  const gold = v.words && p.gold ? p.gold : null;
  const svg = matrixSvg(v.att, v.tgt, v.src, 14, gold, 10, v.links);
  card.append(el("div", { class: "label" }, (p.attribution ? `${p.attribution.method} attributions` :
    v.from ? `alignment matrix of ${v.from}` : "alignment matrix") + ": rows = target, columns = source" +
    (v.links ? ` — black rings: ${p.attribution ? p.attribution.method : v.from || "attention"} links (${v.rule})` : "") +
    (p.gold ? (gold ? ` — gold links of ${p.gold.ref}: red squares sure, orange dots possible` :
      " — switch to whole words to see this verse's gold links") : "")), svg, status);

  const clear = () => card.querySelectorAll(".tok").forEach((t) => { t.style.background = ""; t.classList.remove("hl", "focus");
    const w = t.querySelector(".w"); if (w) w.remove(); });
  const mark = (tok, w) => { tok.style.background = blue(w); tok.classList.add("hl"); tok.dataset.w = w;
    tok.append(el("span", { class: "w" }, fmt(w, 2))); };
  const showRow = (i) => { clear(); tgtRow.children[i].classList.add("focus");
    v.att[i].forEach((w, j) => mark(srcRow.children[j], w));
    status.textContent = `“${v.tgt[i]}” ${p.attribution ? "draws most on" : "attends most to"} ` +
      `“${v.src[argmax(v.att[i])]}” (${fmt(Math.max(...v.att[i]))})`; };
  const showCol = (j) => { clear(); srcRow.children[j].classList.add("focus");
    v.att.forEach((row, i) => mark(tgtRow.children[i], row[j]));
    status.textContent = `target words attending to “${v.src[j]}”`; };
  for (const ev of ["mouseenter", "click"]) { // hover with a mouse, tap on a touch screen
    tgtRow.querySelectorAll(".tok").forEach((t) => t.addEventListener(ev, () => showRow(+t.dataset.i)));
    srcRow.querySelectorAll(".tok").forEach((t) => t.addEventListener(ev, () => showCol(+t.dataset.i)));
  }
  svg.querySelectorAll(".cell").forEach((c) => ["mouseenter", "click"].forEach((ev) => c.addEventListener(ev, () => {
    showRow(+c.dataset.r); status.textContent = `${v.tgt[+c.dataset.r]} → ${v.src[+c.dataset.c]}: ${fmt(c.dataset.w)}`; })));

  if (p.steps) {
    const steps = el("div", { class: "steps" });
    const show = (t) => renderStep(steps, p, t);
    tgtRow.querySelectorAll(".tok").forEach((t) => t.addEventListener("click", () => {
      if (v.words) { steps.textContent = "The three steps are per subword piece: switch off “whole words” to see them."; return; }
      show(+t.dataset.i); }));
    card.append(el("details", { open: "" }, el("summary", {}, "The three steps of one decoder step"), steps));
    if (!v.words) show(0);
  }
  if (p.diagnostics) card.append(renderDiagnostics(p));
  if (p.heads) card.append(renderHeads(p));
  if (p.heads && !DATA && window.AttnkitHeads) card.append(window.AttnkitHeads.translatorPanel(card, p)); // /api/ablate
  if (p.steps && !p.heads && !DATA && window.AttnkitHeads) card.append(window.AttnkitHeads.attentionPanel(card, p)); // RNNsearch
  if (p.steps && !p.heads && !DATA && window.AttnkitHeadStep) card.append(window.AttnkitHeadStep.rnnControl(p)); // RNNsearch
  if (p.note) card.append(el("p", { class: "note engine-note" }, p.note));
  card.append(exportsFor(card, p, "translation"));
  return card;
}

function argmax(a) { let b = 0; a.forEach((x, i) => { if (x > a[b]) b = i; }); return b; }

function renderStep(box, p, t) {
  const s = p.steps, src = p.source_pieces.map(clean);
  const order = src.map((_, j) => j).sort((a, b) => s.weights[t][b] - s.weights[t][a]);
  const top = order.slice(0, 3).map((j) => `“${src[j]}” (${fmt(s.contributions ? s.contributions[t][j] : s.weights[t][j], 2)})`);
  box.replaceChildren(
    el("p", {}, `Step ${t + 1}, writing “${clean(p.target_pieces[t])}”. `,
      el("b", {}, "1. score: "), el("span", { class: "formula" }, s.formula.replace("e_j", "e_tj").replace(" s", " s_{t−1}")),
      el("b", {}, "  2. normalise: "), el("span", { class: "formula" }, "α_tj = exp(e_tj) / Σ_k exp(e_tk)"),
      el("b", {}, "  3. sum: "), el("span", { class: "formula" }, "c_t = Σ_j α_tj h_j"),
      `. ‖c_t‖ = ${fmt(s.context_norm[t], 2)}; largest contributions ‖α_tj h_j‖: ${top.join(", ")}.`),
    el("table", { class: "steps-table", "data-step": t },
      el("tr", {}, el("th", {}, "source piece j"), el("th", {}, "e_tj (score)"), el("th", {}, "α_tj (weight)"),
        el("th", {}, "‖α_tj h_j‖")),
      src.map((w, j) => el("tr", {}, el("td", {}, w), el("td", {}, fmt(s.scores[t][j])), el("td", {}, fmt(s.weights[t][j])),
        el("td", {}, s.contributions ? fmt(s.contributions[t][j]) : "–")))));
}

function renderDiagnostics(p) {
  const d = p.diagnostics, tgt = p.target_pieces.map(clean);
  return el("details", { class: "diag" }, el("summary", {}, "Diagnostics per target piece"),
    el("p", { class: "rule" }, "entropy of the attention (nats; 0 = one source piece), mass on the sentence-final source " +
      "piece (where attention parks when it has nothing to align: attnkit's sources have no </s> token, so the final " +
      "piece plays that role), and mass on punctuation"),
    el("table", {}, el("tr", {}, el("th", {}, "target"), el("th", {}, "entropy"), el("th", {}, "final-piece mass"),
      el("th", {}, "punctuation mass")),
    tgt.map((w, t) => el("tr", {}, el("td", {}, w), el("td", {}, fmt(d.entropy[t], 2)), el("td", {}, fmt(d.eos_mass[t], 2)),
      el("td", {}, fmt(d.punctuation_mass[t], 2))))));
}

function meanHeads(layer) { // (H, n, m) -> (n, m)
  return layer[0].map((row, i) => row.map((_, j) => layer.reduce((s, h) => s + h[i][j], 0) / layer.length));
}

function renderHeads(p) {
  const src = p.source_pieces.map(clean), tgt = p.target_pieces.map(clean), H = p.heads;
  const box = el("details", { class: "heads", open: "" }, el("summary", {}, "Every layer and head (click one to enlarge)"));
  const kinds = [["enc_self", "encoder self-attention", src, src], ["dec_self", "decoder self-attention", tgt, tgt],
    ["cross", "cross-attention (decoder → encoder)", tgt, src]];
  for (const [key, title, rows, cols] of kinds) {
    const maps = H[key], L = maps.length, nh = maps[0].length;
    const grid = el("div", { class: "heads-grid", style: `grid-template-columns: 60px repeat(${nh + 1}, max-content)` });
    grid.append(el("span", {}, ""), ...Array.from({ length: nh }, (_, h) => el("span", { class: "label" }, `head ${h + 1}`)),
      el("span", { class: "label" }, "mean"));
    maps.forEach((layer, l) => {
      grid.append(el("span", { class: "label" }, `layer ${l + 1}`));
      [...layer, meanHeads(layer)].forEach((mat, h) => {
        const c = heatCanvas(mat); c.dataset.kind = key; c.dataset.layer = l; c.dataset.head = h < nh ? h : "mean";
        c.title = `${title}, layer ${l + 1}, ${h < nh ? "head " + (h + 1) : "mean of the heads"}`;
        const site = { enc_self: "encoder", dec_self: "decoder self", cross: "cross" }[key];
        const step = h < nh ? { model: p.model, source: p.source, target: p.translation, site, layer: l + 1, head: h + 1 } : null;
        c.addEventListener("click", () => enlarge(`${c.title}`, mat, rows, cols, null, step));
        grid.append(c);
      });
    });
    box.append(el("div", { class: "label" }, title), grid);
  }
  if (H.rollout) {
    const c = heatCanvas(H.rollout, 4); c.title = "encoder attention rollout";
    c.addEventListener("click", () => enlarge("encoder attention rollout (Abnar & Zuidema 2020)", H.rollout, src, src));
    box.append(el("div", { class: "label" }, "encoder attention rollout: Â_l = rownorm(A_l + I) (A_l = the layer's head " +
      "average, I for the residual), R = Â_L ⋯ Â_1"), c);
  }
  return box;
}

// gold: cells to outline ({sure, possible}, matrixSvg's); step: the /api/head-step body of this head (model, text or
// source/target, site, layer, head): a cell's click, or the query picker, steps through the head at that row
function enlarge(title, mat, rows, cols, gold = null, step = null) {
  const box = document.getElementById("enlarged");
  const close = el("button", { class: "close", title: "close (Esc)", onclick: () => { box.hidden = true; } }, "close ✕");
  // cells as large as the window allows (between 12 and 32 px), so a long verse still fits
  const room = Math.min(window.innerWidth * 0.8 - 160, window.innerHeight * 0.9 - 200);
  const cell = Math.max(12, Math.min(32, Math.floor(room / Math.max(rows.length, cols.length, 1))));
  const svg = matrixSvg(mat, rows, cols, cell, gold, Math.max(10, Math.min(14, cell * 0.5)));
  const status = el("div", { class: "status" }, "hover a cell for its value");
  svg.querySelectorAll(".cell").forEach((c) => c.addEventListener("mouseenter", () => {
    status.textContent = `${rows[+c.dataset.r]} → ${cols[+c.dataset.c]}: ${fmt(c.dataset.w)}`; }));
  const ctl = step && window.AttnkitHeadStep ? window.AttnkitHeadStep.control(step, rows) : null;
  if (ctl) svg.querySelectorAll(".cell").forEach((c) => c.addEventListener("click", () => ctl.go(+c.dataset.r + 1)));
  // a text's head (live): its roles and QK decomposition (/api/head-why), at the query of a clicked row
  const why = step && step.text && !DATA && window.AttnkitHeads ? window.AttnkitHeads.whyBox(step, rows) : null;
  if (why) svg.querySelectorAll(".cell").forEach((c) => c.addEventListener("click", () => why.go(+c.dataset.r + 1)));
  box.replaceChildren(el("div", { class: "enlarged-head" }, el("h3", {}, title), close), svg, status,
    ...(why ? [why.box] : []), ...(ctl ? [ctl.bar, ctl.box] : []),
    el("div", { class: "exports" },
      el("button", { class: "export", "data-format": "svg", onclick: () => download("head.svg", svgBlob(svg)) }, "SVG"),
      el("button", { class: "export", "data-format": "png", onclick: () => svgToPng(svg, "head.png") }, "PNG")));
  box.hidden = false;
}
document.addEventListener("keydown", (e) => { if (e.key === "Escape") document.getElementById("enlarged").hidden = true; });

// ---------------------------------------------------------------- caption cards
// A (h, w) attention grid at (H, W) pixels, as torch.nn.functional.interpolate does it: "bilinear"
// with align_corners=False (source coordinate (y + 0.5)·h/H − 0.5, clamped at the borders: the smooth
// maps of Xu et al.'s figures and attnkit.viz.upsample_attention), or "nearest" (the true cells).
function upsample(grid, H, W, mode = "bilinear") {
  const h = grid.length, w = grid[0].length, out = new Float64Array(H * W);
  for (let y = 0; y < H; y++) {
    const sy = Math.max(0, (y + 0.5) * h / H - 0.5);
    const y0 = mode === "nearest" ? Math.min(h - 1, Math.floor(y * h / H)) : Math.min(h - 1, Math.floor(sy));
    const y1 = Math.min(h - 1, y0 + 1), fy = mode === "nearest" ? 0 : sy - y0;
    for (let x = 0; x < W; x++) {
      const sx = Math.max(0, (x + 0.5) * w / W - 0.5);
      const x0 = mode === "nearest" ? Math.min(w - 1, Math.floor(x * w / W)) : Math.min(w - 1, Math.floor(sx));
      const x1 = Math.min(w - 1, x0 + 1), fx = mode === "nearest" ? 0 : sx - x0;
      out[y * W + x] = (1 - fy) * ((1 - fx) * grid[y0][x0] + fx * grid[y0][x1]) +
        fy * ((1 - fx) * grid[y1][x0] + fx * grid[y1][x1]);
    }
  }
  return out;
}
// The upsampled map as a PNG data URL to blend over the image: warm colour, opacity ∝ weight / peak.
function heatImage(grid, size, mode) {
  const up = upsample(grid, size, size, mode);
  let mx = 1e-9; for (const v of up) mx = Math.max(mx, v);
  const c = document.createElement("canvas"); c.width = size; c.height = size;
  const g = c.getContext("2d"), img = g.createImageData(size, size);
  up.forEach((v, k) => { img.data.set([214, 96, 39, Math.round(200 * v / mx)], 4 * k); });
  g.putImageData(img, 0, 0);
  return c.toDataURL("image/png");
}

function renderCaption(p) {
  const info = modelInfo(p.model);
  const card = el("div", { class: "card caption-card", "data-model": p.model });
  const sc = info.scores && info.scores.test_bleu4 !== undefined ? `test BLEU-4 ${fmt(info.scores.test_bleu4, 1)}` : "";
  card.append(el("h3", {}, `${p.model} `, stepBadge(p), el("span", { class: "score" }, `${p.attention_type} attention · ${sc}`)));
  if (p.scene) card.append(el("div", { class: "reference" }, `reference: ${p.scene.reference}`));
  const maps = p.attribution ? p.attribution.maps : p.attention;
  const note = methodNote(p, state.captionMethod);
  if (note) card.append(el("div", { class: "method-note", "data-method": p.attribution ? p.attribution.method : "" }, note));
  const words = el("div", { class: "tokens caption" }, p.words.map((w, t) => el("span", { class: "cword", "data-t": t }, w)));
  const size = 256, [gh, gw] = p.grid;
  const svg = sv("svg", { width: size, height: size, viewBox: `0 0 ${size} ${size}`, class: "overlay" });
  svg.append(sv("image", { href: p.image, x: 0, y: 0, width: size, height: size, style: "image-rendering: pixelated" }));
  const heat = sv("g", { class: "heat" });
  svg.append(heat);
  const scale = size / p.canvas;
  (p.boxes || []).forEach((b) => svg.append(sv("rect", { x: b[0] * scale, y: b[1] * scale, width: (b[2] - b[0]) * scale,
    height: (b[3] - b[1]) * scale, fill: "none", stroke: "#2ca02c", "stroke-width": 2, class: "box" })));
  const status = el("div", { class: "status" }, "hover a word to see where it looked");
  let current = 0, mode = "bilinear";
  const show = (t) => {
    current = t;
    words.querySelectorAll(".cword").forEach((w) => w.classList.toggle("focus", +w.dataset.t === t));
    const m = maps[t], mx = Math.max(...m.flat(), 1e-9);
    heat.replaceChildren(sv("image", { href: heatImage(m, size, mode), x: 0, y: 0, width: size, height: size,
      class: "heat-map", "data-t": t, "data-mode": mode }));
    const corr = p.correctness && p.correctness[t] !== null && p.correctness[t] !== undefined ?
      `; attention correctness (mass in the item's box) ${fmt(p.correctness[t], 2)}` : "";
    status.textContent = `“${p.words[t]}”: the map that predicted it (peak ${fmt(mx, 2)})${corr}`;
  };
  svg.addEventListener("mousemove", (e) => { // the grid cell under the pointer, and its weight
    const r = svg.getBoundingClientRect(), m = maps[current];
    if (!m) return;
    const i = Math.min(gh - 1, Math.floor((e.clientY - r.top) / r.height * gh));
    const j = Math.min(gw - 1, Math.floor((e.clientX - r.left) / r.width * gw));
    status.textContent = `“${p.words[current]}”, grid cell (${i + 1}, ${j + 1}): ${p.attribution ? p.attribution.method : "α"} = ${fmt(m[i][j])}`;
  });
  const cells = el("label", { class: "cells-switch" }, el("input", { type: "checkbox", class: "cells-toggle",
    onchange: (e) => { mode = e.target.checked ? "nearest" : "bilinear"; show(current); } }),
    ` show the ${gh}×${gw} grid cells instead of the smooth (bilinear) upsampling`);
  words.querySelectorAll(".cword").forEach((w) => ["mouseenter", "click"].forEach((ev) =>
    w.addEventListener(ev, () => show(+w.dataset.t))));
  card.append(el("div", { class: "caption" }, p.caption), words, svg, status, cells);
  if (p.correctness) {
    const rows = p.words.map((w, t) => [w, p.correctness[t]]).filter(([, c]) => c !== null);
    card.append(el("table", { class: "diag" }, el("tr", {}, el("th", {}, "item word"), el("th", {}, "attention correctness")),
      rows.map(([w, c]) => el("tr", {}, el("td", {}, w), el("td", {}, fmt(c, 3))))));
  }
  if (p.words.length) show(0);
  card.append(exportsFor(card, p, "caption"));
  return card;
}

// ---------------------------------------------------------------- wiring
function redrawTranslations() {
  document.getElementById("results").replaceChildren(...state.translations.map(renderTranslation));
  const any = state.translations.find((p) => p.words);
  document.getElementById("rule").textContent = any ? `Word view: ${any.words.rule}.` : "";
}
function redrawCaptions() { document.getElementById("captions").replaceChildren(...state.captions.map(renderCaption)); }

let translateRun = 0, translateAbort = null; // answers of an older request that arrive late are dropped
async function translateAll() {
  const run = ++translateRun;
  const text = document.getElementById("text").value, beam = +document.getElementById("beam").value;
  const reference = document.getElementById("reference").dataset.text;
  const target = document.getElementById("force").checked && reference ? reference : null;
  const err = document.getElementById("error"); err.textContent = "";
  // the models of the chosen language pair: a Spanish sentence is not given to an English → Spanish model;
  // a model that names no languages (a Hugging Face folder that says none) is given every pair's sentences
  const names = state.models.filter((m) => m.task === "translation" && (pairOf(m) === state.pair || !named(m)))
    .map((m) => m.name);
  if (translateAbort) translateAbort.abort();
  const controller = translateAbort = new AbortController(), jobs = names.map(() => newJob());
  const box = progressBox(document.getElementById("results"), state.method ? `translating and computing ${state.method}` :
    "translating", controller, jobs);
  const results = await Promise.all(names.map((model, k) => api("api/translate", { method: "POST", signal: controller.signal,
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ text, model, beam, heads: true, target,
      method: methodFor(model, state.method), job: jobs[k] }) }, (seconds) => box.busy(seconds))
    .catch((e) => ({ error: e.name === "AbortError" ? "cancelled" : e.message })).finally(() => box.finish(jobs[k]))));
  box.stop();
  if (run !== translateRun) return;
  if (results.every((r) => r.error === "cancelled")) {
    document.getElementById("results").replaceChildren(el("p", { class: "status cancelled" }, "cancelled")); return; }
  const failed = results.find((r) => r.error);
  if (failed) err.textContent = failed.error;
  state.translations = results.filter((r) => !r.error);
  redrawTranslations();
}

// a file as a data: URL (base64), what /api/caption takes as "image"
function readDataUrl(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result); r.onerror = () => reject(new Error("could not read the file"));
    r.readAsDataURL(file);
  });
}

let captionRun = 0, captionAbort = null;
async function captionAll(upload) {
  const run = ++captionRun;
  const err = document.getElementById("caption-error"); err.textContent = "";
  const names = state.models.filter((m) => m.task === "captioning").map((m) => m.name);
  const scene = document.getElementById("scene").value;
  if (captionAbort) captionAbort.abort();
  const controller = captionAbort = new AbortController(), jobs = names.map(() => newJob());
  const one = (model, job) => {
    const method = methodFor(model, state.captionMethod);
    // JSON only, like every route (an upload as a data: URL): another site's page cannot send it unasked
    const what = upload ? readDataUrl(upload).then((image) => ({ image })) : Promise.resolve({ scene: +scene });
    return what.then((body) => api("api/caption", { method: "POST", headers: { "Content-Type": "application/json" },
      signal: controller.signal, body: JSON.stringify({ ...body, model, method, job }) }, (seconds) => box.busy(seconds)));
  };
  const box = progressBox(document.getElementById("captions"), state.captionMethod ?
    `captioning and computing ${state.captionMethod}` : "captioning", controller, jobs);
  const results = await Promise.all(names.map((m, k) => one(m, jobs[k])
    .catch((e) => ({ error: e.name === "AbortError" ? "cancelled" : e.message })).finally(() => box.finish(jobs[k]))));
  box.stop();
  if (run !== captionRun) return;
  if (results.every((r) => r.error === "cancelled")) {
    document.getElementById("captions").replaceChildren(el("p", { class: "status cancelled" }, "cancelled")); return; }
  const failed = results.find((r) => r.error);
  if (failed) err.textContent = failed.error;
  state.captions = results.filter((r) => !r.error);
  redrawCaptions();
}

async function init() {
  document.getElementById("words").addEventListener("change", (e) => { state.words = e.target.checked; redrawTranslations(); });
  if (DATA) {
    document.body.classList.add("offline");
    state.translations = DATA.translations || []; state.captions = DATA.captions || [];
    redrawTranslations(); redrawCaptions();
    if (!state.captions.length) document.getElementById("caption-panel").hidden = true;
    if (!state.translations.length) document.getElementById("translate-panel").hidden = true;
    const pairs = [...new Set(state.translations.map((p) => pairName(pairOf(p))))];
    if (pairs.length) document.getElementById("translate-heading").textContent = translateHeading(pairs.filter(Boolean).join(", "));
    return;
  }
  state.models = (await api("api/models")).models;
  const picker = document.getElementById("method"), capPicker = document.getElementById("caption-method");
  fillMethodPicker(picker, "translation"); fillMethodPicker(capPicker, "captioning");
  picker.addEventListener("change", () => { state.method = picker.value; translateAll(); });
  capPicker.addEventListener("change", () => { state.captionMethod = capPicker.value; captionAll(null); });
  // the heading, the example and the sentence picker come from the chosen pair's first model and its corpus
  const translators = state.models.filter((m) => m.task === "translation");
  const first = translators.find(named) || translators[0];  // a model that names its languages, if any does
  const pairs = first ? [...new Set(translators.filter(named).map(pairOf))] : [];
  if (first && !pairs.length) pairs.push(pairOf(first));
  const textBox = document.getElementById("text"), pairSel = document.getElementById("pair");
  let versesP = Promise.resolve([]);
  if (first) {
    state.pair = pairOf(first);
    pairs.forEach((k) => pairSel.append(el("option", { value: k }, pairName(k) || "languages not named")));
    document.getElementById("pair-picker").hidden = pairs.length < 2;
    document.getElementById("translate-heading").textContent = translateHeading(pairName(state.pair));
    versesP = versesOf(first);
    // the built-in example is a Spanish verse: for another corpus, its own first one, if it is here
    if (first.corpus !== "bible") showExample(first, await versesP, true);
    pairSel.addEventListener("change", async () => {  // another pair: its heading, its verses, its first verse
      state.pair = pairSel.value;
      const m = state.models.find((x) => x.task === "translation" && pairOf(x) === state.pair);
      document.getElementById("translate-heading").textContent = translateHeading(pairName(state.pair));
      const vs = await versesOf(m);
      fillVerses(vs);
      showExample(m, vs);
      const ref = document.getElementById("reference");
      ref.textContent = vs.length ? `reference: ${vs[0].reference}` : ""; ref.dataset.text = vs.length ? vs[0].reference : "";
      document.getElementById("verse").value = vs.length ? "0" : "";
      if (textBox.value.trim()) translateAll();
    });
  }
  // translate at once; the verse and scene lists fill in meanwhile (scenes may be prepared on first use)
  document.getElementById("force").addEventListener("change", translateAll);
  document.getElementById("translate").addEventListener("click", translateAll);
  if (!first) document.getElementById("translate-panel").hidden = true;
  else if (textBox.value.trim()) translateAll();
  if (state.models.some((m) => m.task === "captioning")) {
    document.getElementById("caption-btn").addEventListener("click", () => captionAll(null));
    document.getElementById("upload").addEventListener("change", (e) => { if (e.target.files[0]) captionAll(e.target.files[0]); });
    api("api/scenes").then((r) => r.scenes.forEach((sc) => document.getElementById("scene").append(
      el("option", { value: sc.index }, `#${sc.index}: ${sc.caption}`))))
      .catch((e) => { document.getElementById("caption-error").textContent = `no test scenes: ${e.message}`; });
  } else document.getElementById("caption-panel").hidden = true;
  const verseSel = document.getElementById("verse"), ref = document.getElementById("reference");
  fillVerses(await versesP);
  verseSel.addEventListener("change", () => {
    const v = state.verses[+verseSel.value];
    ref.textContent = v ? `reference: ${v.reference}` : "";
    ref.dataset.text = v ? v.reference : "";
    if (v) { document.getElementById("text").value = v.source; translateAll(); }
  });
  document.getElementById("text").addEventListener("input", () => { ref.textContent = ""; ref.dataset.text = ""; });
}

// held-out test sentences of a model's corpus, its sources in the model's language ([] when not here)
function versesOf(model) {
  return api(`api/verses?model=${encodeURIComponent(model.name)}`).then((r) => r.verses).catch(() => []);
}
// the first held-out sentence as the text to translate, and a placeholder in the model's source language
// (at start, a text the user typed while the verses were fetched is kept: only the built-in example is replaced)
function showExample(model, verses, keepTyped = false) {
  const textBox = document.getElementById("text");
  const typed = textBox.value.trim() && textBox.value !== textBox.defaultValue;
  if (!(keepTyped && typed)) textBox.value = verses.length ? verses[0].source : "";
  textBox.placeholder = `Type a sentence in ${langName(model.src_lang)}…`;
}
function fillVerses(verses) {
  state.verses = verses;
  const verseSel = document.getElementById("verse");
  verseSel.replaceChildren(el("option", { value: "" }, "(type your own)"), ...verses.map((v, i) => el("option", { value: i },
    `${v.ref} (${v.source.split(" ").length} words${v.gold ? ", gold links" : ""})`)));
  document.getElementById("verse-picker").hidden = !verses.length;  // only for a corpus with a test split here
}

init().catch((e) => { document.getElementById("error").textContent = `could not start: ${e.message}`; });
