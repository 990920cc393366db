// attnkit explorer: one attention head at one query, step by step (/api/head-step). The server sends q_i, K,
// V, the mask row, the scale and the model's own row; everything below is recomputed here, in the page, as
// the knobs turn (no request): the temperature T (e_j / T), the √d scale on or off, a key masked by a click
// on its row, two keys swapped (their k, v, token and mask exchanged: the rows of the products permute, the
// output does not). An additive head (RNNsearch: e_j = vᵀ tanh(W s + U h_j)) sends its scores e_j instead
// of q and K; the temperature and the mask apply to them the same way.
"use strict";

(function () {
  const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
  const norm = (a) => Math.sqrt(dot(a, a));

  // the step recomputed: raw score s_j, e_j (scaled, over T), the weights α, ‖α_j v_j‖ and the output Σ α_j v_j
  function compute(a, k) {
    const n = a.key_pieces.length, order = k.order;
    const raw = order.map((j) => (a.score === "dot" ? dot(a.q, a.keys[j]) : a.scores[j]));
    const factor = (a.score === "dot" && k.sqrt ? a.scale : 1) / k.temperature;
    const e = raw.map((s) => s * factor);
    const allowed = order.map((j, r) => a.mask[j] && !k.masked.has(r));
    const top = Math.max(...e.filter((_, r) => allowed[r]));
    const ex = e.map((x, r) => (allowed[r] ? Math.exp(x - top) : 0));
    const z = ex.reduce((s, x) => s + x, 0);
    const w = ex.map((x) => (z > 0 ? x / z : 0));
    const d = a.values[0].length, out = new Array(d).fill(0);
    order.forEach((j, r) => { for (let c = 0; c < d; c++) out[c] += w[r] * a.values[j][c]; });
    const contrib = order.map((j, r) => w[r] * norm(a.values[j]));
    return { n, raw, e, allowed, w, out, contrib };
  }

  // a vector as a strip of small cells: blue positive, red negative, scaled by the largest magnitude of `ref`
  function strip(vec, ref = vec, px = 4, cls = "hs-strip") {
    const c = document.createElement("canvas"), big = Math.max(1e-12, ...ref.map(Math.abs));
    c.width = vec.length * px; c.height = 10; c.className = cls;
    const g = c.getContext("2d");
    vec.forEach((x, i) => {
      const t = Math.min(1, Math.abs(x) / big);
      g.fillStyle = x >= 0 ? `rgba(31,119,180,${t.toFixed(3)})` : `rgba(214,39,40,${t.toFixed(3)})`;
      g.fillRect(i * px, 0, px, 10);
    });
    c.title = vec.map((x) => fmt(x, 3)).join(" ");
    return c;
  }

  function concatBar(a) { // Concat(head_1..head_H) before W_O, this head's columns highlighted
    if (a.q == null && a.num_heads === 1) // one additive attention (RNNsearch): no heads to join, no W_O
      return el("div", { class: "label" }, `one attention, no heads: o is the context c_t (${a.width} wide) the decoder reads`);
    const bar = el("div", { class: "hs-concat", title: `Concat(head_1..head_${a.num_heads}) W_O: ${a.width} columns` });
    const per = a.width / a.num_heads;
    for (let h = 0; h < a.num_heads; h++) {
      const mine = h === a.head - 1;
      bar.append(el("span", { class: mine ? "hs-seg hs-mine" : "hs-seg", style: `flex: ${per}` }, mine ? `head ${a.head}` : ""));
    }
    return el("div", {}, el("div", { class: "label" }, `the head's output is columns ${a.columns[0]}–${a.columns[1] - 1} ` +
      `of the concatenation (${a.width} wide) that W_O reads`), bar);
  }

  function render(box, a) {
    const k = { temperature: 1, sqrt: true, masked: new Set(), order: a.key_pieces.map((_, j) => j) };
    const piece = (p) => clean(p);
    const head = el("div", { class: "hs-head" },
      el("strong", {}, `${a.model}: ${a.site === "self" ? "self-attention" : a.site}, layer ${a.layer}, head ${a.head}` +
        `${a.kv_group ? ` (key/value group ${a.kv_group})` : ""}, query ${a.query} “${piece(a.query_pieces[a.query - 1])}”`),
      el("div", { class: "formula" }, a.score === "dot"
        ? `e_j = q_i · k_j × ${fmt(a.scale, 4)} (1/√d_h, d_h = ${a.q.length}) / T;  α = softmax(e + M);  o = Σ_j α_j v_j`
        : `${a.formula} (additive, Bahdanau et al. 2015) / T;  α = softmax(e + M);  o = Σ_j α_j h_j`));
    const temp = el("input", { type: "range", class: "hs-temp", min: 0.1, max: 5, step: 0.1, value: 1 });
    const tempShown = el("span", { class: "hs-temp-value" }, "1.0");
    const sqrt = el("input", { type: "checkbox", class: "hs-sqrt", checked: "" });
    if (a.score !== "dot") sqrt.disabled = true;
    const options = () => a.key_pieces.map((p, j) => el("option", { value: j }, `${j + 1} ${piece(p)}`));
    const swapA = el("select", { class: "hs-swap-a" }, options()), swapB = el("select", { class: "hs-swap-b" }, options());
    if (a.key_pieces.length > 1) swapB.value = "1";
    const knobs = el("div", { class: "controls hs-knobs" },
      el("label", {}, "temperature T ", temp, tempShown),
      el("label", {}, sqrt, a.score === "dot" ? " scale by 1/√d_h" : " (no √d scale: additive scores)"),
      el("label", {}, "swap keys ", swapA, " and ", swapB),
      el("button", { class: "hs-swap", onclick: () => {
        const i = +swapA.value, j = +swapB.value;
        [k.order[i], k.order[j]] = [k.order[j], k.order[i]];
        const mi = k.masked.has(i), mj = k.masked.has(j);
        k.masked.delete(i); k.masked.delete(j); if (mi) k.masked.add(j); if (mj) k.masked.add(i);
        draw(); } }, "swap"),
      el("button", { class: "hs-reset", onclick: () => {
        k.temperature = 1; temp.value = 1; k.sqrt = true; sqrt.checked = true; k.masked.clear();
        k.order = a.key_pieces.map((_, j) => j); draw(); } }, "reset"));
    const note = el("div", { class: "rule hs-note" }, `swap: ${a.position_note}`);
    const check = el("div", { class: "status hs-check" });
    const qRow = a.q ? el("div", { class: "hs-q" }, el("span", { class: "label" }, "q_i "), strip(a.q)) : el("span");
    const table = el("table", { class: "hs-table" });
    const outBox = el("div", { class: "hs-out" });
    temp.addEventListener("input", () => { k.temperature = +temp.value; draw(); });
    sqrt.addEventListener("change", () => { k.sqrt = sqrt.checked; draw(); });
    const kRef = a.keys ? a.keys.flat() : [], vRef = a.values.flat();

    function draw() {
      const r = compute(a, k);
      tempShown.textContent = k.temperature.toFixed(1);
      const rows = k.order.map((j, i) => {
        const tr = el("tr", { class: `hs-key${r.allowed[i] ? "" : " hs-masked"}`, "data-j": i, "data-key": j,
          "data-w": r.w[i], "data-e": r.e[i], "data-raw": r.raw[i], title: "click to mask or unmask this key" },
        el("td", {}, `${i + 1}`), el("td", { class: "hs-tok" }, piece(a.key_pieces[j])),
        el("td", {}, a.keys ? strip(a.keys[j], kRef, 2) : ""),
        el("td", {}, fmt(r.raw[i], 4)), el("td", {}, fmt(r.e[i], 4)),
        el("td", {}, !a.mask[j] ? "model" : k.masked.has(i) ? "you" : ""),
        el("td", { class: "hs-w", style: `background: ${blue(r.w[i])}` }, fmt(r.w[i], 4)),
        el("td", {}, strip(a.values[j].map((x) => r.w[i] * x), vRef, 2)),
        el("td", { class: "hs-norm" }, fmt(r.contrib[i], 4)));
        tr.addEventListener("click", () => { if (k.masked.has(i)) k.masked.delete(i); else k.masked.add(i); draw(); });
        return tr;
      });
      table.replaceChildren(el("tr", {}, ...["j", "key", a.keys ? "k_j" : "", a.score === "dot" ? "q·k_j" : "e_j",
        "e_j (scaled, /T)", "masked", "α_j", "α_j v_j", "‖α_j v_j‖"].map((h) => el("th", {}, h))), ...rows);
      outBox.replaceChildren(el("span", { class: "label" }, "o = Σ α_j v_j "), strip(r.out, vRef),
        el("span", { class: "hs-out-norm" }, ` ‖o‖ = ${fmt(norm(r.out), 4)}`));
      outBox.dataset.out = JSON.stringify(r.out);
      const plain = k.temperature === 1 && k.sqrt && !k.masked.size && k.order.every((j, i) => j === i);
      if (plain) {
        const gap = Math.max(...r.w.map((w, i) => Math.abs(w - a.weights[i])));
        const og = Math.max(...r.out.map((x, i) => Math.abs(x - a.output[i])));
        check.textContent = `recomputed here: max |α − the model's own row| = ${gap.toExponential(1)}, ` +
          `max |o − the model's head output| = ${og.toExponential(1)}`;
      } else check.textContent = "knobs turned: the row differs from the model's by design (reset to compare)";
    }
    box.replaceChildren(head, knobs, note, qRow, el("div", { class: "hs-scroll" }, table), outBox, concatBar(a), check);
    box.hidden = false;
    draw();
    return box;
  }

  // ask the server for the step (body: model, text | source/target, site, layer, head, query) and draw it
  async function open(box, body) {
    box.hidden = false;
    box.replaceChildren(el("span", { class: "status" }, "reading the head…"));
    try {
      const a = await api("api/head-step", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body) });
      return render(box, a);
    } catch (e) { box.replaceChildren(el("div", { class: "error", role: "alert" }, e.message)); }
    return box;
  }

  // the control under an enlarged head: a query picker and the button; a click on a cell picks its row
  function control(step, rows) {
    const box = el("div", { class: "hs-box", hidden: "" });
    const pickQ = el("select", { class: "hs-query" }, rows.map((p, i) => el("option", { value: i + 1 }, `${i + 1} ${p}`)));
    const offline = typeof DATA !== "undefined" && DATA;
    const go = (q) => {
      pickQ.value = q;
      if (!offline) return open(box, { ...step, query: +q });
      const a = (DATA.head_steps || []).find((s) => s.model === step.model && s.site === step.site &&
        s.layer === step.layer && s.head === step.head && s.query === +q);
      if (a) return render(box, a);
      box.hidden = false;
      box.replaceChildren(el("div", { class: "status" }, "this export holds no step-through of this head and query"));
    };
    const bar = el("div", { class: "controls hs-open-bar" }, el("label", {}, "Step through this head at query ", pickQ),
      el("button", { class: "hs-open", onclick: () => go(pickQ.value) }, "step through"));
    return { bar, box, go };
  }

  // an RNNsearch card (one additive attention, no heads grid): step through one decoder step of the translation
  // it shows, e_tj = vᵀ tanh(W s_{t-1} + U h_j) → α_tj → c_t (/api/head-step, site "cross")
  function rnnControl(p) {
    const rows = p.target_pieces.map((t) => t.replace(/▁/g, " ").trim() || t);
    const ctl = control({ model: p.model, source: p.source, target: p.translation, site: "cross", layer: 1, head: 1 }, rows);
    return el("details", { class: "hs-rnn" },
      el("summary", {}, "Step through one decoder step: e_tj = vᵀ tanh(W s + U h_j) → α → c_t"), ctl.bar, ctl.box);
  }

  window.AttnkitHeadStep = { compute, render, open, control, rnnControl };

  // an exported page (write_explorer_html(head_steps=...)): its step-throughs drawn at once, the knobs live
  const steps = typeof DATA !== "undefined" && DATA ? DATA.head_steps || [] : [];
  if (steps.length) {
    const panel = el("section", { class: "panel", id: "head-step-panel" }, el("h2", {}, "One head, step by step"));
    steps.forEach((a) => panel.append(render(el("div", { class: "hs-box" }), a)));
    document.querySelector("main").append(panel);
  }
})();
