// The read-only pages: the overview (live figures, the chart, the route
// table with each caching route's hit ratio, the service and app tables), the endpoint health grid and the reload history.
"use strict";

(() => {
  const { api, el, table, fmt, setText } = SG;
  const $ = (id) => document.getElementById(id);

  const CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx"];

  // Columns shared by the route and service tables.
  const traffic = [
    ["req/s", (r) => fmt.rate(r.rate), "num"],
    ["p50", (r) => fmt.ms(r.p50_ms), "num"],
    ["p99", (r) => fmt.ms(r.p99_ms), "num"],
    ["gateway share", (r) => fmt.pct(r.gateway_share), "num"],
    ["2xx", (r) => fmt.int(r.requests["2xx"]), "num"],
    ["3xx", (r) => fmt.int(r.requests["3xx"]), "num"],
    ["4xx", (r) => fmt.int(r.requests["4xx"]), "num"],
    ["5xx", (r) => fmt.int(r.requests["5xx"]), "num"],
  ];

  async function overview() {
    const { body } = await api("GET", "/live?window=5");
    const t = body.total;
    const errors = (t.window["4xx"] + t.window["5xx"]) / Math.max(body.window_seconds, 0.001);
    setText($("stat-rate"), fmt.rate(t.rate));
    setText($("stat-p50"), fmt.ms(t.p50_ms));
    setText($("stat-p99"), fmt.ms(t.p99_ms));
    setText($("stat-errors"), fmt.rate(errors));
    setText($("stat-share"), fmt.pct(t.gateway_share));
    setText($("stat-total"), fmt.int(CLASSES.reduce((n, c) => n + t.requests[c], 0)));
    Chart.draw($("chart"), body.series);
    const inWindow = CLASSES.reduce((n, c) => n + t.window[c], 0);
    $("classes").replaceChildren(
      ...CLASSES.map((c) => {
        const n = t.window[c];
        const bar = el("span", { class: "fill c" + c[0] });
        bar.style.width = (inWindow ? (100 * n) / inWindow : 0).toFixed(1) + "%";
        return el("div", { class: "class-row", id: "class-" + c },
          el("span", { class: "class-name" }, c),
          el("span", { class: "track" }, bar),
          el("span", { class: "num" }, fmt.int(n)));
      }),
    );
    table($("t-routes"), [
      ["route", (r) => r.name],
      ["service", (r) => r.split ? r.split.map((e) => e.service + " " + e.weight).join(", ") : r.service || "(fixed answer)"],
      ...traffic,
      // Caching routes only: their lookups answered from memory, since configured.
      ["cache hits", (r) => (r.cache ? fmt.pct(r.cache.hit_ratio) : ""), "num hit-ratio"],
    ], body.routes, "no routes");
    table($("t-services"), [
      ["service", (s) => s.name],
      ["endpoints up", (s) => s.endpoints_up + " / " + s.endpoints, "num"],
      ...traffic,
    ], body.services, "no services");
    setText($("apps-called"), body.apps_called ? "(" + body.apps_called + " with requests)" : "");
    table($("t-apps"), [
      ["app", (a) => a.id],
      ["req/s", (a) => fmt.rate(a.rate), "num"],
      ["mean", (a) => fmt.ms(a.mean_ms), "num"],
      ["requests", (a) => fmt.int(a.requests), "num"],
      ["4xx", (a) => fmt.int(a.client_errors), "num"],
      ["5xx", (a) => fmt.int(a.server_errors), "num"],
      ["403", (a) => fmt.int(a.forbidden), "num"],
      ["429", (a) => fmt.int(a.limited), "num"],
    ], body.apps, "no app has made a request");
  }

  // The colour class of an endpoint: health, then circuit, then ejection.
  function stateOf(e) {
    if (e.health === "down") return "down";
    if (e.breaker === "open") return "open";
    if (e.ejected) return "ejected";
    if (e.breaker === "half-open") return "half-open";
    return e.health === "unchecked" ? "unchecked" : "up";
  }

  async function endpoints() {
    const { body } = await api("GET", "/live/endpoints");
    const groups = new Map();
    for (const e of body.endpoints) {
      if (!groups.has(e.service)) groups.set(e.service, []);
      groups.get(e.service).push(e);
    }
    const grid = [...groups].map(([svc, eps]) =>
      el("div", { class: "svc" },
        el("div", { class: "svc-name" }, svc),
        el("div", { class: "cells" }, eps.map((e) => {
          const s = stateOf(e);
          return el("div", {
            class: "cell s-" + s,
            title: `${e.name} (${e.addr}): health ${e.health}, circuit ${e.breaker}` +
              (e.ejected ? ", ejected" : "") + `, ${e.in_flight} in flight`,
            dataset: { state: s },
          }, el("span", {}, e.name), el("small", {}, s));
        }))));
    if (!grid.length) grid.push(el("p", { class: "muted" }, "no services"));
    $("health-grid").replaceChildren(...grid);
    table($("t-endpoints"), [
      ["service", (e) => e.service],
      ["endpoint", (e) => e.name],
      ["address", (e) => e.addr],
      ["health", (e) => e.health],
      ["circuit", (e) => e.breaker],
      ["ejected", (e) => (e.ejected ? "yes" : "no")],
      ["in flight", (e) => fmt.int(e.in_flight), "num"],
      ["requests", (e) => fmt.int(e.requests), "num"],
      ["connect errors", (e) => fmt.int(e.connect_errors), "num"],
    ], body.endpoints, "no endpoints");
  }

  async function reloads() {
    const { body } = await api("GET", "/reloads");
    table($("t-reloads"), [
      ["time", (r) => r.time.replace("T", " ").replace("Z", " UTC"), "nowrap"],
      ["source", (r) => r.source],
      ["result", (r) => el("span", { class: r.applied ? "ok" : "bad" }, r.applied ? "applied" : "refused")],
      ["revision", (r) => r.revision, "num"],
      ["errors", (r) => el("ul", { class: "issues" }, r.errors.map((i) => el("li", {}, el("code", {}, i.path), " ", i.message)))],
    ], body.reloads, "no reload since start");
  }

  SG.pages.overview = { show: overview, interval: 1000 };
  SG.pages.endpoints = { show: endpoints, interval: 2000 };
  SG.pages.reloads = { show: reloads, interval: 5000 };
})();
