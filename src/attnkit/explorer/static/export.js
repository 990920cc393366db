// attnkit explorer: exporting a view as a self-contained HTML file, an SVG or a PNG.
// The HTML export fills the page template (attnkit.explorer.html.page_template: every script and style
// inline, two slots) with the view's data: the one way every offline page is built.
"use strict";

const DATA_SLOT = "/*attnkit:" + "data*/null", TEMPLATE_SLOT = "/*attnkit:" + "template*/null"; // split: not a slot here
const toJson = (x) => JSON.stringify(x).replace(/</g, "\\u003c");
function splitOnce(text, sep) {
  const i = text.indexOf(sep);
  if (i < 0) throw new Error(`the page template has no ${sep}`);
  return [text.slice(0, i), text.slice(i + sep.length)];
}
// attnkit.explorer.html.fill_page: the template with the data's JSON and its own JSON in its two slots
function fillPage(template, dataJson) {
  const [head, rest] = splitOnce(template, DATA_SLOT), [mid, tail] = splitOnce(rest, TEMPLATE_SLOT);
  return head + dataJson + mid + toJson(template) + tail;
}
async function pageTemplate() {
  return window.ATTNKIT_TEMPLATE || (await api("api/page-template")).template;
}
function download(name, blob) {
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(a); a.click(); a.remove();
}
async function exportHtml(data, name) {
  download(name, new Blob([fillPage(await pageTemplate(), toJson(data))], { type: "text/html" }));
}
function svgBlob(svg) {
  const copy = svg.cloneNode(true);
  copy.setAttribute("xmlns", SVGNS);
  return new Blob([new XMLSerializer().serializeToString(copy)], { type: "image/svg+xml" });
}
function exportsFor(card, payload, kind) {
  const name = `${payload.model || "view"}-${kind}`;
  const data = { models: state.models, translations: kind === "translation" ? [payload] : [], captions: kind === "caption" ? [payload] : [] };
  if (kind === "continuation") data.continuations = [payload]; // a decoder-only model's (schema.Continuation)
  const mainSvg = () => card.querySelector("svg.matrix, svg.overlay");
  return el("div", { class: "exports" },
    el("button", { class: "export", "data-format": "html", onclick: () => exportHtml(data, `${name}.html`) }, "HTML"),
    el("button", { class: "export", "data-format": "svg", onclick: () => { const s = mainSvg(); if (s) download(`${name}.svg`, svgBlob(s)); } }, "SVG"),
    el("button", { class: "export", "data-format": "png", onclick: () => { const s = mainSvg(); if (s) svgToPng(s, `${name}.png`); } }, "PNG"));
}
function svgToPng(svg, name) {
  const img = new Image(), url = URL.createObjectURL(svgBlob(svg));
  img.onload = () => {
    const c = el("canvas", { width: svg.width.baseVal.value * 2, height: svg.height.baseVal.value * 2 });
    const g = c.getContext("2d"); g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height); g.scale(2, 2); g.drawImage(img, 0, 0);
    c.toBlob((b) => download(name, b), "image/png");
  };
  img.src = url;
}

