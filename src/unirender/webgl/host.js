// unirender's host page contract for Unity WebGL builds (docs/webgl.md). Loaded before the build's loader.
//
// - window.unirender.emit(value): a build (or its jslib, or a host script) posts JSON for reward and metadata;
//   every value emitted since the previous step comes back with the step's frame.
// - Frame control: requestAnimationFrame callbacks are queued and run by tick() on a virtual clock
//   (performance.now starts at 0 and advances 1000/fps ms per frame, whatever the wall clock did), so a step is
//   "these inputs, then N frames", the same frames on every run. While the build boots, the real display's
//   frames drive tick(1) (builds that start on a frame need them) with the clock held at 0: how many of those
//   frames a boot takes depends on the machine's load, and a clock they advanced made the first steps' times
//   (and whatever a game draws from them) differ between two runs in the last bit. From boot on, only steps run
//   frames, and only they advance the clock.
// - Readback happens in the same task as the frames it reads, so the drawing buffer is still there.
(function () {
  "use strict";
  const realRAF = window.requestAnimationFrame.bind(window);
  const realCancel = window.cancelAnimationFrame.bind(window);
  let autoTick = true;  // the real display drives frames until boot is done
  let queue = new Map();  // id -> callback, in registration order
  let nextId = 1;
  let virtualNow = 0;
  const messages = [];
  const errors = [];
  let contexts = [];

  window.requestAnimationFrame = function (cb) {
    const id = -(nextId++);  // negative: never a real rAF id
    queue.set(id, cb);
    return id;
  };
  window.cancelAnimationFrame = function (id) {
    if (id < 0) queue.delete(id); else realCancel(id);
  };
  performance.now = function () { return virtualNow; };
  function drive() {
    if (!autoTick) return;
    U.tick(1, false);
    realRAF(drive);
  }
  realRAF(drive);

  // The game's WebGL context: kept so that readback can read the frame it just drew.
  const realGetContext = HTMLCanvasElement.prototype.getContext;
  HTMLCanvasElement.prototype.getContext = function (type, attributes) {
    const ctx = realGetContext.call(this, type, attributes);
    if (ctx && /webgl/.test(type) && !contexts.some(c => c.ctx === ctx)) contexts.push({canvas: this, ctx: ctx});
    return ctx;
  };

  function record(kind, text) {
    errors.push(kind + ": " + String(text).slice(0, 2000));
    if (errors.length > 50) errors.shift();
  }
  window.addEventListener("error", e => record("error", e.message || e));
  window.addEventListener("unhandledrejection", e => record("unhandled rejection", e.reason && (e.reason.stack || e.reason)));

  let bootResolve, bootReject;
  const booted = new Promise((res, rej) => {
    bootResolve = how => { autoTick = false; res(how); };  // no frame runs between boot and the first step
    bootReject = rej;
  });
  booted.catch(() => {});

  function base64(bytes) {
    let text = "";
    for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return btoa(text);
  }

  const U = window.unirender = {
    instance: null,
    canvas: null,
    errors: errors,
    emit(value) {
      messages.push(typeof value === "string" ? JSON.parse(value) : JSON.parse(JSON.stringify(value)));
      if (messages.length > 10000) messages.shift();
    },
    // Host scripts whose build says "started" later than createUnityInstance resolves call this.
    ready() { bootResolve("ready"); },
    boot(config, waitFor) {
      const canvas = U.canvas = document.getElementById("unity-canvas");
      config.showBanner = function (msg, type) {
        if (type === "error") { record("unity", msg); bootReject(new Error("Unity: " + msg)); }
      };
      if (typeof createUnityInstance !== "function") {
        bootReject(new Error("the loader did not define createUnityInstance (not a Unity 2020+ WebGL build?)"));
        return;
      }
      let promise;
      try { promise = createUnityInstance(canvas, config, () => {}); }
      catch (e) { bootReject(e); return; }
      Promise.resolve(promise).then(instance => {
        U.instance = instance;
        if (waitFor === "instance") bootResolve("instance");
      }, error => bootReject(error));
    },
    whenBooted(timeoutMs) {
      return Promise.race([
        booted.then(how => ({ok: true, how: how})),
        new Promise(res => setTimeout(() => res({ok: false, timeout: true, errors: errors.slice(-10)}), timeoutMs)),
      ]).catch(e => ({ok: false, error: e && e.message ? e.message : String(e), errors: errors.slice(-10)}));
    },
    frameMs: 1000 / 60,
    pending() { return queue.size; },
    tick(frames, advance = true) {
      for (let i = 0; i < frames; i++) {
        if (advance) virtualNow += U.frameMs;
        const due = queue;
        queue = new Map();
        for (const cb of due.values()) {
          try { cb(virtualNow); } catch (e) { record("frame", e && (e.stack || e)); }
        }
      }
    },
    readPixels() {
      const found = contexts.find(c => c.canvas === U.canvas) || contexts[0];
      if (!found) return null;
      const gl = found.ctx, w = gl.drawingBufferWidth, h = gl.drawingBufferHeight;
      const pixels = new Uint8Array(w * h * 4);
      const isGL2 = typeof WebGL2RenderingContext !== "undefined" && gl instanceof WebGL2RenderingContext;
      const target = isGL2 ? gl.READ_FRAMEBUFFER : gl.FRAMEBUFFER;
      const bound = gl.getParameter(isGL2 ? gl.READ_FRAMEBUFFER_BINDING : gl.FRAMEBUFFER_BINDING);
      const pack = gl.getParameter(gl.PACK_ALIGNMENT);
      gl.bindFramebuffer(target, null);
      gl.pixelStorei(gl.PACK_ALIGNMENT, 4);
      let packBuffer = null;
      if (isGL2) { packBuffer = gl.getParameter(gl.PIXEL_PACK_BUFFER_BINDING); gl.bindBuffer(gl.PIXEL_PACK_BUFFER, null); }
      gl.readPixels(0, 0, w, h, gl.RGBA, gl.UNSIGNED_BYTE, pixels);
      if (isGL2) gl.bindBuffer(gl.PIXEL_PACK_BUFFER, packBuffer);
      gl.pixelStorei(gl.PACK_ALIGNMENT, pack);
      gl.bindFramebuffer(target, bound);
      return {width: w, height: h, data: base64(pixels)};  // bottom row first (GL's origin)
    },
    readPNG() {
      const canvas = U.canvas;
      return {width: canvas.width, height: canvas.height, png: canvas.toDataURL("image/png").split(",")[1]};
    },
    // One step's page half: the frames, then the readback and everything emitted since the last step.
    // until: a key; frames then is a maximum, and the step ends after the first frame that emitted a value
    // carrying that key (AI2-THOR's metadata arrives when its action is done, some frames later).
    step(frames, readback, until) {
      if (!until) U.tick(frames);
      else for (let i = 0; i < frames && !messages.some(m => m && typeof m === "object" && until in m); i++) U.tick(1);
      const frame = readback === "pixels" ? U.readPixels() : readback === "png" ? U.readPNG() : null;
      const emitted = messages.splice(0, messages.length);
      return {frame: frame, messages: emitted, errors: errors.splice(0, errors.length)};
    },
    sendMessage(gameObject, method, argument) {
      if (!U.instance) throw new Error("the Unity instance is not there yet");
      if (argument === undefined || argument === null) U.instance.SendMessage(gameObject, method);
      else U.instance.SendMessage(gameObject, method, argument);
    },
  };
})();
