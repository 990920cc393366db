// attnkit explorer: head interventions. In a heads grid (a translator's card, a language model's card), a
// shift-click on a head, or a click with "ablate mode" on, marks it; the marked heads are ablated together
// (/api/ablate) and the panel shows the clean and the ablated output, the words that differ highlighted, and the
// forced log-likelihood change (Michel et al. 2019; Voita et al. 2019). A language model's card also draws the
// activation-patching (L, H) map and the path-patching table into its best induction head on repeated random
// tokens (/api/patching, Wang et al. 2022), and an enlarged head shows its roles and the QK decomposition of its
// most-attended key at a query (/api/head-why, Elhage et al. 2021). Live pages only: every number is the server's.
"use strict";

(function () {
  const post = (path, body) => api(path, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body) });
  const SITE = { enc_self: "encoder", dec_self: "decoder self", cross: "cross" };

  // the words of a and b, each marked where it is not in their longest common subsequence
  function wordDiff(a, b) {
    const x = a.split(/\s+/).filter(Boolean), y = b.split(/\s+/).filter(Boolean);
    const L = Array.from({ length: x.length + 1 }, () => new Array(y.length + 1).fill(0));
    for (let i = x.length - 1; i >= 0; i--) for (let j = y.length - 1; j >= 0; j--)
      L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    const kx = new Array(x.length).fill(false), ky = new Array(y.length).fill(false);
    for (let i = 0, j = 0; i < x.length && j < y.length;) {
      if (x[i] === y[j]) { kx[i] = ky[j] = true; i++; j++; } else if (L[i + 1][j] >= L[i][j + 1]) i++; else j++;
    }
    const words = (w, keep) => w.flatMap((t, i) => [keep[i] ? t : el("mark", { class: "ablate-diff" }, t), " "]);
    return [words(x, kx), words(y, ky)];
  }

  const signed = (v) => `${v >= 0 ? "+" : ""}${fmt(v, 3)}`;

  function topTable(a) {
    const rows = a.clean_top.map((t, i) => el("tr", {}, el("td", {}, clean(t.piece)), el("td", {}, fmt(t.log_prob)),
      el("td", {}, clean(a.top[i].piece)), el("td", {}, fmt(a.top[i].log_prob))));
    return el("table", { class: "diag ablate-top" }, el("tr", {}, el("th", {}, "next token, clean"), el("th", {}, "log p"),
      el("th", {}, "ablated"), el("th", {}, "log p")), rows);
  }

  function renderAnswer(out, a) {
    const [c, d] = wordDiff(a.clean, a.ablated);
    const heads = a.heads.map((h) => `${h.site} L${h.layer}H${h.head}`).join(", ");
    const forced = a.kind === "translator" ? (a.reference_given ? "the reference" : "the clean translation")
      : "the clean continuation";
    out.replaceChildren(
      el("div", { class: "label" }, `${a.mode}-ablated: ${heads}`),
      el("div", { class: "ablate-row" }, el("span", { class: "label" }, "clean "), el("span", { class: "ablate-clean" }, c)),
      el("div", { class: "ablate-row" }, el("span", { class: "label" }, "ablated "), el("span", { class: "ablate-ablated" }, d)),
      el("div", { class: "ablate-ll", "data-change": a.log_likelihood_change },
        `log-likelihood of ${forced}: ${fmt(a.clean_log_likelihood)} clean, ${fmt(a.log_likelihood)} ablated ` +
        `(${signed(a.log_likelihood_change)} nats)` + (a.clean === a.ablated ? "; the output is the same" : "")),
      ...(a.kind === "language model" ? [el("div", { class: "rule" }, `next token “${clean(a.next_token.piece)}”: ` +
        `log p ${fmt(a.clean_log_prob)} → ${fmt(a.log_prob)} (${signed(a.log_prob_change)})`), topTable(a)] : []));
    out.dataset.ablated = a.ablated; out.dataset.clean = a.clean; out.dataset.done = "1";
  }

  // the ablation panel of one card: body(heads, mode) is the /api/ablate request of the marked heads
  function ablatePanel(card, body) {
    const marked = new Map(); // "site|layer|head" (1-based) → {site, layer, head}
    const toggle = el("input", { type: "checkbox", class: "ablate-toggle" });
    const mode = el("select", { class: "ablate-mode" }, el("option", { value: "zero" }, "zero"),
      el("option", { value: "mean" }, "mean over this input"));
    const list = el("span", { class: "ablate-list" }, "none");
    const out = el("div", { class: "ablate-out" }), err = el("div", { class: "error", role: "alert" });
    let run = 0;
    const go = async () => {
      const mine = ++run;
      err.textContent = ""; delete out.dataset.done;
      list.textContent = marked.size ? [...marked.values()].map((h) => `${h.site} L${h.layer}H${h.head}`).join(", ") : "none";
      if (!marked.size) { out.replaceChildren(); return; }
      out.replaceChildren(el("span", { class: "status" }, "ablating…"));
      try {
        const a = await post("api/ablate", body([...marked.values()], mode.value));
        if (mine === run) renderAnswer(out, a);
      } catch (e) { if (mine === run) { out.replaceChildren(); err.textContent = e.message; } }
    };
    mode.addEventListener("change", go);
    const clear = el("button", { class: "ablate-clear", onclick: () => { marked.clear();
      card.querySelectorAll("canvas.ablated").forEach((c) => c.classList.remove("ablated")); go(); } }, "clear");
    const box = el("details", { class: "ablate-panel", open: "" }, el("summary", {}, "Ablate heads: does the output change?"),
      el("div", { class: "controls" }, el("label", { class: "switch" }, toggle, " ablate mode (a click marks a head; or shift-click)"),
        el("label", {}, "Ablation ", mode), clear),
      el("div", { class: "rule" }, "marked: ", list), err, out);
    card.addEventListener("click", (e) => { // capture: a marking click does not enlarge the head
      const c = e.target.closest && e.target.closest(".heads-grid canvas[data-head]");
      if (!c || c.dataset.head === "mean" || c.closest(".model-card, .sa-card") !== card) return;
      if (!(e.shiftKey || toggle.checked)) return;
      e.stopPropagation(); e.preventDefault();
      const h = { site: SITE[c.dataset.kind] || "self", layer: +c.dataset.layer + 1, head: +c.dataset.head + 1 };
      const key = `${h.site}|${h.layer}|${h.head}`;
      if (marked.has(key)) marked.delete(key); else marked.set(key, h);
      c.classList.toggle("ablated", marked.has(key));
      go();
    }, true);
    return box;
  }

  function translatorPanel(card, p) {
    return ablatePanel(card, (heads, mode) => ({ model: p.model, source: p.source, heads, mode, beam: p.beam }));
  }

  // an RNNsearch card: its one additive attention has no heads, so it is ablated whole (/api/ablate with
  // "cross" 1.1): "zero" sets the context c_t to 0, "mean" sets the weights uniform (c_t the mean annotation)
  function attentionPanel(card, p) {
    const mode = el("select", { class: "ablate-mode" }, el("option", { value: "zero" }, "zero: c_t = 0"),
      el("option", { value: "mean" }, "uniform weights: c_t = the mean annotation"));
    const out = el("div", { class: "ablate-out" }), err = el("div", { class: "error", role: "alert" });
    const go = async () => {
      err.textContent = ""; delete out.dataset.done;
      out.replaceChildren(el("span", { class: "status" }, "ablating…"));
      try {
        renderAnswer(out, await post("api/ablate", { model: p.model, source: p.source, beam: p.beam, mode: mode.value,
          heads: [{ site: "cross", layer: 1, head: 1 }] }));
      } catch (e) { out.replaceChildren(); err.textContent = e.message; }
    };
    const button = el("button", { class: "ablate-attention", onclick: go }, "ablate the attention");
    mode.addEventListener("change", () => { if (out.dataset.done) go(); });
    return el("details", { class: "ablate-panel" }, el("summary", {}, "Ablate the attention: does the output change?"),
      el("div", { class: "controls" }, el("label", {}, "Ablation ", mode), button), err, out);
  }

  function textPanel(card, p) {
    return ablatePanel(card, (heads, mode) => ({ model: p.model, text: p.text, heads, mode, max_new_tokens: 8 }));
  }

  // the (L, H) activation-patching map as a grid of cells with their values, and the path-patching table
  function renderPatching(out, r) {
    const cells = r.heads.cells, L = Math.max(...cells.map((c) => c.layer)), H = Math.max(...cells.map((c) => c.head));
    const big = Math.max(1e-9, ...cells.map((c) => Math.abs(c.effect)));
    const top = cells.reduce((a, c) => (c.effect > a.effect ? c : a));
    const grid = el("table", { class: "patch-grid" }, el("tr", {}, el("th", {}, ""),
      ...Array.from({ length: H }, (_, h) => el("th", {}, `head ${h + 1}`))));
    for (let l = 1; l <= L; l++) grid.append(el("tr", {}, el("th", {}, `layer ${l}`), ...cells.filter((c) => c.layer === l)
      .map((c) => el("td", { class: `patch-cell${c === top ? " patch-max" : ""}`, "data-layer": c.layer, "data-head": c.head,
        "data-effect": c.effect, title: `L${c.layer}H${c.head}: effect ${fmt(c.effect, 4)}, metric ${fmt(c.score, 4)}`,
        style: `background: ${c.effect >= 0 ? `rgba(214,39,40,${(Math.abs(c.effect) / big).toFixed(3)})`
          : `rgba(31,119,180,${(Math.abs(c.effect) / big).toFixed(3)})`}` }, fmt(c.effect, 2)))));
    const noise = r.direction === "noise", ind = r.induction_head;
    const kids = [el("div", { class: "rule" }, `activation patching (${r.direction}): ` + (noise
      ? "each head's output from the corrupted run (first copy redrawn) patched into the clean run; effect = the share of the answer lost"
      : "each head's clean output patched into the corrupted run; effect = the share of the answer restored") +
      `; metric log p(target) at the last position, clean ${fmt(r.heads.clean)}, corrupted ${fmt(r.heads.corrupt)}`),
    grid, el("div", { class: "patch-largest" }, `largest: L${top.layer}H${top.head} (${fmt(top.effect, 4)})`)];
    if (r.paths) {
      const by = Object.fromEntries(["q", "k", "v"].map((v) => [v, Object.fromEntries(r.paths[v].senders
        .map((s) => [`${s.layer}.${s.head}`, s.effect]))]));
      const senders = Object.keys(by.k).sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
      kids.push(el("div", { class: "rule" }, `path patching into the best induction head L${ind.layer}H${ind.head} ` +
        `(prefix matching ${fmt(ind.prefix_matching, 2)}): each earlier head's ${noise ? "corrupted" : "clean"} output ` +
        "reaching only its query (q), key (k) or value (v) input (Wang et al. 2022)"),
      el("table", { class: "diag patch-paths" }, el("tr", {}, el("th", {}, "sender"), el("th", {}, "q"), el("th", {}, "k"),
        el("th", {}, "v")), senders.map((s) => el("tr", { "data-sender": s }, el("td", {}, `L${s.replace(".", "H")}`),
        ...["q", "k", "v"].map((v) => el("td", {}, fmt(by[v][s], 3)))))));
    }
    out.replaceChildren(...kids);
    out.dataset.done = "1";
  }

  function patchingBox(p, n, seed) { // beside the repeated-tokens controls: the same N and seed
    const out = el("div", { class: "patch-out" }), err = el("div", { class: "error", role: "alert" });
    const go = async () => {
      err.textContent = ""; delete out.dataset.done; out.replaceChildren(el("span", { class: "status" }, "patching…"));
      try { renderPatching(out, await post("api/patching", { model: p.model, length: +n.value, seed: +seed.value })); }
      catch (e) { out.replaceChildren(); err.textContent = e.message; }
    };
    return { button: el("button", { class: "patch-go", onclick: go }, "Patching heat map (which heads carry the answer)"),
      box: el("div", { class: "sa-patching" }, err, out) };
  }

  // under an enlarged head of a text: its roles and the QK decomposition at a query (default the last)
  function whyBox(step, rows) {
    const box = el("div", { class: "why-box" });
    const pick = el("select", { class: "why-query" }, rows.map((r, i) => el("option", { value: i + 1 }, `${i + 1} ${r}`)));
    pick.value = rows.length;
    const out = el("div", { class: "why-out" });
    const go = async (q) => {
      pick.value = q; delete out.dataset.done;
      out.replaceChildren(el("span", { class: "status" }, "reading the head's roles…"));
      try {
        const a = await post("api/head-why", { model: step.model, text: step.text, layer: step.layer, head: step.head, query: +q });
        const roles = Object.entries(a.roles).map(([k, v]) => el("span", { class: `why-role${k === a.strongest ? " why-strongest" : ""}`,
          "data-role": k }, `${k} ${fmt(v, 2)}`));
        const kids = [el("div", { class: "label" }, `roles over ${a.role_texts} texts and repeated random tokens (strongest ` +
          `at ≥ ${a.threshold}: ${a.strongest || "none"})`), el("div", { class: "why-roles" }, roles)];
        if (a.qk) {
          const big = Math.max(1e-9, ...a.qk.parts.map((x) => Math.abs(x.value)));
          const parts = [...a.qk.parts].sort((x, y) => Math.abs(y.value) - Math.abs(x.value));
          kids.push(el("div", { class: "label" }, `QK decomposition at query ${a.qk.query} “${clean(a.qk.query_piece)}”: the ` +
            `most-attended key ${a.qk.key} “${clean(a.qk.key_piece)}” (weight ${fmt(a.qk.weight)}, score ${fmt(a.qk.score, 2)}), ` +
            "its score split over the key's residual-stream parts"),
          el("div", { class: "why-parts" }, parts.map((x) => el("div", { class: "why-part", "data-part": x.part, "data-value": x.value },
            el("span", { class: "why-name" }, x.part), el("span", { class: `why-bar${x.value < 0 ? " neg" : ""}`,
              style: `width: ${(80 * Math.abs(x.value) / big).toFixed(1)}px` }), ` ${fmt(x.value, 2)}`))));
        } else if (a.note) kids.push(el("div", { class: "note" }, a.note));
        out.replaceChildren(...kids);
        out.dataset.done = "1";
      } catch (e) { out.replaceChildren(el("div", { class: "error", role: "alert" }, e.message)); }
    };
    pick.addEventListener("change", () => go(pick.value));
    box.append(el("div", { class: "controls" }, el("label", {}, "Why this head? roles, and its QK decomposition at query ", pick)), out);
    go(rows.length);
    return { box, go };
  }

  window.AttnkitHeads = { wordDiff, translatorPanel, attentionPanel, textPanel, patchingBox, whyBox };
})();
