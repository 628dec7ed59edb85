// Sessions and jobs list: refresh the figures every second from /ui/status.json (no inline script: CSP).
"use strict";
(function () {
  // Steps/s over the last RATE_WINDOW_S seconds, not the last poll: five steps from the keyboard show a rate for
  // a while instead of 0.0 a second later; "idle" once none came in the window (as on the session page).
  const RATE_WINDOW_S = 5;
  const samples = new Map(); // session id -> [[steps, time], ...], oldest first
  function stepRate(id, steps, now) {
    const seen = samples.get(id) || [];
    seen.push([steps, now]);
    while (seen.length > 2 && now - seen[1][1] >= RATE_WINDOW_S) seen.shift();
    samples.set(id, seen);
    const [steps0, t0] = seen[0];
    if (now <= t0) return "–";
    return steps > steps0 ? ((steps - steps0) / (now - t0)).toFixed(1) : "idle";
  }
  function setText(row, field, text) {
    const el = row.querySelector('[data-field="' + field + '"]');
    if (el && el.textContent !== text) el.textContent = text;
  }
  async function tick() {
    let doc;
    try {
      const resp = await fetch("/ui/status.json", {credentials: "same-origin", cache: "no-store"});
      if (resp.status === 401) { location.assign("/ui/login?next=/ui/"); return; }
      if (!resp.ok) return;
      doc = await resp.json();
    } catch (e) { return; }
    const shown = new Set([...document.querySelectorAll("tr[data-id]")].map(r => r.dataset.id));
    const now = new Set([...doc.sessions.map(s => s.id), ...doc.jobs.map(j => j.id)]);
    if (shown.size !== now.size || [...now].some(id => !shown.has(id))) { location.reload(); return; }
    for (const s of doc.sessions) {
      const row = document.querySelector('table[data-kind="sessions"] tr[data-id="' + s.id + '"]');
      if (!row) continue;
      setText(row, "rate", stepRate(s.id, s.steps, doc.now));
      setText(row, "steps", String(s.steps));
      setText(row, "state", s.state);
    }
    for (const j of doc.jobs) {
      const row = document.querySelector('table[data-kind="jobs"] tr[data-id="' + j.id + '"]');
      if (!row) continue;
      const bar = row.querySelector('[data-field="bar"]');
      bar.value = j.percent; bar.textContent = j.percent + "%";
      setText(row, "state", j.state);
      setText(row, "frames", j.frames_done + "/" + (j.frames_total || "?") + " frames (" + j.percent + "%)");
      setText(row, "rate", String(j.frames_per_s));
      setText(row, "eta", j.eta_s === null ? "–" : Math.round(j.eta_s) + " s");
    }
  }
  setInterval(tick, 1000);
  tick();
})();
