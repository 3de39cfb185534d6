// The gateway's web console: hash-routed pages over the /api/v1 routes. The API key lives in
// sessionStorage only and is sent as the bearer header; every user-supplied text is rendered as
// a text node (this file never assigns innerHTML).
"use strict";
(function () {
  const KEY = "gateway.key";
  const main = document.getElementById("main");
  const nav = document.getElementById("nav");
  const signoutButton = document.getElementById("signout");
  let me = null; // {user, keyScopes, admin}

  // ---- DOM helpers -------------------------------------------------------------------------
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  function show(...nodes) {
    main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
  }
  // Replaces `node`'s children, skipping empty slots.
  function fill(node, ...children) {
    node.replaceChildren();
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c);
  }
  const usd = (s) => (s === null || s === undefined ? "—" : s.startsWith("-") ? "-$" + s.slice(1) : "$" + s);
  // A link from the API is followed only when it is http(s) or on this origin (never `javascript:`).
  const safeUrl = (u) => (typeof u === "string" && (/^https?:\/\//i.test(u) || /^\/[^/\\]/.test(u)) ? u : null);
  const when = (s) => (s ? s.replace("T", " ").replace(/\.\d+Z$/, " UTC") : "—");
  function badge(status) {
    return h("span", { class: "badge " + status }, status);
  }
  function table(headers, rows, empty) {
    if (!rows.length) return h("p", { class: "muted" }, empty || "Nothing yet.");
    return h(
      "div",
      { class: "table-wrap" },
      h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", { class: x.num ? "num" : x.cls }, x.label || x)))),
        h("tbody", {}, rows))
    );
  }
  function pager(p, go) {
    return h(
      "div",
      { class: "pager" },
      h("button", { class: "secondary", type: "button", disabled: p.page <= 1, onclick: () => go(p.page - 1) }, "Previous"),
      h("span", { class: "muted" }, `Page ${p.page} of ${Math.max(1, p.total_pages)} (${p.total} in all)`),
      h("button", { class: "secondary", type: "button", disabled: p.page >= p.total_pages, onclick: () => go(p.page + 1) }, "Next")
    );
  }
  function message(text, cls) {
    return h("p", { class: cls || "error", role: cls === "ok" ? "status" : "alert" }, text);
  }

  // ---- API --------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, code, msg) {
      super(msg);
      this.status = status;
      this.code = code;
    }
  }
  async function api(method, path, body) {
    const headers = {};
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = "Bearer " + key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    let data = null;
    try {
      data = await res.json();
    } catch (_) {
      data = null;
    }
    if (!res.ok) {
      const e = (data && data.error) || {};
      throw new ApiError(res.status, e.code || "error", e.message || res.statusText || "request failed");
    }
    return data;
  }
  const get = (path) => api("GET", path);

  // ---- sign in and out --------------------------------------------------------------------
  function signOut(reason) {
    sessionStorage.removeItem(KEY);
    me = null;
    nav.replaceChildren();
    signoutButton.hidden = true;
    if (location.hash !== "#/signin") history.replaceState(null, "", "#/signin");
    signInPage(reason);
  }
  signoutButton.addEventListener("click", () => signOut());

  function signInPage(reason) {
    const input = h("input", { type: "password", id: "key", name: "key", autocomplete: "off", required: true, placeholder: "sk-…" });
    const status = h("div", { "aria-live": "polite" }, reason ? message(reason) : null);
    const form = h(
      "form",
      { class: "panel signin", onsubmit: async (e) => {
        e.preventDefault();
        sessionStorage.setItem(KEY, input.value.trim());
        input.value = "";
        try {
          await loadMe();
          location.hash = "#/overview";
          route();
        } catch (err) {
          sessionStorage.removeItem(KEY);
          fill(status, message(err.status === 401 ? "That key was refused: " + err.message : "Could not sign in: " + err.message));
        }
      } },
      h("h1", {}, "Sign in"),
      h("label", { for: "key" }, "API key", input),
      h("p", { class: "muted" }, "The key stays in this tab (sessionStorage) and is sent only to this gateway."),
      h("button", { type: "submit" }, "Sign in"),
      status
    );
    show(form);
    input.focus();
  }

  async function loadMe() {
    const overview = await get("/api/v1/overview");
    const keys = await get("/api/v1/keys").catch(() => ({ data: [] }));
    const secret = sessionStorage.getItem(KEY) || "";
    const mine = keys.data.find((k) => !k.revoked_at && secret.startsWith(k.prefix));
    let admin = false;
    if (overview.user.role === "admin") admin = await get("/api/v1/admin/maintenance").then(() => true, () => false);
    me = { user: overview.user, keyScopes: mine ? mine.scopes : [], keyId: mine ? mine.id : null, admin };
    renderNav();
    signoutButton.hidden = false;
    return overview;
  }

  const PAGES = [
    ["overview", "Overview"], ["tasks", "Tasks"], ["ledger", "Ledger"], ["keys", "Keys"],
    ["playground", "Playground"], ["settings", "Settings"],
  ];
  const ADMIN_PAGES = [["admin/users", "Users"], ["admin/models", "Models"], ["admin/health", "Health"], ["admin/audit", "Audit"]];
  function renderNav() {
    const links = PAGES.map(([p, label]) => h("a", { href: "#/" + p, "data-page": p }, label));
    if (me && me.admin) {
      links.push(h("span", { class: "sep", "aria-hidden": "true" }, "|"));
      for (const [p, label] of ADMIN_PAGES) links.push(h("a", { href: "#/" + p, "data-page": p }, label));
    }
    nav.replaceChildren(...links);
  }
  function markNav(page) {
    for (const a of nav.querySelectorAll("a")) {
      if (page.startsWith(a.dataset.page)) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
  }

  // ---- router -----------------------------------------------------------------------------
  async function route() {
    const path = (location.hash || "#/overview").slice(2).split("?")[0];
    if (!sessionStorage.getItem(KEY)) return signInPage();
    try {
      if (!me) await loadMe();
      const [page, ...rest] = path.split("/");
      markNav(path);
      show(h("p", { class: "muted" }, "Loading…"));
      if (page === "overview" || page === "") await overviewPage();
      else if (page === "tasks" && rest.length) await taskPage(decodeURIComponent(rest.join("/")));
      else if (page === "tasks") await tasksPage();
      else if (page === "ledger") await ledgerPage(1);
      else if (page === "keys") await keysPage();
      else if (page === "playground") await playgroundPage();
      else if (page === "settings") settingsPage();
      else if (page === "admin" && rest[0] === "users" && rest[1]) await adminUserPage(decodeURIComponent(rest[1]));
      else if (page === "admin" && rest[0] === "users") await adminUsersPage();
      else if (page === "admin" && rest[0] === "models") await adminModelsPage();
      else if (page === "admin" && rest[0] === "health") await adminHealthPage();
      else if (page === "admin" && rest[0] === "audit") await adminAuditPage(1);
      else show(h("h1", {}, "Not found"), h("p", {}, "No such page."));
      main.focus({ preventScroll: true });
    } catch (err) {
      if (err.status === 401) return signOut("Your key was refused: " + err.message);
      show(message("Could not load the page: " + err.message));
    }
  }
  window.addEventListener("hashchange", route);

  // ---- customer pages ---------------------------------------------------------------------
  async function overviewPage() {
    const [overview, usage] = await Promise.all([get("/api/v1/overview"), get("/api/v1/usage?group_by=day")]);
    const days = usage.data;
    const sum = (n) => days.slice(-n).reduce((a, d) => a + d.spent_microusd, 0);
    // Integer micro-USD to its 6-decimal text without floating point, as the API writes amounts.
    const money = (micros) => `$${Math.trunc(micros / 1e6)}.${String(micros % 1e6).padStart(6, "0")}`;
    const chart = window.GatewayChart.dailyChart(days, "Daily spend by model, last 30 days");
    show(
      h("h1", {}, "Overview"),
      h(
        "div",
        { class: "cards" },
        h("div", { class: "card" }, h("div", { class: "label" }, "Balance"), h("div", { class: "value", id: "balance" }, usd(overview.user.balance_usd))),
        h("div", { class: "card" }, h("div", { class: "label" }, "Spent today"), h("div", { class: "value", id: "spent-today" }, money(sum(1)))),
        h("div", { class: "card" }, h("div", { class: "label" }, "Last 7 days"), h("div", { class: "value" }, money(sum(7)))),
        h("div", { class: "card" }, h("div", { class: "label" }, "Last 30 days"), h("div", { class: "value" }, money(sum(30)))),
        h("div", { class: "card" }, h("div", { class: "label" }, "Tasks running"), h("div", { class: "value" }, overview.stats.active))
      ),
      h("h2", {}, "Daily spend by model"),
      h("div", { class: "panel", id: "spend-chart" }, chart.svg, chart.legend),
      overview.maintenance ? message("Maintenance mode is on: generation calls answer 503.") : null,
      h("h2", {}, "Newest ledger entries"),
      ledgerTable(overview.ledger.slice(0, 10))
    );
  }

  function ledgerTable(entries) {
    return table(
      ["When", "Kind", { label: "Amount", num: true }, { label: "Balance after", num: true }, { label: "Note", cls: "hide-narrow" }],
      entries.map((e) =>
        h("tr", {}, h("td", {}, when(e.created_at)), h("td", {}, e.kind), h("td", { class: "num" }, usd(e.amount_usd)),
          h("td", { class: "num" }, usd(e.balance_after)), h("td", { class: "hide-narrow" }, e.description))
      ),
      "No ledger entries."
    );
  }

  async function ledgerPage(n) {
    const page = await get(`/api/v1/ledger?page=${n}&page_size=50`);
    show(h("h1", {}, "Ledger"), ledgerTable(page.data), pager(page.pagination, ledgerPage));
  }

  const STATUSES = ["", "running", "completed", "submitting", "queued", "processing", "succeeded", "failed", "cancelled", "expired"];
  const KINDS = ["", "language", "image", "audio", "video"];
  async function tasksPage() {
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    const status = params.get("status") || "";
    const kind = params.get("kind") || "";
    const n = Number(params.get("page") || 1);
    const q = new URLSearchParams({ page: String(n), page_size: "20" });
    if (status) q.set("status", status);
    if (kind) q.set("kind", kind);
    const page = await get("/api/v1/tasks?" + q);
    const go = (s, k, p) => {
      const next = new URLSearchParams();
      if (s) next.set("status", s);
      if (k) next.set("kind", k);
      if (p > 1) next.set("page", String(p));
      location.hash = "#/tasks" + (String(next) ? "?" + next : "");
    };
    const statusSelect = h("select", { id: "status-filter", onchange: (e) => go(e.target.value, kind, 1) },
      STATUSES.map((s) => h("option", { value: s, selected: s === status }, s || "any status")));
    const kindSelect = h("select", { id: "kind-filter", onchange: (e) => go(status, e.target.value, 1) },
      KINDS.map((k) => h("option", { value: k, selected: k === kind }, k || "any kind")));
    show(
      h("h1", {}, "Tasks"),
      h("div", { class: "row" }, h("label", {}, "Status", statusSelect), h("label", {}, "Kind", kindSelect)),
      table(
        ["Task", "Model", "Status", { label: "Charged", num: true }, { label: "Created", cls: "hide-narrow" }],
        page.data.map((t) =>
          h("tr", {}, h("td", {}, h("a", { href: "#/tasks/" + encodeURIComponent(t.id) }, t.id)), h("td", {}, t.model),
            h("td", {}, badge(t.status)), h("td", { class: "num" }, usd(t.billing && (t.billing.actual_amount || t.billing.estimated_amount))),
            h("td", { class: "hide-narrow" }, when(t.created_at)))
        ),
        "No tasks match."
      ),
      pager(page.pagination, (p) => go(status, kind, p))
    );
  }

  async function taskPage(id) {
    const t = await get("/api/v1/tasks/" + encodeURIComponent(id));
    const b = t.billing || {};
    const status = h("div", { "aria-live": "polite" });
    const rows = [
      ["Status", badge(t.status)], ["Model", t.model], ["Kind", t.kind || "—"], ["Created", when(t.created_at)],
      ["Completed", when(t.completed_at)], ["Prompt", t.prompt ? h("pre", { class: "prompt" }, t.prompt) : "—"],
      ["Billing status", b.status || "—"], ["Held (estimate)", usd(b.estimated_amount)], ["Charged", usd(b.actual_amount)],
      ["Balance after", usd(b.balance_after)], ["Price version", b.pricing_version_id || "—"],
    ];
    if (t.error_code) rows.push(["Error", `${t.error_code}: ${t.error_message || ""}`]);
    let result = null;
    const output = safeUrl(t.output_url);
    const lastFrame = safeUrl(t.last_frame_url);
    if (output && t.kind === "video") {
      result = h("div", {}, h("h2", {}, "Result"), h("video", { class: "result", src: output, controls: true, id: "task-video" }),
        lastFrame ? h("p", {}, h("a", { href: lastFrame, rel: "noreferrer" }, "Last frame")) : null);
    } else if (output) {
      result = h("div", {}, h("h2", {}, "Result"), h("p", {}, h("a", { href: output, rel: "noreferrer" }, output)));
    }
    show(
      h("h1", {}, "Task " + t.id),
      h("div", { class: "table-wrap" }, h("table", {}, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))))),
      b.usage ? h("div", {}, h("h2", {}, "Usage"), h("pre", {}, JSON.stringify(b.usage, null, 2))) : null,
      result,
      t.status === "queued"
        ? h("button", { class: "danger", type: "button", id: "cancel-task", onclick: async () => {
            try {
              await api("DELETE", "/api/v1/tasks/" + encodeURIComponent(t.id));
              await taskPage(id);
            } catch (err) {
              fill(status, message("Could not cancel: " + err.message));
            }
          } }, "Cancel task")
        : null,
      status,
      h("p", {}, h("a", { href: "#/tasks" }, "Back to tasks"))
    );
  }

  const SCOPES = ["models:read", "task:read", "task:write", "video:create", "image:create", "language:create", "audio:create", "overview:read", "keys:manage", "admin"];
  async function keysPage(shown) {
    const keys = await get("/api/v1/keys");
    const canManage = me.keyScopes.includes("keys:manage");
    const status = h("div", { "aria-live": "polite" }, shown || null);
    const name = h("input", { id: "key-name", required: true, maxlength: 100, placeholder: "ci-runner" });
    const boxes = me.keyScopes.map((s) => h("label", { class: "check" }, h("input", { type: "checkbox", value: s, name: "scope" }), s));
    const form = canManage
      ? h("form", { class: "panel", id: "new-key", onsubmit: async (e) => {
          e.preventDefault();
          const scopes = boxes.map((b) => b.firstChild).filter((c) => c.checked).map((c) => c.value);
          try {
            const made = await api("POST", "/api/v1/keys", { name: name.value, scopes });
            const secret = h("div", { class: "secret", id: "new-secret" }, made.secret);
            const copy = h("button", { type: "button", class: "secondary", onclick: () => navigator.clipboard && navigator.clipboard.writeText(made.secret) }, "Copy");
            await keysPage(h("div", { class: "panel" }, h("p", { class: "ok", role: "status" }, `Key ${made.name} created. Copy its secret now: it is not shown again.`), secret, copy));
          } catch (err) {
            fill(status, message("Could not create the key: " + err.message));
          }
        } },
        h("h2", {}, "New key"), h("div", { class: "row" }, h("label", { for: "key-name" }, "Name", name)),
        h("fieldset", {}, h("legend", {}, "Scopes (at most the scopes of the key you signed in with)"), boxes),
        h("button", { type: "submit" }, "Create key"))
      : h("p", { class: "muted" }, "The key you signed in with lacks keys:manage, so it cannot create or revoke keys.");
    show(
      h("h1", {}, "API keys"), status, form,
      table(
        ["Name", "Prefix", "Scopes", { label: "Spent", num: true }, "State", ""],
        keys.data.map((k) =>
          h("tr", { "data-key": k.id }, h("td", {}, k.name), h("td", {}, k.prefix + "…"), h("td", {}, k.scopes.join(", ")),
            h("td", { class: "num" }, usd(k.spent_usd)), h("td", {}, k.revoked_at ? "revoked" : k.id === me.keyId ? "in use" : "active"),
            h("td", {}, !k.revoked_at && canManage ? h("button", { class: "danger", type: "button", "aria-label": "Revoke " + k.name, onclick: async () => {
              if (!confirm(`Revoke ${k.name}? Calls with it will be refused.`)) return;
              try {
                await api("DELETE", "/api/v1/keys/" + encodeURIComponent(k.id));
                if (k.id === me.keyId) return signOut("You revoked the key you signed in with.");
                await keysPage(message(`Key ${k.name} revoked.`, "ok"));
              } catch (err) {
                fill(status, message("Could not revoke: " + err.message));
              }
            } }, "Revoke") : null))
        )
      )
    );
  }

  async function playgroundPage() {
    const models = (await get("/api/v1/models")).data.filter((m) => m.kind === "language" || m.kind === "image");
    const select = h("select", { id: "pg-model" }, models.map((m) => h("option", { value: m.id || m.name }, `${m.id || m.name} (${m.kind})`)));
    const prompt = h("textarea", { id: "pg-prompt", placeholder: "Say hello", required: true });
    const maxTokens = h("input", { id: "pg-max", type: "number", min: 1, value: 256 });
    const price = h("div", { id: "pg-price", class: "muted" });
    const hold = h("div", { id: "pg-hold", "aria-live": "polite" });
    const output = h("pre", { id: "pg-output", "aria-live": "polite" });
    const status = h("div", { id: "pg-status", "aria-live": "polite" });
    const model = () => models.find((m) => (m.id || m.name) === select.value);
    const body = () => {
      const m = model();
      if (m.kind === "image") return { model: select.value, prompt: prompt.value };
      return { model: select.value, messages: [{ role: "user", content: prompt.value }], max_tokens: Number(maxTokens.value) || 256, stream: true };
    };
    const quotePath = () => (model().kind === "image" ? "/api/v1/images/generations/quote" : "/api/v1/chat/completions/quote");
    let timer = null;
    async function quote() {
      const m = model();
      fill(price, "Price: ",
        Object.entries(m.pricing || {}).map(([k, r]) => h("span", { class: "badge" }, `${k}: ${r.amountMicrousd} µUSD / ${r.denominator} ${r.unit}`)));
      if (!prompt.value.trim()) return fill(hold, h("span", { class: "muted" }, "Type a prompt to see the hold."));
      try {
        const q = await api("POST", quotePath(), body());
        fill(hold, `This call will hold ${usd(q.hold_usd)} until it is settled at its actual cost.`);
      } catch (err) {
        fill(hold, message(err.message));
      }
    }
    const requote = () => {
      clearTimeout(timer);
      timer = setTimeout(quote, 250);
    };
    for (const input of [select, prompt, maxTokens]) input.addEventListener("input", requote);
    const send = h("button", { type: "submit", id: "pg-send" }, "Send");
    const form = h("form", { class: "panel", onsubmit: async (e) => {
      e.preventDefault();
      send.disabled = true;
      fill(output, );
      fill(status, h("span", { class: "muted" }, "Running…"));
      try {
        if (model().kind === "image") await runImage(body(), output, status);
        else await runChat(body(), output, status);
      } catch (err) {
        fill(status, message(err.message));
      } finally {
        send.disabled = false;
      }
    } },
      h("div", { class: "row" }, h("label", { for: "pg-model" }, "Model", select), h("label", { for: "pg-max" }, "Max tokens", maxTokens)),
      h("label", { for: "pg-prompt" }, "Prompt", prompt), price, hold, send);
    show(h("h1", {}, "Playground"), form, status, output);
    quote();
  }

  async function runChat(body, output, status) {
    const res = await fetch("/api/v1/chat/completions", {
      method: "POST",
      headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY), "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!res.ok) {
      const data = await res.json().catch(() => ({}));
      throw new Error((data.error && data.error.message) || res.statusText);
    }
    const taskId = res.headers.get("x-svc-task-id");
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffered.indexOf("\n\n")) >= 0) {
        const frame = buffered.slice(0, cut);
        buffered = buffered.slice(cut + 2);
        for (const line of frame.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          let chunk;
          try {
            chunk = JSON.parse(data);
          } catch (_) {
            continue;
          }
          if (chunk.error) throw new Error(chunk.error.message || "the stream failed");
          const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
          if (delta && delta.content) {
            text += delta.content;
            output.textContent = text;
          }
        }
      }
    }
    // The stream's last event comes after the call is settled, so the task has its charge.
    const task = taskId ? await get("/api/v1/tasks/" + encodeURIComponent(taskId)).catch(() => null) : null;
    const charged = task && task.billing && task.billing.actual_amount ? ` Charged ${usd(task.billing.actual_amount)}.` : "";
    fill(status,
      h("span", { class: "ok", role: "status" }, "Done." + charged + " "),
      taskId ? h("a", { href: "#/tasks/" + encodeURIComponent(taskId), id: "pg-task" }, "Task " + taskId) : null);
  }

  async function runImage(body, output, status) {
    const answer = await api("POST", "/api/v1/images/generations", body);
    const images = (answer.data || []).map((d) => (safeUrl(d.url) ? h("img", { class: "result", src: safeUrl(d.url), alt: "Generated image" }) : null));
    fill(output, ...images);
    fill(status, 
      h("span", { class: "ok", role: "status" }, `Done. Charged ${usd(answer.billing && answer.billing.actual_amount)}. `),
      h("a", { href: "#/tasks/" + encodeURIComponent(answer.task_id), id: "pg-task" }, "Task " + answer.task_id)
    );
  }

  function settingsPage() {
    const status = h("div", { "aria-live": "polite" });
    show(
      h("h1", {}, "Settings"),
      h("div", { class: "panel" },
        h("h2", {}, "Webhook secret"),
        h("p", {}, "Video task webhooks are signed with this secret (X-Svc-Webhook-Signature). Rotating it shows the new one once; webhooks signed from then on use it."),
        me.keyScopes.includes("keys:manage")
          ? h("button", { type: "button", id: "rotate-secret", onclick: async () => {
              if (!confirm("Replace the webhook secret? Receivers must switch to the new one.")) return;
              try {
                const r = await api("POST", "/api/v1/webhook-secret");
                fill(status, h("p", { class: "ok", role: "status" }, "New secret (shown once):"), h("div", { class: "secret" }, r.webhook_secret));
              } catch (err) {
                fill(status, message(err.message));
              }
            } }, "Rotate webhook secret")
          : h("p", { class: "muted" }, "Needs a key with keys:manage."),
        status)
    );
  }

  // ---- operator pages ---------------------------------------------------------------------
  async function adminUsersPage() {
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    const q = params.get("q") || "";
    const n = Number(params.get("page") || 1);
    const query = new URLSearchParams({ page: String(n), page_size: "20" });
    if (q) query.set("q", q);
    const page = await get("/api/v1/admin/users?" + query);
    const search = h("input", { id: "user-search", type: "search", value: q, placeholder: "name, email or id" });
    const go = (text, p) => {
      const next = new URLSearchParams();
      if (text) next.set("q", text);
      if (p > 1) next.set("page", String(p));
      location.hash = "#/admin/users" + (String(next) ? "?" + next : "");
    };
    const status = h("div", { "aria-live": "polite" });
    const fields = {
      name: h("input", { id: "nu-name", required: true }), email: h("input", { id: "nu-email", type: "email", required: true }),
      balance: h("input", { id: "nu-balance", value: "0", inputmode: "decimal" }),
      role: h("select", { id: "nu-role" }, h("option", { value: "user" }, "user"), h("option", { value: "admin" }, "admin")),
    };
    const create = h("form", { class: "panel", onsubmit: async (e) => {
      e.preventDefault();
      try {
        const u = await api("POST", "/api/v1/admin/users", { name: fields.name.value, email: fields.email.value, balance: fields.balance.value, role: fields.role.value });
        location.hash = "#/admin/users/" + encodeURIComponent(u.id);
      } catch (err) {
        fill(status, message(err.message));
      }
    } }, h("h2", {}, "New user"), h("div", { class: "row" },
      h("label", { for: "nu-name" }, "Name", fields.name), h("label", { for: "nu-email" }, "Email", fields.email),
      h("label", { for: "nu-balance" }, "Balance (USD)", fields.balance), h("label", { for: "nu-role" }, "Role", fields.role),
      h("button", { type: "submit" }, "Create")), status);
    show(
      h("h1", {}, "Users"),
      h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); go(search.value.trim(), 1); } },
        h("label", { for: "user-search" }, "Search", search), h("button", { type: "submit" }, "Search")),
      table(
        ["User", "Email", "Role", { label: "Balance", num: true }, "State"],
        page.data.map((u) => h("tr", {}, h("td", {}, h("a", { href: "#/admin/users/" + encodeURIComponent(u.id) }, u.name)),
          h("td", {}, u.email), h("td", {}, u.role), h("td", { class: "num" }, usd(u.balance_usd)), h("td", {}, u.disabled ? "disabled" : "active"))),
        "No users match."
      ),
      pager(page.pagination, (p) => go(q, p)),
      create
    );
  }

  async function adminUserPage(id) {
    const u = await get("/api/v1/admin/users/" + encodeURIComponent(id));
    const status = h("div", { "aria-live": "polite" });
    const amount = h("input", { id: "topup-amount", inputmode: "decimal", required: true, placeholder: "25.00" });
    const note = h("input", { id: "topup-note", maxlength: 500, placeholder: "invoice 42" });
    const cap = h("input", { id: "user-cap", type: "number", min: 1, max: 100000, value: u.concurrency_limit });
    const reload = async (text) => {
      await adminUserPage(id);
      main.prepend(message(text, "ok"));
    };
    show(
      h("h1", {}, u.name),
      h("div", { class: "cards" },
        h("div", { class: "card" }, h("div", { class: "label" }, "Balance"), h("div", { class: "value", id: "user-balance" }, usd(u.balance_usd))),
        h("div", { class: "card" }, h("div", { class: "label" }, "Email"), h("div", { class: "value" }, u.email)),
        h("div", { class: "card" }, h("div", { class: "label" }, "Role"), h("div", { class: "value" }, u.role)),
        h("div", { class: "card" }, h("div", { class: "label" }, "State"), h("div", { class: "value" }, u.disabled ? "disabled" : "active")),
        h("div", { class: "card" }, h("div", { class: "label" }, "Media"), h("div", { class: "value" }, `${u.media_used_bytes} / ${u.media_quota_bytes} B`))),
      h("form", { class: "panel", id: "topup", onsubmit: async (e) => {
        e.preventDefault();
        try {
          const entry = await api("POST", `/api/v1/admin/users/${encodeURIComponent(id)}/topup`, { amount: amount.value.trim(), note: note.value });
          await reload(`Added ${usd(entry.amount_usd)}; the balance is now ${usd(entry.balance_after)}.`);
        } catch (err) {
          fill(status, message(err.message));
        }
      } }, h("h2", {}, "Top up"), h("div", { class: "row" }, h("label", { for: "topup-amount" }, "Amount (USD)", amount),
        h("label", { for: "topup-note" }, "Note", note), h("button", { type: "submit" }, "Add money"))),
      h("form", { class: "panel", onsubmit: async (e) => {
        e.preventDefault();
        try {
          await api("PATCH", "/api/v1/admin/users/" + encodeURIComponent(id), { concurrency_limit: Number(cap.value) });
          await reload("Cap saved.");
        } catch (err) {
          fill(status, message(err.message));
        }
      } }, h("h2", {}, "Caps and access"), h("div", { class: "row" }, h("label", { for: "user-cap" }, "Concurrent calls", cap),
        h("button", { type: "submit" }, "Save cap"),
        h("button", { type: "button", class: u.disabled ? "" : "danger", id: "toggle-user", onclick: async () => {
          try {
            await api("PATCH", "/api/v1/admin/users/" + encodeURIComponent(id), { disabled: !u.disabled });
            await reload(u.disabled ? "User enabled." : "User disabled: every key is refused.");
          } catch (err) {
            fill(status, message(err.message));
          }
        } }, u.disabled ? "Enable user" : "Disable user"))),
      status,
      h("h2", {}, "Keys"),
      table(["Name", "Prefix", "Scopes", { label: "Spent", num: true }, "State"],
        u.keys.map((k) => h("tr", {}, h("td", {}, k.name), h("td", {}, k.prefix + "…"), h("td", {}, k.scopes.join(", ")),
          h("td", { class: "num" }, usd(k.spent_usd)), h("td", {}, k.revoked_at ? "revoked" : "active")))),
      h("p", {}, h("a", { href: "#/admin/users" }, "Back to users"))
    );
  }

  async function adminModelsPage() {
    const list = await get("/api/v1/admin/models");
    const status = h("div", { "aria-live": "polite" });
    const reload = async (text) => {
      await adminModelsPage();
      main.prepend(message(text, "ok"));
    };
    const fail = (err) => fill(status, message(err.message));
    const maintenance = h("button", { type: "button", id: "maintenance", class: list.maintenance ? "" : "danger", onclick: async () => {
      try {
        await api("PUT", "/api/v1/admin/maintenance", { enabled: !list.maintenance });
        await reload(list.maintenance ? "Maintenance off." : "Maintenance on: generation calls answer 503.");
      } catch (err) {
        fail(err);
      }
    } }, list.maintenance ? "Turn maintenance off" : "Turn maintenance on");
    const priceModel = h("select", { id: "price-model" }, list.data.map((m) => h("option", { value: m.model }, m.model)));
    const sheet = h("textarea", { id: "price-sheet", spellcheck: "false" });
    const fill = () => {
      const m = list.data.find((x) => x.model === priceModel.value);
      sheet.value = JSON.stringify((m && m.pricing) || {}, null, 2);
    };
    priceModel.addEventListener("change", fill);
    fill();
    show(
      h("h1", {}, "Models"),
      h("div", { class: "panel" }, h("p", {}, "Maintenance mode is ", h("strong", {}, list.maintenance ? "on" : "off"), "."), maintenance),
      status,
      table(["Model", "Kind", "Enabled", { label: "Cap", num: true }, "Price version", ""],
        list.data.map((m) => {
          const cap = h("input", { type: "number", min: 1, max: 100000, value: m.concurrency_limit, "aria-label": "Cap of " + m.model, size: 6 });
          return h("tr", {}, h("td", {}, m.model), h("td", {}, m.kind), h("td", {}, m.enabled ? "yes" : "no"), h("td", { class: "num" }, cap),
            h("td", {}, m.pricing_version === null ? "unpriced" : "v" + m.pricing_version),
            h("td", {}, h("div", { class: "row" },
              h("button", { type: "button", class: "secondary", onclick: async () => {
                try { await api("PATCH", "/api/v1/admin/models/" + encodeURIComponent(m.model), { concurrency_limit: Number(cap.value) }); await reload(`${m.model}: cap ${cap.value}.`); } catch (err) { fail(err); }
              } }, "Save cap"),
              h("button", { type: "button", class: m.enabled ? "danger" : "", onclick: async () => {
                try { await api("PATCH", "/api/v1/admin/models/" + encodeURIComponent(m.model), { enabled: !m.enabled }); await reload(`${m.model} ${m.enabled ? "disabled" : "enabled"}.`); } catch (err) { fail(err); }
              } }, m.enabled ? "Disable" : "Enable"))));
        })),
      h("form", { class: "panel", onsubmit: async (e) => {
        e.preventDefault();
        let rates;
        try { rates = JSON.parse(sheet.value); } catch (err) { return fail(new Error("The rates are not valid JSON: " + err.message)); }
        try {
          const v = await api("POST", `/api/v1/admin/models/${encodeURIComponent(priceModel.value)}/pricing`, rates);
          await reload(`${v.model}: price version ${v.pricing_version} is active.`);
        } catch (err) { fail(err); }
      } }, h("h2", {}, "New price version"), h("label", { for: "price-model" }, "Model", priceModel),
        h("label", { for: "price-sheet" }, "Rates (JSON: name → {amountMicrousd, denominator, unit})", sheet),
        h("button", { type: "submit" }, "Publish version"))
    );
  }

  async function adminHealthPage() {
    const health = await get("/api/v1/admin/health");
    const card = (label, value, id) => h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value", id }, value));
    const endpoints = [];
    for (const r of health.replicas) for (const e of r.endpoints) endpoints.push([r.replica, e]);
    show(
      h("h1", {}, "Health"),
      h("div", { class: "cards" },
        card("Calls in flight (this replica)", health.calls_in_flight, "in-flight"),
        card("Open reservations", health.open_reservations, "open-reservations"),
        card("Oldest active video task", health.oldest_active_video_secs === null ? "none" : health.oldest_active_video_secs + " s", "worker-lag"),
        card("Maintenance", health.maintenance ? "on" : "off")),
      h("h2", {}, "Upstream endpoints"),
      table(["Replica", "Pool", "Endpoint", "State", { label: "Attempts", num: true }, { label: "Failures", num: true }, "Errors"],
        endpoints.map(([replica, e]) => h("tr", {}, h("td", {}, replica), h("td", {}, e.pool), h("td", {}, e.name), h("td", {}, e.state),
          h("td", { class: "num" }, e.attempts), h("td", { class: "num" }, e.failures),
          h("td", {}, Object.entries(e.errors || {}).map(([k, v]) => `${k}: ${v}`).join(", ") || "none"))),
        "No replica has reported its endpoints yet.")
    );
  }

  async function adminAuditPage(n) {
    const page = await get(`/api/v1/admin/audit?page=${n}&page_size=50`);
    const state = (v) => (v === null || v === undefined ? "—" : h("code", {}, JSON.stringify(v)));
    show(
      h("h1", {}, "Audit"),
      table(["When", "Who", "Action", "Target", { label: "Before", cls: "hide-narrow" }, "After"],
        page.data.map((a) => h("tr", {}, h("td", {}, when(a.at)), h("td", {}, a.actor), h("td", {}, a.action), h("td", {}, a.target),
          h("td", { class: "hide-narrow" }, state(a.before)), h("td", {}, state(a.after)))),
        "No operator actions yet."),
      pager(page.pagination, adminAuditPage)
    );
  }

  route();
})();
