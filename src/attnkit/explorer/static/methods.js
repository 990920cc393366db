// attnkit explorer: the attribution method picker (attnkit.attribution), and the progress and Cancel
// button of a request that computes one (gradient methods take seconds on a long verse).
"use strict";

// The methods the loaded models of one task have, in the registry's order (from /api/models).
function methodsOf(task) {
  const seen = new Map();
  state.models.filter((m) => m.task === task).forEach((m) => (m.methods || []).forEach((x) => seen.set(x.name, x)));
  return [...seen.values()];
}
// The loaded models of one task that have method ``name`` (the others show their attention instead).
function modelsWith(task, name) {
  return state.models.filter((m) => m.task === task && (m.methods || []).some((x) => x.name === name)).map((m) => m.name);
}
function fillMethodPicker(select, task) {
  select.replaceChildren(el("option", { value: "" }, "the model's attention (no method)"),
    ...methodsOf(task).map((m) => el("option", { value: m.name, title: `${m.title} (${m.reference})`,
      "data-models": modelsWith(task, m.name).join(" ") },
      `${m.name}${m.needs_gradients ? " (gradients)" : ""}`)));
}
// The method to ask a model for: the chosen one if the model has it, else none (its attention).
function methodFor(model, chosen) {
  const info = modelInfo(model);
  return chosen && (info.methods || []).some((m) => m.name === chosen) ? chosen : null;
}
function methodNote(p, chosen) {
  if (p.attribution) return `${p.attribution.method} — ${p.attribution.title} (${p.attribution.reference}); ` +
    `${fmt(p.attribution.seconds, 2)} s on the server`;
  return chosen ? `${p.model} has no ${chosen}: its attention is shown` : "";
}

// a job's name: 128 random bits (the server also ties it to this page's session cookie)
const newJob = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
// A progress bar (polled from /api/progress/{job}), the elapsed time and a Cancel button that aborts
// the requests (the server stops the computation at its next step).
function progressBox(container, label, controller, jobs) {
  const bar = el("progress", { max: 1, value: 0, class: "method-progress" });
  const text = el("span", { class: "progress-text" }, `${label}…`);
  const cancel = el("button", { class: "cancel", onclick: () => controller.abort() }, "Cancel");
  container.replaceChildren(el("div", { class: "progress-box", role: "status" }, text, " ", bar, " ", cancel));
  const t0 = performance.now(), finished = new Set();
  let busyUntil = 0;  // the server said it is busy: the page asks again then
  const tick = async () => {
    const parts = await Promise.all(jobs.map((j) => finished.has(j) ? { progress: 1 } :
      api(`api/progress/${j}`).catch(() => ({}))));
    const f = parts.reduce((a, r) => a + (r.progress || 0), 0) / Math.max(1, jobs.length);
    const queued = parts.map((r) => r.queued).filter((q) => q);  // places in the server's queue of heavy jobs
    const waits = parts.map((r) => r.wait_s).filter((w) => w != null);  // the server's expected waits, in s
    bar.value = f;
    text.textContent = `${label}: ${(100 * f).toFixed(0)} % after ${((performance.now() - t0) / 1000).toFixed(1)} s` +
      (queued.length ? ` — waiting for a worker, place ${Math.min(...queued)} in the queue` +
        (waits.length ? `, about ${Math.ceil(Math.max(...waits))} s` : "") : "");
    const busy = Math.ceil((busyUntil - performance.now()) / 1000);
    if (busy > 0) text.textContent += ` — the server is busy: asking again in ${busy} s`;
    text.dataset.queued = queued.length ? Math.min(...queued) : "";
  };
  const timer = setInterval(tick, 300);
  return { finish: (job) => finished.add(job), stop: () => clearInterval(timer),
    busy: (seconds) => { busyUntil = performance.now() + 1000 * seconds; text.dataset.busy = "1"; } };
}
