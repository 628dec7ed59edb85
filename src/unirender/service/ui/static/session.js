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
  // Over the last RATE_WINDOW_S seconds, not the last poll: five steps from the keyboard show a rate for a while
  // instead of 0.0 a second later; "idle" once none came in the window.
  const RATE_WINDOW_S = 5;
  const samples = []; // [steps, time], oldest first
  function stepRate(steps, now) {
    samples.push([steps, now]);
    while (samples.length > 2 && now - samples[1][1] >= RATE_WINDOW_S) samples.shift();
    const [steps0, t0] = samples[0];
    if (now <= t0) return "–";
    return steps > steps0 ? ((steps - steps0) / (now - t0)).toFixed(1) : "idle";
  }
  async function status() {
    try {
      const resp = await fetch(root.dataset.status, {credentials: "same-origin", cache: "no-store"});
      if (!resp.ok) { if (resp.status === 404 || resp.status === 410) out("state").textContent = "ended"; return; }
      const s = await resp.json();
      out("steps").textContent = String(s.steps);
      out("state").textContent = s.state;
      out("steps-rate").textContent = stepRate(s.steps, s.now);
    } catch (e) { /* next tick */ }
  }
  setInterval(status, 1000);
  status();

  // -- recording --------------------------------------------------------------------------------------------
  // The record button starts recording the view shown (a frame per step, encoded on the server) and stops it;
  // the finished video is then a download (and GET /v1/sessions/{id}/video).
  const record = out("record");
  if (record) {
    record.addEventListener("click", async () => {
      const start = record.getAttribute("aria-pressed") !== "true";
      record.disabled = true;
      try {
        const resp = await fetch(out("record-box").dataset.url, {
          method: "POST", credentials: "same-origin",
          headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
          body: JSON.stringify(start ? {record: true, view: select.value} : {record: false}),
        });
        const doc = await resp.json();
        if (!resp.ok) { out("record-state").textContent = "refused: " + ((doc.error || {}).message || resp.status); return; }
        record.setAttribute("aria-pressed", doc.recording ? "true" : "false");
        record.textContent = doc.recording ? "Stop recording" : "Record";
        out("record-file").hidden = !doc.finished;
        out("record-state").textContent = doc.recording ? "Recording the view shown…" :
          doc.finished.frames + " frames recorded at " + doc.finished.fps + " frames/s.";
      } catch (e) {
        out("record-state").textContent = "not sent (" + e + ")";
      } finally {
        record.disabled = false;
      }
    });
  }

  // -- actions --------------------------------------------------------------------------------------------
  // One request in flight and at most one queued (the latest): a held key does not pile up steps.
  let inFlight = false, pending = null;
  async function send(body, label) {
    if (inFlight) { pending = [body, label]; return; }
    inFlight = true;
    try {
      const resp = await fetch(root.dataset.action, {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
        body: JSON.stringify(body),
      });
      const doc = await resp.json();
      if (!resp.ok) out("last-action").textContent = label + ": refused: " + ((doc.error || {}).message || resp.status);
      else if (doc.success === false) out("last-action").textContent = doc.action + ": failed: " + doc.error + " (step " + doc.steps + ")";
      else out("last-action").textContent = doc.action + ": succeeded" +
        (doc.reward !== undefined ? ", reward " + doc.reward : "") + " (step " + doc.steps + ")";
    } catch (e) {
      out("last-action").textContent = label + ": not sent (" + e + ")";
    } finally {
      inFlight = false;
      if (pending) { const next = pending; pending = null; send(next[0], next[1]); }
    }
  }
  function inField(t) { return t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA"); }
  const keyOf = ev => ev.key.length === 1 ? ev.key.toLowerCase() : ev.key;

  // ML-Agents: the behavior's declared actions; keys drive the first behavior's form.
  const behaviors = document.querySelectorAll("form.behavior");
  if (behaviors.length) {
    function bodyOf(form) {
      const continuous = [...form.querySelectorAll("input[data-axis]")].map(i => Number(i.value));
      const discrete = [...form.querySelectorAll("select[data-branch]")].map(s => Number(s.value));
      return {behavior: form.dataset.behavior, continuous: continuous, discrete: discrete};
    }
    behaviors.forEach(form => {
      form.addEventListener("submit", ev => { ev.preventDefault(); send(bodyOf(form), form.dataset.behavior); });
      form.querySelectorAll("input[data-axis]").forEach(i => i.addEventListener("input", () => {
        i.nextElementSibling.textContent = Number(i.value).toFixed(2);
      }));
    });
    const first = behaviors[0];
    const axes = {ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [1, 1], ArrowDown: [1, -1]};
    const held = {};
    function heldBody() {
      const body = bodyOf(first);
      for (const key of Object.keys(held)) {
        const [axis, value] = axes[key];
        if (axis < body.continuous.length) body.continuous[axis] = value;
      }
      return body;
    }
    document.addEventListener("keydown", ev => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey || inField(ev.target)) return;
      const key = keyOf(ev);
      const branch0 = first.querySelector('select[data-branch="0"]');
      if (/^[0-9]$/.test(key) && branch0 && Number(key) < branch0.options.length) {
        ev.preventDefault(); branch0.value = key; send(heldBody(), first.dataset.behavior);
      } else if (key in axes) {
        ev.preventDefault(); held[key] = true; send(heldBody(), first.dataset.behavior);
      } else if (key === " ") {
        ev.preventDefault(); send(heldBody(), first.dataset.behavior);
      }
    });
    document.addEventListener("keyup", ev => { delete held[keyOf(ev)]; });
    return;
  }

  // WebGL: the environment's declared actions by name, a button each; a key is an action's only as declared
  // (data-key, as KeyboardEvent.key reads it), not remappable: the declaration is the policy.
  const declared = document.querySelector(".pad.declared");
  if (declared) {
    const declaredKeys = {};
    declared.querySelectorAll("button.act").forEach(b => {
      b.addEventListener("click", () => send({action: b.dataset.action}, b.dataset.action));
      if (b.dataset.key) declaredKeys[b.dataset.key] = b.dataset.action;
    });
    document.addEventListener("keydown", ev => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey || inField(ev.target)) return;
      const key = keyOf(ev);
      if (!Object.prototype.hasOwnProperty.call(declaredKeys, key)) return;
      ev.preventDefault();
      send({action: declaredKeys[key]}, declaredKeys[key]);
    });
    return;
  }

  // AI2-THOR: named actions on keys (remappable, kept in this browser) and buttons.
  function keymap() {
    try { return JSON.parse(localStorage.getItem(STORE) || "null") || Object.assign({}, defaults); }
    catch (e) { return Object.assign({}, defaults); }
  }
  let keys = keymap();
  document.querySelectorAll("button.act").forEach(b => b.addEventListener("click", () => send({action: b.dataset.action}, b.dataset.action)));
  document.addEventListener("keydown", ev => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || inField(ev.target)) return;
    const key = keyOf(ev);
    const action = Object.prototype.hasOwnProperty.call(keys, key) ? keys[key] : null;
    if (!action) return;
    ev.preventDefault();
    send({action: action}, action);
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
