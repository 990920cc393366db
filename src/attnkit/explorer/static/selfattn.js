// attnkit explorer: encoder-only and decoder-only models (BERT, GPT-2, Llama): every layer's and head's
// self-attention (bertviz's model view), the head means and the rollout, from /api/self-attention (the
// head means first, then one layer's heads per request), and a decoder-only model's continuation with
// its attributions from /api/generate (drawn as a translation card: context → continuation), and the
// information-flow graph of the text's next token from /api/flow/stream (drawn layer by layer by static/flow.js: layers × positions,
// a threshold slider, an edge's click shows its head's attention row, a block's click its logit lens), and
// every head on N random tokens repeated twice from /api/repeated, the induction stripe outlined and each
// head's prefix-matching score in its title (Olsson et al. 2022); static/heads.js adds the ablation panel and the
// patching heat map.
"use strict";

const SA = { models: [], run: 0 };

function saHeadsGrid(p, pieces) { // L rows × (H heads + the mean); a layer's heads fill in when they arrive
  // a payload's "layer" is a layer number (1-based); data-layer and data-head are the grid's 0-based positions
  const L = p.num_layers, H = p.num_heads;
  const grid = el("div", { class: "heads-grid sa-grid", "data-layers": L, "data-heads": H,
    style: `grid-template-columns: 60px repeat(${H + 1}, max-content)` });
  grid.append(el("span", {}, ""), ...Array.from({ length: H }, (_, h) => el("span", { class: "label" }, saHeadName(p, h))),
    el("span", { class: "label" }, "mean"));
  const slots = [];
  for (let l = 0; l < L; l++) {
    grid.append(el("span", { class: "label" }, `layer ${l + 1}`));
    slots.push(Array.from({ length: H }, (_, h) => {
      const s = el("span", { class: "pending", "data-layer": l, "data-head": h }, "…"); grid.append(s); return s; }));
    const mean = p.head_mean ? p.head_mean[l] : null;
    if (mean) grid.append(saCanvas(mean, pieces, `layer ${l + 1}, mean of the heads`, l, "mean"));
    else grid.append(el("span", {}, ""));
  }
  const fill = (layer) => layer.heads.forEach((mat, h) => slots[layer.layer - 1][h].replaceWith(
    saCanvas(mat, pieces, `layer ${layer.layer}, ${saHeadName(p, h, true)}${saScores(p, layer.layer, h)}`,
      layer.layer - 1, h, saMarks(p, layer.layer, h),
      p.repeated ? null : { model: p.model, text: p.text, site: "self", layer: layer.layer, head: h + 1 })));
  (p.layers || []).forEach(fill);
  return { grid, fill };
}

// a head's label (1-based); under grouped-query attention with its key/value group: "head 3 · kv 2"
// ("head 3, key/value group 2" in a title)
function saHeadName(p, h, long) {
  const g = p.kv_groups ? p.kv_groups[h] : null;
  if (g == null) return `head ${h + 1}`;
  return long ? `head ${h + 1}, key/value group ${g}` : `head ${h + 1} · kv ${g}`;
}

// random tokens repeated twice (/api/repeated): a head's prefix-matching and previous-token scores for its title
function saScores(p, layer, h) {
  if (!p.repeated) return "";
  const s = p.repeated.heads.find((x) => x.layer === layer && x.head === h + 1);
  return s ? ` · prefix-matching ${fmt(s.prefix_matching)}, previous-token ${fmt(s.previous_token)}` : "";
}

// the cells to outline on a repeated sequence's maps, [key, query] 0-based as matrixSvg's gold links: the
// induction stripe (key = query − N + 1, red squares) and the previous-token diagonal (orange dots); the best
// induction head is flagged
function saMarks(p, layer, h) {
  const r = p.repeated;
  if (!r) return null;
  const cells = (list) => list.map(([q, k]) => [k - 1, q - 1]);
  const stripe = cells(r.stripe);
  return { sure: stripe, possible: [...stripe, ...cells(r.previous_diagonal)],
    best: r.best.layer === layer && r.best.head === h + 1 };
}

function saCanvas(mat, pieces, title, layer, head, marks = null, step = null) { // step: /api/head-step's body
  const n = Math.max(1, mat.length);
  const px = marks ? Math.max(3, Math.min(6, Math.floor(160 / n))) : Math.max(2, Math.min(6, Math.floor(90 / n)));
  const c = heatCanvas(mat, px);
  if (marks) { // thin outlines: red on the induction stripe, orange on the previous-token diagonal
    const g = c.getContext("2d"), stripe = new Set(marks.sure.map(([k, q]) => `${k}-${q}`));
    g.lineWidth = 1;
    marks.possible.forEach(([k, q]) => {
      g.strokeStyle = stripe.has(`${k}-${q}`) ? "rgba(214,39,40,0.75)" : "rgba(255,127,14,0.6)";
      g.strokeRect(k * px + 0.5, q * px + 0.5, px - 1, px - 1);
    });
    if (marks.best) c.classList.add("sa-best");
  }
  c.dataset.layer = layer; c.dataset.head = head; c.title = `self-attention, ${title} (click to enlarge)`;
  const how = marks ? "; red squares: the induction stripe, orange dots: the previous token" : "";
  c.addEventListener("click", () => enlarge(`self-attention, ${title}: rows = query piece, columns = key piece${how}`,
    mat, pieces, pieces, marks, step));
  return c;
}

