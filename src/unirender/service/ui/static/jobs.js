// One job's page: progress, rate, ETA and workers every second; reload once it ends (contact sheet, frames).
"use strict";
(function () {
  const root = document.getElementById("job");
  if (!root || root.dataset.final === "yes") return;
  function set(field, text) {
    const el = root.querySelector('[data-field="' + field + '"]');
    if (el && el.textContent !== text) el.textContent = text;
  }
  async function tick() {
    let doc;
    try {
      const resp = await fetch(root.dataset.status, {credentials: "same-origin", cache: "no-store"});
      if (!resp.ok) return;
      doc = await resp.json();
    } catch (e) { return; }
    const j = doc.jobs.find(x => x.id === root.dataset.id);
    if (!j) return;
    const bar = document.getElementById("job-progress");
    bar.value = j.percent; bar.textContent = j.percent + "%";
    set("state", j.state);
    set("frames", j.frames_done + "/" + (j.frames_total || "?") + " frames (" + j.percent + "%)");
    set("rate", String(j.frames_per_s));
    set("eta", j.eta_s === null ? "–" : Math.round(j.eta_s) + " s");
    const list = root.querySelector('[data-field="workers"]');
    const items = Object.entries(j.workers).map(([w, s]) => "worker " + w + ": " + s);
    if (items.length && list.textContent !== items.join("")) {
      list.replaceChildren(...items.map(t => { const li = document.createElement("li"); li.textContent = t; return li; }));
    }
    if (j.final) { clearInterval(timer); setTimeout(() => location.reload(), 300); }
  }
  const timer = setInterval(tick, 1000);
  tick();
})();
