// The information-flow graph of a decoder-only model's prediction (Ferrando & Voita 2024), drawn as SVG:
// layers × positions, each head edge's width its importance, a threshold slider, a click on an edge shows
// that head's attention row, a click on a block (a position between layers) shows its logit lens.
// Input: the routes view's JSON (attnkit.explorer.lm_view_answer.lm_view_json(): graph, pieces, node_lens,
// attention_rows), layers, heads and positions numbered from 1 as everywhere a user sees them.
// Used by the explorer page (its graph view), by the self-contained page of `attnkit explain --method routes
// --plot graph.html` and by the notebook view (attnkit.show). The explorer reads the graph from
// POST /api/flow/stream (stream below): each layer is drawn as the server finishes it, the last layer first.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const LABEL_PX = 12; // the layers' and the pieces' labels, in px at the graph's own (unshrunk) size

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function html(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function shown(piece) {
    return String(piece).replace(/\u2581|\u0120/g, " ").trim() || piece;
  }

  function lensTable(data, position, layer) {
    const rows = (data.node_lens || {})[String(position)] || [];
    const box = html("div", "flow-lens");
    box.dataset.position = String(position);
    box.appendChild(
      html("p", "flow-title", `logit lens at position ${position} (${shown(data.pieces[position - 1])}): each block's residual read as a prediction`)
    );
    const table = html("table", "flow-lens-table");
    const head = html("tr");
    for (const t of ["layer", "rank of the prediction", "top tokens (logit)"]) head.appendChild(html("th", "", t));
    table.appendChild(head);
    for (const r of rows) {
      const tr = html("tr", r.layer === layer ? "flow-current" : "");
      tr.appendChild(html("td", "", r.layer === 0 ? "embeddings" : String(r.layer)));
      tr.appendChild(html("td", "", String(r.rank)));
      tr.appendChild(html("td", "", r.top.map((t) => `${shown(t.piece)} (${t.logit.toFixed(2)})`).join(", ")));
      table.appendChild(tr);
    }
    box.appendChild(table);
    return box;
  }

  function attentionRow(data, edge) {
    const box = html("div", "flow-row");
    const found = (data.attention_rows || []).find((r) => r.layer === edge.layer && r.target === edge.target);
    box.appendChild(
      html(
        "p",
        "flow-title",
        `layer ${edge.layer}, head ${edge.head}: position ${edge.target} (${shown(data.pieces[edge.target - 1])}) reads ` +
          `position ${edge.source} (${shown(data.pieces[edge.source - 1])}), importance ${edge.weight.toFixed(4)}; its attention row:`
      )
    );
    if (!found) return box;
    const row = found.heads[edge.head - 1];
    const list = html("ol", "flow-attention");
    row.forEach((w, j) => {
      if (j >= edge.target) return; // a causal model reads no later position
      const li = html("li", j + 1 === edge.source ? "flow-current" : "");
      li.appendChild(html("span", "flow-piece", shown(data.pieces[j])));
      const bar = html("span", "flow-bar");
      bar.style.display = "inline-block";
      bar.style.height = "0.7em";
      bar.style.background = "#1f77b4";
      bar.style.width = `${Math.round(120 * w)}px`;
      li.appendChild(bar);
      li.appendChild(html("span", "flow-weight", ` ${w.toFixed(3)}`));
      list.appendChild(li);
    });
    box.appendChild(list);
    const tokens = (xs) => (xs || []).map((t) => `${shown(t.piece)} (${t.logit >= 0 ? "+" : ""}${t.logit.toFixed(2)})`).join(", ");
    const up = found.promotes ? found.promotes[edge.head - 1] : null;
    const down = found.suppresses ? found.suppresses[edge.head - 1] : null;
    if (up) box.appendChild(html("p", "flow-promotes", `its output here promotes: ${tokens(up)}`));
    if (down) box.appendChild(html("p", "flow-suppresses", `and suppresses: ${tokens(down)}`));
    return box;
  }

  function render(container, data) {
    container.textContent = "";
    const g = data.graph;
    const n = data.pieces.length;
    const L = g.layers;
    const dx = 64, dy = 56, left = 90, top = 20;
    const width = left + dx * n + 20, height = top + dy * L + 90;
    const controls = html("div", "flow-controls");
    const label = html("label", "", "threshold ");
    const slider = html("input", "flow-threshold");
    const maxWeight = Math.max(g.threshold, ...g.edges.filter((e) => e.head !== null).map((e) => e.weight), 0.01);
    Object.assign(slider, { type: "range", min: String(g.threshold), max: String(maxWeight), step: "0.001", value: String(g.threshold) });
    const value = html("span", "flow-threshold-value", g.threshold.toFixed(3));
    label.appendChild(slider);
    label.appendChild(value);
    controls.appendChild(html("span", "flow-title", `routes to ${shown(data.token.piece)} at position ${data.position} `));
    controls.appendChild(label);
    container.appendChild(controls);
    // drawn at its own size (never shrunk to the card: a 25-token text is ~1,700 px wide, and shrunk its labels
    // could not be read), in a box that scrolls sideways when the graph is wider than the card
    const svg = el("svg", { class: "flow-graph", width, height, viewBox: `0 0 ${width} ${height}` });
    svg.style.maxWidth = "none";
    svg.style.display = "block";
    const scroller = html("div", "flow-scroll");
    scroller.style.overflowX = "auto";
    scroller.style.maxWidth = "100%";
    scroller.appendChild(svg);
    const X = (p) => left + dx * (p - 1) + dx / 2;
    const Y = (level) => top + dy * (L - level);
    for (let level = 0; level <= L; level++) {
      svg.appendChild(el("text", { class: "flow-label", x: 4, y: Y(level) + 4, "font-size": LABEL_PX }, level === 0 ? "embeddings" : `layer ${level}`));
    }
    data.pieces.forEach((p, i) => {
      const t = el("text", { class: "flow-label flow-piece-label", x: X(i + 1), y: Y(0) + 30, "font-size": LABEL_PX, "text-anchor": "end", transform: `rotate(-45 ${X(i + 1)} ${Y(0) + 30})` }, shown(p));
      svg.appendChild(t);
    });
    const info = html("div", "flow-info");
    const edges = [];
    for (const e of g.edges) {
      const head = e.head !== null;
      const line = el("line", {
        class: head ? "flow-edge" : "flow-residual",
        x1: X(e.source), y1: Y(e.layer - 1), x2: X(e.target), y2: Y(e.layer),
        stroke: head ? "#1f77b4" : "#bbb",
        "stroke-width": Math.max(0.6, 8 * e.weight),
        "stroke-opacity": head ? 0.8 : 1,
        "stroke-linecap": "round",
      });
      line.dataset.layer = String(e.layer);
      line.dataset.weight = String(e.weight);
      if (head) {
        line.dataset.head = String(e.head);
        line.style.cursor = "pointer";
        line.appendChild(el("title", {}, `layer ${e.layer} head ${e.head}: ${e.source} → ${e.target} (${e.weight.toFixed(3)})`));
        line.addEventListener("click", () => {
          info.textContent = "";
          info.appendChild(attentionRow(data, e));
        });
        edges.push(line);
      }
      svg.appendChild(line);
    }
    const mlps = [];
    for (const m of g.mlp_nodes) {
      const s = 6 + 10 * m.weight;
      const r = el("rect", { class: "flow-mlp", x: X(m.position) + 6, y: Y(m.layer) - s / 2, width: s, height: s, fill: "#ff7f0e" });
      r.dataset.weight = String(m.weight);
      r.appendChild(el("title", {}, `MLP of layer ${m.layer} at position ${m.position} (${m.weight.toFixed(3)})`));
      mlps.push(r);
      svg.appendChild(r);
    }
    const onGraph = new Set();
    for (const e of g.edges) {
      onGraph.add(`${e.layer - 1}:${e.source}`);
      onGraph.add(`${e.layer}:${e.target}`);
    }
    for (const key of onGraph) {
      const [level, position] = key.split(":").map(Number);
      const c = el("circle", { class: "flow-node", cx: X(position), cy: Y(level), r: 6, fill: position === data.position && level === L ? "#d62728" : "#444" });
      c.dataset.layer = String(level);
      c.dataset.position = String(position);
      c.style.cursor = "pointer";
      c.appendChild(el("title", {}, `position ${position}, ${level === 0 ? "embeddings" : "after layer " + level}: its logit lens`));
      c.addEventListener("click", () => {
        info.textContent = "";
        info.appendChild(lensTable(data, position, level));
      });
      svg.appendChild(c);
    }
    slider.addEventListener("input", () => {
      const t = Number(slider.value);
      value.textContent = t.toFixed(3);
      for (const x of [...edges, ...mlps]) x.style.display = Number(x.dataset.weight) >= t ? "" : "none";
    });
    container.appendChild(scroller);
    container.appendChild(info);
  }

  // POST `url` (/api/flow/stream) with `body` and draw the graph as it arrives: the answer is one JSON object a
  // line (start; one per layer, the last layer first; done or error), read with the fetch body's reader; each
  // layer's edges and MLP nodes are drawn as they come under a progress line ("layer 12 of 16"), and the done
  // line (logit lens, attention rows) completes the graph. Resolves to the whole graph's data (render's input).
  async function stream(container, url, body, signal) {
    const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal });
    if (!r.ok) {
      let said = "";
      try { said = (await r.json()).error; } catch (e) { said = ""; }
      throw new Error(said || `${r.status} ${r.statusText}`);
    }
    const progress = html("p", "flow-progress status", "waiting for the first layer…");
    const drawing = html("div", "flow-drawing");
    container.replaceChildren(progress, drawing);
    let data = null, traced = 0, finished = false;
    const take = (m) => {
      if (m.event === "start") {
        data = { ...m, token: { id: null, piece: "…" }, node_lens: {}, attention_rows: [],
          graph: { layers: m.layers, heads: m.heads, threshold: m.threshold, edges: [], mlp_nodes: [] } };
      } else if (m.event === "layer") {
        data.graph.edges.push(...m.edges);
        data.graph.mlp_nodes.push(...m.mlp_nodes);
        traced += 1;
        progress.textContent = `layer ${m.layer} of ${data.layers} (${traced} traced, from the last layer down)`;
        render(drawing, data);
      } else if (m.event === "done") {
        const { event, ...rest } = m;
        data = { ...rest, graph: { ...m.graph, edges: data.graph.edges, mlp_nodes: data.graph.mlp_nodes } };
        finished = true;
        progress.textContent = `all ${data.layers} layers traced`;
        render(drawing, data);
        container.dataset.done = "1";
      } else if (m.event === "error") {
        throw new Error(m.error);
      }
    };
    const reader = r.body.getReader(), decoder = new TextDecoder();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (value) pending += decoder.decode(value, { stream: true });
      const lines = pending.split("\n");
      pending = lines.pop();
      for (const line of lines) {
        if (!line.trim()) continue;
        take(JSON.parse(line));
        await new Promise((go) => setTimeout(go, 0)); // the page shows each layer, even of lines read together
      }
      if (done) break;
    }
    if (!finished) throw new Error("the answer ended before the graph was done");
    return data;
  }

  window.AttnkitFlow = { render, stream };
})();