function renderSelfAttention(p, info) {
  const pieces = p.pieces.map(clean);
  const card = el("div", { class: "card sa-card", "data-model": p.model });
  card.append(el("h3", {}, `${p.model} `, el("span", { class: "score" },
    `${p.kind} · ${p.num_layers} layers × ${p.num_heads} heads${p.kv_groups ? ` in ${new Set(p.kv_groups).size} key/value groups` : ""} · ${p.causal ? "decoder-only (causal)" : "encoder-only (bidirectional)"}`)));
  const status = el("div", { class: "status" }, "hover a piece to see where it attends in the last layer (head mean)");
  const row = el("div", { class: "tokens sa-pieces" }, pieces.map((t, i) => el("span", { class: "tok", "data-i": i }, t)));
  const last = p.head_mean ? p.head_mean[p.head_mean.length - 1] : null;
  if (last) row.querySelectorAll(".tok").forEach((t) => t.addEventListener("mouseenter", () => {
    const i = +t.dataset.i;
    row.querySelectorAll(".tok").forEach((u, j) => { u.style.background = blue(last[i][j]); u.classList.toggle("focus", j === i); });
    status.textContent = `“${pieces[i]}” attends most to “${pieces[argmax(last[i])]}” (${fmt(Math.max(...last[i]))})`;
  }));
  card.append(el("div", { class: "label" }, "pieces (special tokens included)"), row, status);
  if (p.repeated) { // random tokens repeated twice: name the best induction head (Olsson et al. 2022)
    const r = p.repeated, b = r.best;
    card.append(el("div", { class: "sa-best-head", "data-layer": b.layer, "data-head": b.head },
      `${r.length} random tokens (seed ${r.seed}), then the same again: best induction head layer ${b.layer}, ` +
      `head ${b.head} (prefix-matching ${fmt(b.prefix_matching)}); outlined on every map: the induction stripe ` +
      `(red, key = query − ${r.length - 1}) and the previous-token diagonal (orange)`));
  }
  const { grid, fill } = saHeadsGrid(p, pieces);
  card.append(el("details", { class: "heads", open: "" }, el("summary", {}, "Every layer and head (click one to enlarge)"), grid));
  if (p.rollout) {
    const c = heatCanvas(p.rollout, 4); c.classList.add("sa-rollout"); c.title = "attention rollout";
    c.addEventListener("click", () => enlarge("attention rollout (Abnar & Zuidema 2020)", p.rollout, pieces, pieces));
    card.append(el("div", { class: "label" }, `attention rollout: ${p.rollout_rule}`), c);
  }
  if (info && info.generates) card.append(saGenerateBox(p, info), saFlowBox(p), saRepeatedBox(p));
  if (info && info.generates && window.AttnkitHeads) card.append(window.AttnkitHeads.textPanel(card, p)); // /api/ablate
  return { card, fill };
}

function saRepeatedBox(p) { // every head on random tokens repeated twice: the induction stripe (/api/repeated)
  const box = el("div", { class: "sa-repeated" });
  const n = el("input", { type: "number", class: "sa-repeat-n", min: 2, max: 256, value: 20 });
  const seed = el("input", { type: "number", class: "sa-repeat-seed", min: 0, value: 0 });
  const out = el("div", { class: "results sa-repeat-out" }), err = el("div", { class: "error", role: "alert" });
  const go = async () => {
    err.textContent = ""; out.replaceChildren(el("span", { class: "status" }, "reading…"));
    try {
      const r = await api("api/repeated", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model: p.model, length: +n.value, seed: +seed.value }) });
      out.replaceChildren(renderSelfAttention(r, null).card);
    } catch (e) { out.replaceChildren(); err.textContent = e.message; }
  };
  // the same N and seed: which heads carry the induction answer, by patching (static/heads.js, /api/patching)
  const patch = window.AttnkitHeads ? window.AttnkitHeads.patchingBox(p, n, seed) : null;
  box.append(el("div", { class: "controls" }, el("label", {}, "Random tokens N ", n), el("label", {}, "Seed ", seed),
    el("button", { class: "sa-repeat-go", onclick: go }, "Repeated random tokens (the induction stripe)"),
    ...(patch ? [patch.button] : [])), err, ...(patch ? [patch.box] : []), out);
  return box;
}

// A context and what the model wrote after it (/api/generate's schema.Continuation), drawn as a translation card:
// rows = the written pieces, columns = the context's; its HTML export keeps the continuation itself
function renderContinuation(c) {
  const card = renderTranslation({ ...c, source: c.context, translation: c.written, source_pieces: c.context_pieces,
    target_pieces: c.written_pieces, src_lang: "context", tgt_lang: "continuation", beam: 1, forced: false, gold: null,
    diagnostics: null, steps: null, heads: null, note: null });
  const exports = card.querySelector(":scope > .exports");
  if (exports) exports.replaceWith(exportsFor(card, c, "continuation"));
  return card;
}

