// The dashboard's shell: the token, API calls, page switching and the
// small DOM helpers the pages share. No data is in the files themselves:
// every figure comes from the admin API, with the token as a bearer header.
"use strict";

const SG = (() => {
  const KEY = "sluicegate.token";
  const pages = {};
  let current = null;
  let timer = null;

  function token() {
    return sessionStorage.getItem(KEY) || "";
  }

  // An API call: resolves with {status, body, etag}; a 401 asks for a token.
  async function api(method, path, body, headers) {
    const h = Object.assign({ Accept: "application/json" }, headers || {});
    if (token()) h.Authorization = "Bearer " + token();
    if (body !== undefined) h["Content-Type"] = "application/json";
    const resp = await fetch(path, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
    const text = await resp.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch (_) { json = { error: text }; }
    const etag = resp.headers.get("ETag");
    if (etag) setText(document.getElementById("revision"), etag.replace(/"/g, ""));
    if (resp.status === 401) {
      showLogin(token() ? "That token was refused." : "");
      throw new Error("unauthorized");
    }
    return { status: resp.status, body: json, etag };
  }

  function showLogin(message) {
    stop();
    document.getElementById("main").hidden = true;
    document.getElementById("login").hidden = false;
    setText(document.getElementById("login-error"), message || "");
    document.getElementById("token").focus();
  }

  function signIn(ev) {
    ev.preventDefault();
    const t = document.getElementById("token").value.trim();
    if (!t) return;
    sessionStorage.setItem(KEY, t);
    document.getElementById("token").value = "";
    document.getElementById("login").hidden = true;
    document.getElementById("main").hidden = false;
    route();
  }

  function signOut() {
    sessionStorage.removeItem(KEY);
    showLogin("Signed out.");
  }

  function stop() {
    if (timer) clearInterval(timer);
    timer = null;
  }

  // Shows the page the hash names; a page's `every` runs again every
  // `interval` ms while it is shown.
  function route() {
    stop();
    const name = (location.hash || "#overview").slice(1).split("/")[0];
    const page = pages[name] ? name : "overview";
    current = page;
    for (const el of document.querySelectorAll(".page")) el.hidden = el.id !== "page-" + page;
    for (const a of document.querySelectorAll("#nav a")) {
      a.classList.toggle("active", a.dataset.page === page);
    }
    document.getElementById("signout").hidden = !token();
    const p = pages[page];
    const run = () => p.show().catch(report);
    run();
    if (p.interval) timer = setInterval(() => { if (current === page) run(); }, p.interval);
  }

  function report(e) {
    if (e && e.message === "unauthorized") return;
    toast(String(e && e.message ? e.message : e), true);
  }

  function toast(message, bad) {
    const t = document.getElementById("toast");
    t.textContent = message;
    t.className = bad ? "bad" : "";
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
  }

  function setText(el, v) {
    if (el && el.textContent !== String(v)) el.textContent = String(v);
  }

  // An element with attributes, text and children.
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids.flat()) {
      if (k === undefined || k === null) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }

  // Fills `table` with a head row and one row per item; each column is
  // [title, item => cell text or node, class].
  function table(table, cols, items, empty) {
    const head = el("tr", {}, cols.map(([t, , c]) => el("th", { class: c }, t)));
    const rows = items.map((it) => el("tr", {}, cols.map(([, f, c]) => el("td", { class: c }, f(it)))));
    if (!items.length) rows.push(el("tr", {}, el("td", { colspan: cols.length, class: "muted" }, empty || "none")));
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
  }

  const fmt = {
    ms: (v) => (v === null || v === undefined ? "–" : v < 10 ? v.toFixed(2) + " ms" : v.toFixed(1) + " ms"),
    rate: (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1)),
    pct: (v) => (v === null || v === undefined ? "–" : (v * 100).toFixed(1) + " %"),
    int: (v) => Number(v).toLocaleString("en"),
  };

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("login-form").addEventListener("submit", signIn);
    document.getElementById("signout").addEventListener("click", signOut);
    window.addEventListener("hashchange", route);
    route();
  });

  return { api, el, table, fmt, pages, setText, toast, report };
})();
