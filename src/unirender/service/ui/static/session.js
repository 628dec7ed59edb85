// A session's page: the live view (Server-Sent Events, one frame per event), its frame rate and latency,
// and actions from the keyboard or the buttons (POST with the page's CSRF token).
"use strict";
(function () {
  const root = document.getElementById("session");
  if (!root) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const img = document.getElementById("live");
  const select = document.getElementById("view-select");
  const out = id => document.getElementById(id);
  const defaults = JSON.parse(root.dataset.keys);
  const STORE = "unirender.keys";

  // -- live view ---------------------------------------------------------------------------------------
  let source = null, fresh = false;
  const arrivals = [];
  function connect() {
    if (source) source.close();
    fresh = false;
    out("stream-state").textContent = "Connecting…";
    source = new EventSource(root.dataset.stream + "?view=" + encodeURIComponent(select.value));
    source.addEventListener("open", () => { out("stream-state").textContent = "Live."; });
    source.addEventListener("frame", ev => {
      const f = JSON.parse(ev.data);
      const now = Date.now();
      img.src = f.image;
      img.dataset.seq = f.seq;
      arrivals.push(now);
      while (arrivals.length && arrivals[0] < now - 2000) arrivals.shift();
      out("fps").textContent = (arrivals.length / 2).toFixed(1);
      // The first frame after connecting was rendered before the page asked: its age is no latency.
      if (fresh) out("latency").textContent = Math.max(0, now - f.rendered_ms).toFixed(0) + " ms";
      fresh = true;
      out("seq").textContent = String(f.seq);
    });
    source.addEventListener("end", () => {
      out("stream-state").textContent = "The session has ended.";
      source.close();
    });
    source.addEventListener("error", () => {
      out("stream-state").textContent = "Stream interrupted; reconnecting (the session may have ended, or too many viewers).";
    });
  }
  select.addEventListener("change", connect);
  connect();

  // -- status: steps and steps/s ------------------------------------------------------------------------
  let prev = null;
  async function status() {
    try {
      const resp = await fetch(root.dataset.status, {credentials: "same-origin", cache: "no-store"});
      if (!resp.ok) { if (resp.status === 404 || resp.status === 410) out("state").textContent = "ended"; return; }
      const s = await resp.json();
      out("steps").textContent = String(s.steps);
      out("state").textContent = s.state;
      if (prev && s.now > prev[1]) out("steps-rate").textContent = ((s.steps - prev[0]) / (s.now - prev[1])).toFixed(1);
      prev = [s.steps, s.now];
    } catch (e) { /* next tick */ }
  }
  setInterval(status, 1000);

  // -- actions --------------------------------------------------------------------------------------------
  function keymap() {
    try { return JSON.parse(localStorage.getItem(STORE) || "null") || Object.assign({}, defaults); }
    catch (e) { return Object.assign({}, defaults); }
  }
  let keys = keymap();
  let inFlight = false, pending = null;
  async function send(action) {
    if (inFlight) { pending = action; return; } // at most one queued: a held key does not pile up steps
    inFlight = true;
    try {
      const resp = await fetch(root.dataset.action, {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
        body: JSON.stringify({action: action}),
      });
      const doc = await resp.json();
      if (!resp.ok) out("last-action").textContent = action + ": refused: " + ((doc.error || {}).message || resp.status);
      else out("last-action").textContent = action + ": " + (doc.success ? "succeeded" : "failed: " + doc.error) +
        " (step " + doc.steps + ")";
    } catch (e) {
      out("last-action").textContent = action + ": not sent (" + e + ")";
    } finally {
      inFlight = false;
      if (pending) { const next = pending; pending = null; send(next); }
    }
  }
  document.querySelectorAll("button.act").forEach(b => b.addEventListener("click", () => send(b.dataset.action)));
  document.addEventListener("keydown", ev => {
    const t = ev.target;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA")) return;
    const key = ev.key.length === 1 ? ev.key.toLowerCase() : ev.key;
    const action = Object.prototype.hasOwnProperty.call(keys, key) ? keys[key] : null;
    if (!action) return;
    ev.preventDefault();
    send(action);
  });

  // -- key configuration (kept in this browser) ------------------------------------------------------------
  const form = document.getElementById("keymap-form");
  function showKeys() {
    for (const input of form.querySelectorAll("input")) {
      const key = Object.keys(keys).find(k => keys[k] === input.name);
      input.value = key || "";
    }
  }
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const map = {};
    for (const input of form.querySelectorAll("input")) if (input.value) map[input.value] = input.name;
    localStorage.setItem(STORE, JSON.stringify(map));
    keys = map;
    out("last-action").textContent = "Keys saved in this browser.";
  });
  document.getElementById("keymap-reset").addEventListener("click", () => {
    localStorage.removeItem(STORE); keys = keymap(); showKeys();
  });
  showKeys();
})();