function saGenerateBox(p, info) { // a decoder-only model writes on; each written token attributed to the ones before
  const box = el("div", { class: "sa-generate" });
  const method = el("select", { class: "sa-method" }, el("option", { value: "" }, "attention (last layer, head mean)"),
    ...(info.methods || []).filter((m) => m.name !== "attention").map((m) => el("option", { value: m.name,
      title: `${m.title} (${m.reference})` }, `${m.name}${m.needs_gradients ? " (gradients)" : ""}`)));
  const tokens = el("input", { type: "number", class: "sa-tokens", min: 1, max: 20, value: 8 });
  const out = el("div", { class: "results sa-continuation" }), err = el("div", { class: "error", role: "alert" });
  const go = async () => {
    err.textContent = ""; out.replaceChildren(el("span", { class: "status" }, "writing…"));
    try {
      const r = await api("api/generate", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ text: p.text, model: p.model, max_new_tokens: +tokens.value, method: method.value || null }) });
      out.replaceChildren(renderContinuation(r));
    } catch (e) { out.replaceChildren(); err.textContent = e.message; }
  };
  box.append(el("div", { class: "controls" }, el("label", {}, "New tokens ", tokens), el("label", {}, "Method ", method),
    el("button", { class: "sa-continue", onclick: go }, "Continue the text")), err, out);
  return box;
}

function saFlowBox(p) { // the information-flow routes of the text's last prediction (Ferrando & Voita 2024), static/flow.js
  const box = el("div", { class: "sa-flow" });
  const threshold = el("input", { type: "number", class: "sa-flow-threshold", min: 0.01, max: 1, step: 0.01, value: 0.04 });
  const out = el("div", { class: "sa-flow-graph" }), err = el("div", { class: "error", role: "alert" });
  const go = async () => {
    err.textContent = ""; out.replaceChildren(el("span", { class: "status" }, "tracing…"));
    delete out.dataset.done;
    try { // streamed: each layer is drawn as the server finishes it (static/flow.js)
      await window.AttnkitFlow.stream(out, "api/flow/stream", { text: p.text, model: p.model, view: "routes", threshold: +threshold.value });
    } catch (e) { out.replaceChildren(); err.textContent = e.message; }
  };
  box.append(el("div", { class: "controls" }, el("label", {}, "Threshold ", threshold),
    el("button", { class: "sa-flow-go", onclick: go }, "Information-flow graph of the next token")), err, out);
  return box;
}

async function selfAttentionAll() {
  const run = ++SA.run;
  const text = document.getElementById("sa-text").value;
  const err = document.getElementById("sa-error"), results = document.getElementById("sa-results");
  err.textContent = ""; results.replaceChildren(el("span", { class: "status" }, "reading…"));
  const cards = [];
  for (const info of SA.models) {
    try {
      const p = await api("api/self-attention", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ text, model: info.name }) });
      if (run !== SA.run) return;
      cards.push({ p, info, ...renderSelfAttention(p, info) });
    } catch (e) { err.textContent = e.message; }
  }
  results.replaceChildren(...cards.map((c) => c.card));
  for (const c of cards) for (let l = 1; l <= c.p.num_layers; l++) { // one layer's heads per answer, in order (1-based)
    try {
      const r = await api("api/self-attention", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ text, model: c.info.name, layer: l }) });
      if (run !== SA.run) return;
      r.layers.forEach(c.fill);
    } catch (e) { err.textContent = e.message; return; }
  }
}

// The built-in example (index.html's) is a Spanish verse; a language model that names its language (an English
// one: lm-4l-en) is offered a text in it instead, unless the user has typed one already.
const EXAMPLES = { en: "In the beginning, God created the heavens and the earth." };
function exampleInModelsLanguage(models) {
  const box = document.getElementById("sa-text");
  const lang = (models.find((m) => m.lang) || {}).lang;
  if (!lang || lang === "es" || box.value !== box.defaultValue) return;
  box.value = EXAMPLES[lang] || "";
  box.placeholder = `Type a text in ${langName(lang)}…`;
}

async function initSelfAttention() {
  const panel = document.getElementById("self-attention-panel");
  if (DATA) {
    const items = DATA.self_attention || [], continuations = DATA.continuations || [];
    panel.hidden = !items.length && !continuations.length;
    document.getElementById("sa-results").replaceChildren(...items.map((p) => renderSelfAttention(p, null).card),
      ...continuations.map(renderContinuation));
    return;
  }
  SA.models = (await api("api/models")).models.filter((m) => m.task === "self-attention");
  if (!SA.models.length) { panel.hidden = true; return; }
  exampleInModelsLanguage(SA.models);
  document.getElementById("sa-read").addEventListener("click", selfAttentionAll);
  selfAttentionAll();
}

initSelfAttention().catch((e) => { document.getElementById("sa-error").textContent = `could not start: ${e.message}`; });
