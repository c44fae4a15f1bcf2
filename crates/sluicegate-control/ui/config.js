// The config page: routes, services, apps, plans and certificates read
// and changed through the admin API. Routes have a form; the others are
// edited as JSON. A refused write's problems are shown beside the field
// their JSON path names.
"use strict";

(() => {
  const { api, el, table, toast } = SG;
  const $ = (id) => document.getElementById(id);

  const KINDS = {
    routes: { key: "name", title: "Routes" },
    services: { key: "name", title: "Services" },
    apps: { key: "id", title: "Apps" },
    plans: { key: "name", title: "Plans" },
    certificates: { title: "Certificates", readOnly: true },
  };
  // The route fields the form edits; the rest is kept as JSON.
  const ROUTE_FIELDS = ["name", "match.path_prefix", "match.path", "match.host", "match.methods", "service", "strip_prefix", "auth"];
  let kind = "routes";
  let etag = null;
  let services = [];

  function summary(k, it) {
    if (k === "routes") {
      const m = it.match || {};
      const where = m.path_prefix ? m.path_prefix + "*" : m.path || "any path";
      return [where + (m.host ? " on " + m.host : ""), it.service ? "→ " + it.service : it.split ? "→ " + it.split.map((e) => e.service + " " + e.weight).join(", ") : it.respond ? "fixed " + it.respond.status : ""].join(" ");
    }
    if (k === "services") return (it.endpoints || []).map((e) => (typeof e === "string" ? e : e.addr)).join(", ");
    if (k === "apps") return it.plan ? "plan " + it.plan : "";
    if (k === "plans") return Object.entries(it).filter(([x]) => x !== "name").map(([x, v]) => x + " " + v).join(", ");
    return "";
  }

  async function show() {
    const name = (location.hash.split("/")[1] || kind);
    kind = KINDS[name] ? name : "routes";
    for (const b of document.querySelectorAll("#config-tabs button")) b.classList.toggle("active", b.dataset.kind === kind);
    const k = KINDS[kind];
    $("config-title").textContent = k.title;
    $("config-new").hidden = !!k.readOnly;
    const { body, etag: tag } = await api("GET", "/" + kind + "?limit=1000");
    etag = tag;
    if (kind === "routes") services = (await api("GET", "/services?limit=1000")).body.items.map((s) => s.name);
    if (k.readOnly) {
      table($("t-config"), [
        ["listener", (c) => c.listener],
        ["certificate", (c) => c.cert],
        ["key", (c) => c.key],
        ["default", (c) => (c.default ? "yes" : "")],
        ["config path", (c) => el("code", {}, c.path)],
      ], body.items, "no TLS listener");
      return;
    }
    // A route's rollout: the canary's weight and the state, as the
    // gateway has them (GET /routes/NAME/rollout).
    const rollouts = {};
    if (kind === "routes") {
      await Promise.all(body.items.filter((it) => it.rollout).map(async (it) => {
        const r = await api("GET", "/routes/" + encodeURIComponent(it.name) + "/rollout");
        if (r.status === 200) rollouts[it.name] = r.body;
      }));
    }
    const rolloutColumn = kind === "routes" && Object.keys(rollouts).length
      ? [["rollout", (it) => {
        const r = rollouts[it.name];
        return r ? el("span", { class: "rollout", "data-state": r.state }, r.weight + "% " + r.state.replace("_", " ")) : "";
      }]]
      : [];
    table($("t-config"), [
      [k.key, (it) => el("b", {}, it[k.key])],
      [{ routes: "match → target", services: "endpoints", apps: "plan", plans: "limits" }[kind], (it) => summary(kind, it)],
      ...rolloutColumn,
      ["", (it) => el("span", { class: "actions" },
        el("button", { type: "button", class: "small", onclick: () => edit(it) }, "Edit"),
        del(it[k.key]))],
    ], body.items, "no " + kind);
    // The revision the list shows (tests wait for it to change).
    $("t-config").dataset.etag = etag || "";
  }

  // A delete button that asks once more.
  function del(name) {
    const b = el("button", { type: "button", class: "small danger" }, "Delete");
    b.addEventListener("click", async () => {
      if (!b.dataset.armed) {
        b.dataset.armed = "1";
        b.textContent = "Confirm delete";
        return;
      }
      const r = await api("DELETE", "/" + kind + "/" + encodeURIComponent(name), undefined, etag ? { "If-Match": etag } : {});
      if (r.status === 200) toast("Deleted " + name + " (revision " + r.body.revision + ")");
      else toast(problemText(r), true);
      await show();
    });
    return b;
  }

  function problemText(r) {
    const p = (r.body && r.body.problems) || [];
    return (r.body && r.body.error ? r.body.error : "HTTP " + r.status) + (p.length ? ": " + p.map((x) => x.path + " " + x.message).join("; ") : "");
  }

  function field(label, path, input, hint) {
    input.id = "f-" + path.replace(/\./g, "-");
    input.dataset.path = path;
    return el("div", { class: "field" },
      el("label", { for: input.id }, label),
      input,
      hint ? el("small", { class: "muted" }, hint) : null,
      el("div", { class: "field-error", dataset: { for: path } }));
  }

  function get(obj, path) {
    return path.split(".").reduce((o, k) => (o ? o[k] : undefined), obj);
  }

  function edit(item) {
    const editor = $("editor");
    editor.hidden = false;
    const isNew = !item;
    const k = KINDS[kind];
    const name = isNew ? "" : item[k.key];
    const form = el("form", { id: "edit-form", novalidate: true });
    form.append(el("h3", {}, (isNew ? "New " : "Edit ") + kind.replace(/s$/, "") + (name ? " " + name : "")));
    const general = el("div", { class: "field-error general", dataset: { for: "$" } });
    if (kind === "routes") {
      const rest = Object.assign({}, item || {});
      delete rest.name; delete rest.service; delete rest.strip_prefix; delete rest.auth;
      const match = Object.assign({}, rest.match || {});
      delete match.path_prefix; delete match.path; delete match.host; delete match.methods;
      if (Object.keys(match).length) rest.match = match; else delete rest.match;
      const text = (p) => el("input", { type: "text", value: get(item, p) === undefined ? "" : get(item, p) });
      const methods = el("input", { type: "text", value: (get(item, "match.methods") || []).join(", "), placeholder: "GET, POST" });
      const svc = el("select", {}, el("option", { value: "" }, "(none)"), services.map((s) => el("option", { value: s, selected: item && item.service === s }, s)));
      const auth = el("select", {}, ["none", "app_key", "jwt", "mtls"].map((a) => el("option", { value: a, selected: ((item && item.auth) || "none") === a }, a)));
      const strip = el("input", { type: "checkbox", checked: !!(item && item.strip_prefix) });
      const nameIn = text("name");
      if (!isNew) nameIn.readOnly = true;
      form.append(
        field("Name", "name", nameIn),
        el("div", { class: "row" },
          field("Path prefix", "match.path_prefix", text("match.path_prefix"), "e.g. /api"),
          field("Exact path", "match.path", text("match.path"))),
        el("div", { class: "row" },
          field("Host", "match.host", text("match.host"), "e.g. *.example.com"),
          field("Methods", "match.methods", methods)),
        el("div", { class: "row" },
          field("Service", "service", svc),
          field("Auth", "auth", auth)),
        field("Strip the prefix before forwarding", "strip_prefix", strip),
        field("Other keys (JSON)", "other", el("textarea", { rows: 4, spellcheck: "false" }, Object.keys(rest).length ? JSON.stringify(rest, null, 2) : "")),
      );
    } else {
      const body = Object.assign({}, item || {});
      delete body[k.key];
      const nameIn = el("input", { type: "text", value: name });
      if (!isNew) nameIn.readOnly = true;
      form.append(
        field(k.key === "id" ? "Id" : "Name", k.key, nameIn),
        field("Definition (JSON)", "other", el("textarea", { rows: 10, spellcheck: "false" }, JSON.stringify(body, null, 2))),
      );
    }
    form.append(general, el("div", { class: "buttons" },
      el("button", { type: "submit", id: "save" }, "Save"),
      el("button", { type: "button", class: "link", onclick: () => { editor.hidden = true; } }, "Cancel")));
    form.addEventListener("submit", (ev) => { ev.preventDefault(); save(form, isNew).catch(SG.report); });
    editor.replaceChildren(form);
    form.querySelector("input:not([readonly]), textarea").focus();
  }

  // The object the form describes; a JSON error is shown at its field.
  function collect(form) {
    const v = (p) => form.querySelector(`[data-path="${p}"]`);
    const other = v("other").value.trim();
    let obj = {};
    if (other) {
      try { obj = JSON.parse(other); } catch (e) { return { error: ["other", "not JSON: " + e.message] }; }
    }
    if (kind !== "routes") return { obj };
    const match = Object.assign({}, obj.match || {});
    for (const p of ["path_prefix", "path", "host"]) {
      const x = v("match." + p).value.trim();
      if (x) match[p] = x;
    }
    const methods = v("match.methods").value.split(/[\s,]+/).filter(Boolean).map((m) => m.toUpperCase());
    if (methods.length) match.methods = methods;
    if (Object.keys(match).length) obj.match = match;
    if (v("service").value) obj.service = v("service").value;
    if (v("auth").value !== "none") obj.auth = v("auth").value;
    if (v("strip_prefix").checked) obj.strip_prefix = true;
    return { obj };
  }

  function clearErrors(form) {
    for (const e of form.querySelectorAll(".field-error")) e.replaceChildren();
    for (const e of form.querySelectorAll(".invalid")) { e.classList.remove("invalid"); e.removeAttribute("aria-invalid"); }
  }

  // Shows `message` beside the field `path` names (a JSON path of the whole
  // config or of the item), or its nearest parent on the form, else in the
  // JSON box or at the foot of the form.
  function showProblem(form, path, message) {
    let rel = path.replace(/^\$\.[a-z_]+\[\d+\]/, "").replace(/^\$/, "").replace(/^\./, "");
    if (kind === "plans") rel = path.replace(/^\$\.plans\.[^.[]+/, "").replace(/^\$/, "").replace(/^\./, "");
    let key = rel.replace(/\[\d+\]/g, "");
    while (key && !form.querySelector(`.field-error[data-for="${key}"]`)) key = key.includes(".") ? key.slice(0, key.lastIndexOf(".")) : "";
    if (!key || (kind === "routes" && !ROUTE_FIELDS.includes(key))) key = form.querySelector('.field-error[data-for="other"]') && rel ? "other" : "$";
    const box = form.querySelector(`.field-error[data-for="${key}"]`);
    box.append(el("div", { class: "problem" }, el("code", {}, path), " ", message));
    const input = form.querySelector(`[data-path="${key}"]`);
    if (input) { input.classList.add("invalid"); input.setAttribute("aria-invalid", "true"); }
  }

  async function save(form, isNew) {
    clearErrors(form);
    const k = KINDS[kind];
    const name = form.querySelector(`[data-path="${k.key}"]`).value.trim();
    if (!name) return showProblem(form, "$." + k.key, "is required");
    const { obj, error } = collect(form);
    if (error) return showProblem(form, error[0], error[1]);
    const headers = etag ? { "If-Match": etag } : {};
    const r = await api("PUT", "/" + kind + "/" + encodeURIComponent(name), obj, headers);
    if (r.status === 200 || r.status === 201) {
      toast((isNew ? "Created " : "Saved ") + name + " (revision " + r.body.revision + ")");
      $("editor").hidden = true;
      return show();
    }
    if (r.status === 412) return showProblem(form, "$", "the config changed since this page read it: reload the list and try again");
    const problems = (r.body && r.body.problems) || [];
    if (!problems.length) return showProblem(form, "$", problemText(r));
    for (const p of problems) showProblem(form, p.path, p.message);
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const b of document.querySelectorAll("#config-tabs button")) {
      b.addEventListener("click", () => { $("editor").hidden = true; location.hash = "config/" + b.dataset.kind; });
    }
    $("config-new").addEventListener("click", () => edit(null));
  });

  SG.pages.config = { show, interval: 0 };
})();
