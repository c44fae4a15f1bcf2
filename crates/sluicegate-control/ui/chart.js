// A small line chart on a <canvas>: requests and errors per second on the
// left axis, p50 and p99 latency (ms) on the right, over the last minute.
"use strict";

const Chart = (() => {
  const COLORS = { rate: "#1f6feb", errors: "#d1242f", p50: "#1a7f37", p99: "#bf8700" };

  // A round number at or above `v` for an axis top.
  function nice(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // points: [{t, rate, errors, p50_ms, p99_ms}], oldest first.
  function draw(canvas, points) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 600;
    const h = canvas.clientHeight || 220;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const pad = { l: 48, r: 56, t: 10, b: 24 };
    const iw = w - pad.l - pad.r;
    const ih = h - pad.t - pad.b;
    const span = 60000;
    const end = points.length ? points[points.length - 1].t : Date.now();
    const x = (t) => pad.l + iw * (1 - (end - t) / span);
    const left = nice(Math.max(1, ...points.map((p) => Math.max(p.rate, p.errors))));
    const right = nice(Math.max(1, ...points.map((p) => p.p99_ms || 0)));
    g.font = "11px system-ui, sans-serif";
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = pad.t + ih * (1 - i / 4);
      g.strokeStyle = "#e6e8eb";
      g.beginPath();
      g.moveTo(pad.l, y);
      g.lineTo(pad.l + iw, y);
      g.stroke();
      g.fillStyle = "#57606a";
      g.textAlign = "right";
      g.fillText(fmtAxis(left * i / 4), pad.l - 6, y + 4);
      g.textAlign = "left";
      g.fillText(fmtAxis(right * i / 4) + " ms", pad.l + iw + 6, y + 4);
    }
    g.textAlign = "center";
    for (const s of [60, 45, 30, 15, 0]) {
      g.fillText(s ? "-" + s + " s" : "now", pad.l + iw * (1 - s / 60), h - 6);
    }
    const line = (key, top, color, width) => {
      g.strokeStyle = color;
      g.lineWidth = width;
      g.beginPath();
      let open = false;
      for (const p of points) {
        const v = p[key];
        if (v === null || v === undefined) { open = false; continue; }
        const px = x(p.t);
        const py = pad.t + ih * (1 - Math.min(v, top) / top);
        if (open) g.lineTo(px, py); else g.moveTo(px, py);
        open = true;
      }
      g.stroke();
    };
    g.save();
    g.beginPath();
    g.rect(pad.l, pad.t - 2, iw, ih + 4);
    g.clip();
    line("p50_ms", right, COLORS.p50, 1.5);
    line("p99_ms", right, COLORS.p99, 1.5);
    line("errors", left, COLORS.errors, 1.5);
    line("rate", left, COLORS.rate, 2);
    g.restore();
  }

  function fmtAxis(v) {
    if (v >= 1000) return (v / 1000).toFixed(v % 1000 ? 1 : 0) + "k";
    return v % 1 ? v.toFixed(1) : String(v);
  }

  return { draw };
})();
