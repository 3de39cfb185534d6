// The gateway's web console: hash-routed pages over the /api/v1 routes. The API key lives in
// sessionStorage only and is sent as the bearer header; every user-supplied text is rendered as
// a text node (this file never assigns innerHTML). Money is integer micro-USD in BigInt, never a
// float: prices, charges and the price form convert exactly.
"use strict";
(function () {
  const KEY = "gateway.key";
  const main = document.getElementById("main");
  const top = document.querySelector("header.top");
  const nav = document.getElementById("nav");
  const menuButton = document.getElementById("menu");
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
  // The low-balance banner (filled by showAlert below) stays at the top of every page.
  const banner = document.createElement("div");
  banner.id = "low-balance";
  banner.className = "low-balance";
  banner.setAttribute("role", "status");
  banner.hidden = true;
  function show(...nodes) {
    main.replaceChildren(banner, ...nodes.filter((n) => n !== null && n !== undefined && n !== false));
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
  const shortWhen = (s) => (s ? s.slice(0, 16).replace("T", " ") : "—");
  // A timestamp as date and time that wrap as two units (never more than two lines).
  function whenCell(s) {
    if (!s) return "—";
    const [date, rest] = s.split("T");
    return h("span", { class: "when", title: when(s) }, h("span", {}, date), " ", h("span", {}, rest.replace(/\.\d+Z$/, "").slice(0, 8)));
  }
  function badge(status, cls) {
    return h("span", { class: "badge " + (cls || status) }, status);
  }
  // headers: text or {label, num, cls}; a `cls` of "hide-narrow" hides the column at ≤ 600 px.
  function table(headers, rows, empty, cls) {
    if (!rows.length) return h("p", { class: "muted" }, empty || "Nothing yet.");
    return h(
      "div",
      { class: "table-wrap" },
      h("table", { class: cls }, h("thead", {}, h("tr", {}, headers.map((x) => h("th", { class: [x.num ? "num" : "", x.cls || ""].join(" ").trim() || null }, x.label === undefined ? x : x.label)))),
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
  const card = (label, value, id) => h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value", id }, value));

  // ---- money: exact, in BigInt micro-USD --------------------------------------------------
  const MICRO = 1000000n;
  const group3 = (digits) => digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  // `value / 10^scale` as decimal text with trailing zeros trimmed down to `minDecimals`.
  function decimal(value, scale, minDecimals) {
    let v = BigInt(value);
    const negative = v < 0n;
    if (negative) v = -v;
    const unit = 10n ** BigInt(scale);
    let frac = scale ? String(v % unit).padStart(scale, "0").replace(/0+$/, "") : "";
    if (frac.length < minDecimals) frac = frac.padEnd(minDecimals, "0");
    return (negative ? "-" : "") + group3(String(v / unit)) + (frac ? "." + frac : "");
  }
  // Micro-USD as dollars: "$0.14", "$0.0025", "-$1,250.00"; `fixed` keeps all six decimals.
  function dollars(micros, fixed, signed) {
    const text = decimal(micros, 6, fixed ? 6 : 2);
    if (text.startsWith("-")) return "-$" + text.slice(1);
    return (signed && BigInt(micros) > 0n ? "+$" : "$") + text;
  }
  // Dollars typed by a person ("0.29", "$1,000.5") to BigInt micro-USD, exactly; an Error says why not.
  function parseDollars(text) {
    const t = String(text).trim().replace(/^\$/, "").replace(/,/g, "");
    const m = /^(\d*)(?:\.(\d*))?$/.exec(t);
    if (!m || (m[1] === "" && !m[2])) throw new Error(`"${text}" is not an amount in dollars such as 0.14`);
    if ((m[2] || "").length > 6) throw new Error(`"${text}" has more than six decimals (the smallest amount is $0.000001)`);
    return BigInt(m[1] || "0") * MICRO + BigInt((m[2] || "").padEnd(6, "0"));
  }
  // The API's USD text ("12.340000", "-0.500000") as BigInt micro-USD, exactly.
  const usdMicros = (s) => (String(s).startsWith("-") ? -parseDollars(String(s).slice(1)) : parseDollars(s));
  // The API's USD text as dollars, exact and short: "$12.34", "$0.0025", "-$0.50".
  const money = (s) => (s === null || s === undefined ? "—" : dollars(usdMicros(s)));
  // BigInt micro-USD as the API's USD text ("5.000000"): no "$", no grouping.
  function usdText(micros) {
    const v = BigInt(micros);
    const a = v < 0n ? -v : v;
    return (v < 0n ? "-" : "") + String(a / MICRO) + "." + String(a % MICRO).padStart(6, "0");
  }

  // ---- prices: a rate {amountMicrousd, denominator, unit} named like "input_tokens" ---------
  const UNITS = { token: ["token", "tokens"], token_hour: ["token-hour", "token-hours"], image: ["image", "images"], second: ["second", "seconds"] };
  const unitWords = (unit) => UNITS[unit] || [unit.replace(/_/g, " "), unit.replace(/_/g, " ") + (unit.endsWith("s") ? "" : "s")];
  // 1 → "", 1000000 → "1M", 1000 → "1K", 1024 → "1,024".
  function perCount(denominator) {
    const n = BigInt(denominator);
    if (n === 1n) return "";
    for (const [v, s] of [[1000000000n, "B"], [1000000n, "M"], [1000n, "K"]]) if (n % v === 0n) return group3(String(n / v)) + s;
    return group3(String(n));
  }
  // "$0.14 / 1M input tokens", "$0.036 / image (text to image)", "$0.0025 / second (output audio)",
  // "$0.10 / 1M cache hit tokens (prompt ≤ 128K)".
  function rateText(name, rate) {
    const notes = [];
    let base = String(name);
    let m;
    if ((m = /_gt_(\d+)k_lte_(\d+)k$/.exec(base))) { notes.push(`prompt ${m[1]}K–${m[2]}K`); base = base.slice(0, m.index); }
    else if ((m = /_lte_(\d+)k$/.exec(base))) { notes.push(`prompt ≤ ${m[1]}K`); base = base.slice(0, m.index); }
    else if ((m = /_gt_(\d+)k$/.exec(base))) { notes.push(`prompt > ${m[1]}K`); base = base.slice(0, m.index); }
    if ((m = /_(lte|gt)_(\d+)_pixels$/.exec(base))) {
      notes.push(`${m[1] === "lte" ? "≤" : ">"} ${decimal(m[2], 6, 0)} MP`);
      base = base.slice(0, m.index);
    }
    const [one, many] = unitWords(rate.unit);
    const words = base.split("_").filter((w) => w && w !== "pieces");
    const unitKey = (rate.unit + "s").split("_");
    let at = -1;
    for (let i = 0; i + unitKey.length <= words.length && at < 0; i++) if (words.slice(i, i + unitKey.length).join("_") === unitKey.join("_")) at = i;
    let adjective = "";
    if (at >= 0) {
      adjective = words.slice(0, at).join(" ");
      const tail = words.slice(at + unitKey.length).join(" ");
      if (tail) notes.unshift(tail);
    } else if (words.length) notes.unshift(words.join(" "));
    const count = perCount(rate.denominator);
    let per;
    if (count) per = [count, adjective, many].filter(Boolean).join(" ");
    else {
      per = one;
      if (adjective) notes.unshift(adjective);
    }
    return `${dollars(rate.amountMicrousd)} / ${per}` + (notes.length ? ` (${notes.join(", ")})` : "");
  }
  // Rates in reading order: input before output before cache and storage, the lower tier first,
  // resolutions from small to large.
  const RATE_ORDER = ["input_tokens", "output_tokens", "cache_hit", "audio_input", "audio_cache_hit", "storage", "text_to_image", "image_to_image", "input_images", "output_images", "output_audio"];
  function rateKey(name) {
    const rank = RATE_ORDER.findIndex((p) => name.startsWith(p));
    const tier = /_gt_/.test(name) ? 1 : 0;
    const res = /_(\d+)p(_|$)/.exec(name) ? Number(/_(\d+)p(_|$)/.exec(name)[1]) : /_4k(_|$)/.test(name) ? 2160 : 0;
    return [rank < 0 ? RATE_ORDER.length : rank, tier, res, /with_video_input/.test(name) ? 1 : 0];
  }
  function sortedRates(pricing) {
    return Object.entries(pricing).sort(([a], [b]) => {
      const ka = rateKey(a), kb = rateKey(b);
      for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i] - kb[i];
      return a < b ? -1 : a > b ? 1 : 0;
    });
  }
  const priced = (m) => !!m.pricing && typeof m.pricing === "object" && Object.keys(m.pricing).length > 0;
  const isRate = (v) => !!v && typeof v === "object" && "amountMicrousd" in v && "denominator" in v && "unit" in v;
  // A model's rates as a list, or a note that it is not priced.
  function priceList(m, id) {
    if (!priced(m)) return h("span", { class: "muted", id }, "Not priced: calls answer 503 until an operator prices it.");
    return h("ul", { class: "rates", id }, sortedRates(m.pricing).map(([k, r]) => h("li", { "data-rate": k }, rateText(k, r))));
  }

  // ---- API --------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, code, msg, retryAfter) {
      super(msg);
      this.status = status;
      this.code = code;
      this.retryAfter = retryAfter || null; // seconds, from Retry-After
    }
  }
  const refusal = async (res) => {
    const data = await res.json().catch(() => null);
    const e = (data && data.error) || {};
    return new ApiError(res.status, e.code || "error", e.message || res.statusText || "request failed", Number(res.headers.get("Retry-After")) || null);
  };
  async function api(method, path, body) {
    const headers = {};
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = "Bearer " + key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (!res.ok) throw await refusal(res);
    try {
      return await res.json();
    } catch (_) {
      return null;
    }
  }
  const get = (path) => api("GET", path);

  // ---- downloads: the API needs the bearer header, which a plain link cannot send, so a file is
  // fetched with the key and saved through a Blob URL on an <a download> (a download, not a fetch:
  // the CSP's connect-src does not govern it). -------------------------------------------------
  function saveBlob(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = h("a", { href: url, download: name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }
  // Fetches `path` with the key and saves it under the name the gateway gives it (or `name`).
  async function downloadWithKey(path, name) {
    const res = await fetch(path, { headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY) } });
    if (!res.ok) throw await refusal(res);
    const blob = await res.blob();
    const given = /filename="?([^";]+)"?/.exec(res.headers.get("Content-Disposition") || "");
    saveBlob(blob, given ? given[1] : name);
  }
  // A link that downloads `path` with the key; `status` shows what went wrong.
  function downloadLink(path, name, label, id, status) {
    return h("a", { href: path, download: name, id, class: "button-link", onclick: async (e) => {
      e.preventDefault();
      const a = e.currentTarget;
      a.setAttribute("aria-busy", "true");
      try {
        await downloadWithKey(path, name);
        fill(status);
      } catch (err) {
        fill(status, message(`Could not download ${name}: ${err.message}`));
      } finally {
        a.removeAttribute("aria-busy");
      }
    } }, label);
  }

  // ---- months (UTC, "YYYY-MM") ------------------------------------------------------------
  const MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
  const currentMonth = () => new Date().toISOString().slice(0, 7);
  const isMonth = (m) => typeof m === "string" && /^\d{4}-(0[1-9]|1[0-2])$/.test(m);
  const monthName = (m) => `${MONTH_NAMES[Number(m.slice(5, 7)) - 1]} ${m.slice(0, 4)}`;
  function previousMonth(m) {
    const [y, mo] = [Number(m.slice(0, 4)), Number(m.slice(5, 7))];
    return mo === 1 ? `${y - 1}-12` : `${y}-${String(mo - 1).padStart(2, "0")}`;
  }
  // The month's first and last days, "YYYY-MM-DD".
  function monthDays(m) {
    const last = new Date(Date.UTC(Number(m.slice(0, 4)), Number(m.slice(5, 7)), 0)).getUTCDate();
    return [m + "-01", `${m}-${String(last).padStart(2, "0")}`];
  }
  // The months to pick from, newest first: this one back to `since` (a "YYYY-MM" or a
  // timestamp), at least 12 months and at most 120; `chosen` is always among them.
  function monthChoices(since, chosen) {
    const now = currentMonth();
    const first = isMonth(String(since || "").slice(0, 7)) ? String(since).slice(0, 7) : now;
    const months = [];
    for (let m = now; months.length < 120 && (months.length < 12 || m >= first); m = previousMonth(m)) months.push(m);
    if (chosen && !months.includes(chosen)) months.push(chosen);
    return months;
  }
  // The month in the page's query (`?month=YYYY-MM`), else this one.
  const monthInQuery = () => {
    const m = new URLSearchParams(location.hash.split("?")[1] || "").get("month");
    return isMonth(m) ? m : currentMonth();
  };
  function monthPicker(months, chosen, go) {
    const select = h("select", { id: "month", onchange: (e) => go(e.target.value) },
      months.map((m) => h("option", { value: m, selected: m === chosen }, monthName(m) + (m === currentMonth() ? " (this month)" : ""))));
    return h("div", { class: "row" }, h("label", { for: "month" }, "Month (UTC)", select));
  }

  // ---- sign in and out --------------------------------------------------------------------
  function signOut(reason) {
    sessionStorage.removeItem(KEY);
    me = null;
    taskInfo.clear();
    showAlert(null);
    nav.replaceChildren();
    signoutButton.hidden = true;
    menuButton.hidden = true;
    setMenu(false);
    if (location.hash !== "#/signin") history.replaceState(null, "", "#/signin");
    signInPage(reason);
  }
  signoutButton.addEventListener("click", () => signOut());

  // At ≤ 600 px the navigation folds into the Menu button.
  function setMenu(open) {
    top.classList.toggle("open", open);
    menuButton.setAttribute("aria-expanded", String(open));
  }
  menuButton.addEventListener("click", () => setMenu(menuButton.getAttribute("aria-expanded") !== "true"));
  nav.addEventListener("click", (e) => {
    if (e.target.closest("a")) setMenu(false);
  });

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
    menuButton.hidden = false;
    return overview;
  }

  const PAGES = [
    ["overview", "Overview"], ["models", "Models"], ["tasks", "Tasks"], ["ledger", "Ledger"], ["statements", "Statements"],
    ["billing", "Billing"], ["keys", "Keys"], ["playground", "Playground"], ["settings", "Settings"],
  ];
  const ADMIN_PAGES = [["admin/users", "Users"], ["admin/models", "Models"], ["admin/vouchers", "Vouchers"], ["admin/revenue", "Revenue"],
    ["admin/maintenance", "Maintenance"], ["admin/health", "Health"], ["admin/audit", "Audit"]];
  function renderNav() {
    const link = ([p, label]) => h("a", { href: "#/" + p, "data-page": p }, label);
    const groups = [h("div", { class: "nav-group" }, PAGES.map(link))];
    if (me && me.admin) {
      groups.push(h("div", { class: "nav-group operator", role: "group", "aria-label": "Operator" },
        h("span", { class: "nav-label" }, "Operator"), ADMIN_PAGES.map(link)));
    }
    nav.replaceChildren(...groups);
  }
  function markNav(page) {
    for (const a of nav.querySelectorAll("a")) {
      const p = a.dataset.page;
      if (page === p || page.startsWith(p + "/")) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
  }

  // ---- the low-balance alert: a banner atop every page while the balance is below it ---------
  // Only a key with billing:manage may read the alert (any other gets 403), so no other asks.
  const canAlert = () => !!me && me.keyScopes.includes("billing:manage");
  let alertRender = 0;
  // The banner for an alert as GET/PUT /api/v1/alerts answer it (null: none).
  function showAlert(a) {
    if (!a || !a.below || a.low_balance_usd === null || a.low_balance_usd === undefined) {
      banner.hidden = true;
      banner.replaceChildren();
      return;
    }
    fill(banner, h("p", {}, "Your balance ", h("strong", { id: "alert-balance" }, money(a.balance_usd)),
      " is below your alert threshold of ", h("strong", { id: "alert-threshold" }, money(a.low_balance_usd)), ". ",
      h("a", { href: "#/billing", id: "alert-add-funds" }, "Add funds")));
    banner.hidden = false;
  }
  // Asks for the alert once (null when the key may not, or on any refusal: nothing is shown) and
  // shows it, unless a later render has asked since.
  async function refreshAlert() {
    const n = ++alertRender;
    let a = null;
    if (canAlert()) a = await get("/api/v1/alerts").catch(() => null);
    if (n === alertRender) showAlert(a);
    return a;
  }

  // ---- router -----------------------------------------------------------------------------
  async function route() {
    const path = (location.hash || "#/overview").slice(2).split("?")[0];
    if (!sessionStorage.getItem(KEY)) return signInPage();
    try {
      if (!me) await loadMe();
      const [page, ...rest] = path.split("/");
      markNav(path);
      setMenu(false);
      show(h("p", { class: "muted" }, "Loading…"));
      if (page !== "billing") refreshAlert(); // the billing page asks for it itself
      if (page === "overview" || page === "") await overviewPage();
      else if (page === "models") await modelsPage();
      else if (page === "tasks" && rest.length) await taskPage(decodeURIComponent(rest.join("/")));
      else if (page === "tasks") await tasksPage();
      else if (page === "ledger") await ledgerPage(1);
      else if (page === "statements") await statementsPage();
      else if (page === "billing") await billingPage();
      else if (page === "keys") await keysPage();
      else if (page === "playground") await playgroundPage();
      else if (page === "settings") settingsPage();
      else if (page === "admin" && rest[0] === "users" && rest[1]) await adminUserPage(decodeURIComponent(rest[1]));
      else if (page === "admin" && rest[0] === "users") await adminUsersPage();
      else if (page === "admin" && rest[0] === "models" && rest[1]) await adminModelPage(decodeURIComponent(rest.slice(1).join("/")));
      else if (page === "admin" && rest[0] === "models") await adminModelsPage();
      else if (page === "admin" && rest[0] === "vouchers") await adminVouchersPage();
      else if (page === "admin" && rest[0] === "revenue") await adminRevenuePage();
      else if (page === "admin" && rest[0] === "maintenance") await adminMaintenancePage();
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
    const sum = (n) => days.slice(-n).reduce((a, d) => a + BigInt(d.spent_microusd), 0n);
    const chart = h("div", { class: "panel", id: "spend-chart" });
    const draw = () => {
      const width = chart.clientWidth - 32; // the panel's padding
      const c = window.GatewayChart.dailyChart(days, { title: "Daily spend by model, last 30 days", width, money: dollars });
      fill(chart, c.svg, c.legend);
    };
    chart.redraw = draw;
    show(
      h("h1", {}, "Overview"),
      h(
        "div",
        { class: "cards" },
        h("div", { class: "card" }, h("div", { class: "label" }, "Balance"), h("div", { class: "value", id: "balance" }, usd(overview.user.balance_usd)),
          h("a", { href: "#/billing", class: "small", id: "add-funds" }, "Add funds")),
        card("Spent today", dollars(sum(1), true), "spent-today"),
        card("Last 7 days", dollars(sum(7), true)),
        card("Last 30 days", dollars(sum(30), true)),
        card("Tasks running", overview.stats.active)
      ),
      h("h2", {}, "Daily spend by model"),
      chart,
      overview.maintenance ? message("Maintenance mode is on: generation calls answer 503.") : null,
      h("h2", {}, "Recent activity"),
      await ledgerView(overview.ledger.slice(0, 20), 0),
      h("p", {}, h("a", { href: "#/ledger" }, "The whole ledger"))
    );
    draw();
  }
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      const chart = document.getElementById("spend-chart");
      if (chart && chart.redraw) chart.redraw();
    }, 100);
  });

  async function modelsPage() {
    const models = (await get("/api/v1/models")).data;
    show(
      h("h1", {}, "Models"),
      h("p", { class: "muted" }, "Every model you can call, with its price. A call holds its worst case first and is charged what it used."),
      table(["Model", { label: "Kind", cls: "hide-narrow" }, "Price"],
        models.map((m) => h("tr", { "data-model": m.id || m.public_model }, h("td", {}, h("strong", {}, m.id || m.public_model),
          m.description ? h("div", { class: "muted small hide-narrow" }, m.description) : null),
        h("td", { class: "hide-narrow" }, m.kind), h("td", {}, priceList(m)))),
        "No models are enabled.", "models")
    );
  }

  // ---- the ledger: one row per call, its entries folded in ----------------------------------
  // What the console knows of tasks named by ledger entries (the entries carry no model).
  const taskInfo = new Map();
  let taskPages = 0;
  const remember = (t) => taskInfo.set(t.id, { model: t.model, kind: t.kind, status: t.status, billing: t.billing || {} });
  // Learns the tasks behind `ids` with few requests: at most three pages of GET /api/v1/tasks (100
  // each, starting near `where`, this ledger page's place from 0 = newest to 1 = oldest), then at
  // most ten single tasks; a row whose task is still unknown shows its id without a model.
  async function lookUpTasks(ids, where) {
    const missing = () => ids.filter((id) => !taskInfo.has(id));
    if (!missing().length) return;
    const fetched = new Set();
    const fetchPage = async (p) => {
      fetched.add(p);
      const r = await get(`/api/v1/tasks?page=${p}&page_size=100`);
      r.data.forEach(remember);
      taskPages = r.pagination.total_pages;
    };
    const guess = () => Math.min(Math.max(1, taskPages), Math.max(1, Math.floor(where * taskPages) + 1));
    try {
      await fetchPage(taskPages ? guess() : 1);
      for (let i = 0; i < 2 && missing().length; i++) {
        let p = guess();
        while (fetched.has(p) && p <= taskPages) p++;
        if (p > taskPages) break;
        await fetchPage(p);
      }
      await Promise.all(missing().slice(0, 10).map((id) => get("/api/v1/tasks/" + encodeURIComponent(id)).then(remember, () => null)));
    } catch (_) {
      // Without task:read the rows show task ids only.
    }
  }

  // Ledger entries (newest first) as rows: a call's entries (same task id) become one row.
  function groupLedger(entries) {
    const rows = [];
    const calls = new Map();
    for (const e of entries) {
      if (!e.task_id) {
        rows.push({ entry: e });
        continue;
      }
      let call = calls.get(e.task_id);
      if (!call) {
        call = { task: e.task_id, entries: [] };
        calls.set(e.task_id, call);
        rows.push(call);
      }
      call.entries.push(e);
    }
    return rows;
  }
  const KIND_NAMES = { topup: "Top-up", voucher: "Voucher", adjustment: "Adjustment", reserve: "Hold", settle: "Settle", release: "Release", refund: "Refund" };

  async function ledgerView(entries, where) {
    const rows = groupLedger(entries);
    await lookUpTasks(rows.filter((r) => r.task && !r.entries.some((e) => e.model)).map((r) => r.task), where);
    const out = [];
    rows.forEach((r, i) => {
      if (r.entry) {
        const e = r.entry;
        const credit = BigInt(e.amount_microusd) >= 0n;
        out.push(h("tr", { class: "entry", "data-kind": e.kind }, h("td", { class: "hide-narrow" }, whenCell(e.created_at)),
          h("td", {}, h("strong", {}, KIND_NAMES[e.kind] || e.kind), e.description ? h("div", { class: "muted small desc" }, e.description) : null,
            h("div", { class: "muted small show-narrow" }, shortWhen(e.created_at))),
          h("td", {}, badge(credit ? "credit" : "debit", credit ? "succeeded" : "done")), h("td", { class: "num" }, dollars(e.amount_microusd, true, true)),
          h("td", { class: "num hide-narrow" }, usd(e.balance_after))));
        return;
      }
      const info = taskInfo.get(r.task) || {};
      const model = (r.entries.find((e) => e.model) || {}).model || info.model;
      const kinds = r.entries.map((e) => e.kind);
      const whole = kinds.includes("reserve");
      let net = r.entries.reduce((a, e) => a + BigInt(e.amount_microusd), 0n);
      let state;
      if (kinds.includes("refund")) state = ["refunded", "cancelled"];
      else if (kinds.includes("settle")) state = ["charged", "succeeded"];
      else if (kinds.includes("release")) state = ["released", "cancelled"];
      else state = ["held", "queued"];
      let note = null;
      if (!whole) {
        // The hold is on an older page: the task's billing says what the call cost in all.
        const b = info.billing || {};
        if (b.actual_amount_microusd !== undefined && b.actual_amount_microusd !== null) net = -BigInt(b.actual_amount_microusd);
        note = h("div", { class: "muted small" }, "its hold is on an older page");
      }
      const id = "call-" + i;
      const toggle = h("button", { type: "button", class: "disclose", "aria-expanded": "false", "aria-controls": r.entries.map((_, j) => `${id}-${j}`).join(" "),
        "aria-label": `Entries of ${model || r.task}`, title: "Show the ledger entries" }, "▸");
      const raw = r.entries.map((e, j) => h("tr", { class: "raw", id: `${id}-${j}`, hidden: true, "data-for": id }, h("td", { class: "hide-narrow" }, whenCell(e.created_at)),
        h("td", {}, KIND_NAMES[e.kind] || e.kind, e.description ? h("div", { class: "muted small desc" }, e.description) : null,
          h("div", { class: "muted small show-narrow" }, shortWhen(e.created_at))),
        h("td", {}, badge(e.kind, "done")), h("td", { class: "num" }, dollars(e.amount_microusd, true, true)),
        h("td", { class: "num hide-narrow" }, usd(e.balance_after))));
      toggle.addEventListener("click", () => {
        const open = toggle.getAttribute("aria-expanded") !== "true";
        toggle.setAttribute("aria-expanded", String(open));
        toggle.textContent = open ? "▾" : "▸";
        for (const tr of raw) tr.hidden = !open;
      });
      out.push(h("tr", { class: "call", id, "data-task": r.task, "data-entries": r.entries.length },
        h("td", { class: "hide-narrow" }, whenCell(r.entries[r.entries.length - 1].created_at)),
        h("td", {}, h("div", { class: "call-head" }, toggle,
          h("a", { href: "#/tasks/" + encodeURIComponent(r.task), class: "model", title: r.task }, model || r.task)),
          h("div", { class: "muted small ellipsis hide-narrow" }, r.task),
          h("div", { class: "muted small show-narrow" }, shortWhen(r.entries[r.entries.length - 1].created_at)), note),
        h("td", {}, badge(state[0], state[1])), h("td", { class: "num charge" }, dollars(net, true, true)),
        h("td", { class: "num hide-narrow" }, usd(r.entries[0].balance_after))), ...raw);
    });
    return table([{ label: "When", cls: "hide-narrow" }, "Call or entry", "Status", { label: "Amount", num: true }, { label: "Balance after", num: true, cls: "hide-narrow" }],
      out, "No ledger entries.", "ledger");
  }

  async function ledgerPage(n) {
    const page = await get(`/api/v1/ledger?page=${n}&page_size=100`);
    const where = page.pagination.total ? ((n - 1) * 100) / page.pagination.total : 0;
    show(h("h1", {}, "Ledger"),
      h("p", { class: "muted" }, "One line per call: its hold and its settlement or refund folded into the amount it cost (▸ shows the entries)."),
      await ledgerView(page.data, where), pager(page.pagination, ledgerPage));
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
    page.data.forEach(remember);
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
    const charged = (b) => (b && (b.actual_amount || b.estimated_amount) ? usd(b.actual_amount || b.estimated_amount) : "—");
    show(
      h("h1", {}, "Tasks"),
      h("div", { class: "row" }, h("label", {}, "Status", statusSelect), h("label", {}, "Kind", kindSelect)),
      table(
        [{ label: "Task", cls: "hide-narrow" }, "Model", "Status", { label: "Charged", num: true }, { label: "Created", cls: "hide-narrow" }],
        page.data.map((t) =>
          h("tr", { "data-task": t.id }, h("td", { class: "hide-narrow" }, h("a", { href: "#/tasks/" + encodeURIComponent(t.id), class: "id" }, t.id)),
            h("td", {}, h("a", { href: "#/tasks/" + encodeURIComponent(t.id), class: "model", title: t.id }, t.model)),
            h("td", {}, badge(t.status)), h("td", { class: "num" }, charged(t.billing)),
            h("td", { class: "hide-narrow" }, whenCell(t.created_at)))
        ),
        "No tasks match."
      ),
      pager(page.pagination, (p) => go(status, kind, p))
    );
  }

  async function taskPage(id) {
    const t = await get("/api/v1/tasks/" + encodeURIComponent(id));
    remember(t);
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
      result = h("div", {}, h("h2", {}, "Result"), h("p", {}, h("a", { href: output, rel: "noreferrer", class: "id" }, output)));
    }
    show(
      h("h1", {}, "Task ", h("span", { class: "id" }, t.id)),
      h("div", { class: "table-wrap" }, h("table", { class: "facts" }, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))))),
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

  const SCOPES = ["models:read", "task:read", "task:write", "video:create", "image:create", "language:create", "audio:create", "overview:read", "keys:manage", "billing:manage", "admin"];
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
        h("fieldset", { class: "scopes" }, h("legend", {}, "Scopes (at most the scopes of the key you signed in with)"), boxes),
        h("button", { type: "submit" }, "Create key"))
      : h("p", { class: "muted" }, "The key you signed in with lacks keys:manage, so it cannot create or revoke keys.");
    show(
      h("h1", {}, "API keys"), status, form,
      table(
        ["Name", { label: "Prefix", cls: "hide-narrow" }, { label: "Scopes", cls: "hide-narrow" }, { label: "Spent", num: true }, "State", ""],
        keys.data.map((k) =>
          h("tr", { "data-key": k.id }, h("td", {}, k.name), h("td", { class: "hide-narrow" }, h("code", {}, k.prefix + "…")),
            h("td", { class: "hide-narrow small" }, k.scopes.join(", ")),
            h("td", { class: "num" }, usd(k.spent_usd)), h("td", {}, k.revoked_at ? "revoked" : k.id === me.keyId ? "in use" : "active"),
            h("td", {}, !k.revoked_at && canManage ? h("button", { class: "danger small", type: "button", "aria-label": "Revoke " + k.name, onclick: async () => {
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

  // ---- playground: priced models only, each kind with its own parameters -----------------
  async function playgroundPage() {
    const [list, overview] = await Promise.all([get("/api/v1/models"), get("/api/v1/overview")]);
    const models = list.data.filter((m) => (m.kind === "language" || m.kind === "image") && priced(m));
    const name = (m) => m.id || m.public_model;
    if (!models.length) return show(h("h1", {}, "Playground"), h("p", { class: "muted" }, "No priced language or image model is enabled."));
    const select = h("select", { id: "pg-model" }, models.map((m) => h("option", { value: name(m) }, `${name(m)} (${m.kind})`)));
    const prompt = h("textarea", { id: "pg-prompt", placeholder: "Say hello", required: true });
    const maxTokens = h("input", { id: "pg-max", type: "number", min: 1, value: 256 });
    const size = h("select", { id: "pg-size" });
    const maxField = h("label", { for: "pg-max", class: "param", "data-kind": "language" }, "Max tokens", maxTokens);
    const sizeField = h("label", { for: "pg-size", class: "param", "data-kind": "image" }, "Size", size);
    const price = h("div", { id: "pg-price", class: "price" });
    const hold = h("div", { id: "pg-hold", "aria-live": "polite" });
    const balance = h("div", { id: "pg-balance", class: "muted" }, "Balance: ", h("strong", {}, usd(overview.user.balance_usd)));
    const output = h("pre", { id: "pg-output", "aria-live": "polite" });
    const status = h("div", { id: "pg-status", "aria-live": "polite" });
    const model = () => models.find((m) => name(m) === select.value);
    // Shows the fields the chosen model's kind takes, bounded by its limits.
    const params = () => {
      const m = model();
      const limits = m.limits || {};
      maxField.hidden = m.kind !== "language";
      sizeField.hidden = m.kind !== "image";
      if (m.kind === "language" && limits.max_tokens && limits.max_tokens.max) maxTokens.max = limits.max_tokens.max;
      if (m.kind === "image") {
        const sizes = (limits.sizes && limits.sizes.named) || [];
        fill(size, h("option", { value: "" }, "model default"), sizes.map((s) => h("option", { value: s }, s)));
      }
    };
    const body = () => {
      const m = model();
      if (m.kind === "image") return size.value ? { model: select.value, prompt: prompt.value, size: size.value } : { model: select.value, prompt: prompt.value };
      return { model: select.value, messages: [{ role: "user", content: prompt.value }], max_tokens: Number(maxTokens.value) || 256, stream: true };
    };
    const quotePath = () => (model().kind === "image" ? "/api/v1/images/generations/quote" : "/api/v1/chat/completions/quote");
    let timer = null;
    async function quote() {
      const m = model();
      fill(price, h("span", { class: "muted" }, "Price: "), priceList(m));
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
    select.addEventListener("change", params);
    for (const input of [select, prompt, maxTokens, size]) input.addEventListener("input", requote);
    const send = h("button", { type: "submit", id: "pg-send" }, "Send");
    const form = h("form", { class: "panel", onsubmit: async (e) => {
      e.preventDefault();
      send.disabled = true;
      fill(output);
      fill(status, h("span", { class: "muted" }, "Running…"));
      try {
        if (model().kind === "image") await runImage(body(), output, status);
        else await runChat(body(), output, status);
      } catch (err) {
        fill(status, message(err.message));
      } finally {
        send.disabled = false;
        // What is left after the call (or after a failure, which is refunded).
        const after = await get("/api/v1/overview").catch(() => null);
        if (after) fill(balance, "Balance left: ", h("strong", { id: "pg-balance-left" }, usd(after.user.balance_usd)));
      }
    } },
      h("div", { class: "row" }, h("label", { for: "pg-model" }, "Model", select), maxField, sizeField),
      h("label", { for: "pg-prompt" }, "Prompt", prompt), price, hold, h("div", { class: "row" }, send, balance));
    show(h("h1", {}, "Playground"), form, status, output);
    params();
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

  // ---- billing: add funds through Stripe Checkout, redeem a voucher code --------------------
  const REDEEM_REFUSALS = {
    voucher_not_found: "No such code: check it for typos. A revoked code is refused too.",
    voucher_redeemed: "That code has already been redeemed: each code credits once.",
    voucher_expired: "That code has expired: ask whoever gave it to you for a new one.",
  };
  function redeemRefusal(err) {
    if (err.code === "voucher_attempts_exceeded") {
      const wait = err.retryAfter ? `in ${Math.max(1, Math.ceil(err.retryAfter / 60))} min` : "within the hour";
      return `Too many codes were refused for your account in the last hour: try again ${wait}.`;
    }
    return REDEEM_REFUSALS[err.code] || "Could not redeem the code: " + err.message;
  }
  // The alert's state in words: off, armed, or below its threshold now.
  function alertState(a) {
    if (a.low_balance_usd === null || a.low_balance_usd === undefined) {
      return [badge("off", "cancelled"), " No alert is set: nothing tells you when your balance runs low."];
    }
    const x = money(a.low_balance_usd);
    const hook = a.webhook_url
      ? ["Each fall below it sends a balance.low webhook to ", h("span", { class: "id", id: "alert-url" }, a.webhook_url), "."]
      : ["No webhook is set: the banner is the alert."];
    if (a.below) {
      return [badge("below threshold", "failed"), ` Your balance (${money(a.balance_usd)}) is below ${x}: the banner shows until it is back at or above ${x}, which re-arms the alert. `, hook];
    }
    if (a.armed) return [badge("armed", "succeeded"), ` Will alert when the balance falls below ${x}. `, hook];
    return [badge("re-arming", "queued"), ` The balance is back at or above ${x}: the alert re-arms and will alert when it falls below again. `, hook];
  }
  // The low-balance alert form: a threshold in dollars, an optional webhook URL, Save and Turn off.
  function alertPanel(initial) {
    const state = h("p", { id: "alert-state" });
    const amount = h("input", { id: "alert-amount", inputmode: "decimal", autocomplete: "off", size: 10, placeholder: "5.00" });
    const url = h("input", { id: "alert-webhook", type: "url", autocomplete: "off", spellcheck: "false", placeholder: "https://example.com/hooks/balance" });
    const save = h("button", { type: "submit", id: "alert-save" }, "Save");
    const off = h("button", { type: "button", class: "secondary", id: "alert-off" }, "Turn off");
    const status = h("div", { id: "alert-status", "aria-live": "polite" });
    const isOff = (a) => a.low_balance_usd === null || a.low_balance_usd === undefined;
    let current = initial;
    const set = (a) => {
      current = a;
      fill(state, alertState(a));
      amount.value = isOff(a) ? "" : money(a.low_balance_usd).slice(1);
      url.value = a.webhook_url || "";
      off.disabled = isOff(a);
    };
    const put = async (body, done, failed) => {
      save.disabled = off.disabled = true;
      fill(status, h("p", { class: "muted" }, "Saving…"));
      try {
        const saved = await api("PUT", "/api/v1/alerts", body);
        alertRender++; // an answer still on its way is older than this one
        showAlert(saved);
        set(saved);
        fill(status, message(done(saved), "ok"));
      } catch (err) {
        off.disabled = isOff(current);
        fill(status, message(failed + err.message));
      } finally {
        save.disabled = false;
      }
    };
    const form = h("form", { class: "panel", id: "alert-form", novalidate: true, onsubmit: (e) => {
      e.preventDefault();
      let threshold;
      try {
        if (!amount.value.trim()) throw new Error("Enter the balance below which to alert, such as 5.00 (or turn the alert off).");
        threshold = usdText(parseDollars(amount.value));
      } catch (err) {
        fill(status, message("Could not save the alert: " + err.message));
        return;
      }
      put({ low_balance_usd: threshold, webhook_url: url.value.trim() || null },
        (a) => a.below
          ? `Saved. Your balance is already below ${money(a.low_balance_usd)}: the banner shows until it is back at or above it.`
          : `Saved: armed, it alerts when your balance falls below ${money(a.low_balance_usd)}.`,
        "Could not save the alert: ");
    } },
      h("h2", {}, "Low-balance alert"),
      h("p", { class: "muted" }, "When your balance falls below the threshold, a banner shows on every page of this console; with a webhook URL, the gateway also sends it a balance.low event, once each time the balance falls below."),
      state,
      h("div", { class: "row" },
        h("label", { for: "alert-amount" }, "Alert below (USD)", amount),
        h("label", { for: "alert-webhook", class: "grow" }, "Webhook URL (optional)", url),
        h("div", { class: "buttons" }, save, off)),
      status);
    off.addEventListener("click", () => put({ low_balance_usd: null, webhook_url: null }, () => "The low-balance alert is off.", "Could not turn the alert off: "));
    set(initial);
    return form;
  }
  // `redeemed`: a redemption's answer, told above the refreshed page.
  async function billingPage(redeemed) {
    const [overview, alert] = await Promise.all([get("/api/v1/overview"), refreshAlert()]);
    const allowed = me.keyScopes.includes("billing:manage");
    const balance = h("div", { class: "value", id: "billing-balance" }, usd(overview.user.balance_usd));
    // Back from Stripe: GATEWAY_TOPUP_SUCCESS_URL / _CANCEL_URL may point at #/billing?paid=1 / ?cancelled=1.
    const back = new URLSearchParams(location.hash.split("?")[1] || "");
    const payStatus = h("div", { id: "funds-status", "aria-live": "polite" },
      back.has("paid") ? message("Thank you: Stripe took your payment. Your balance grows as soon as Stripe confirms it, usually within seconds; reload to see it.", "ok")
        : back.has("cancelled") ? message("The payment was cancelled: nothing was charged.", "ok") : null);
    const redeemStatus = h("div", { id: "redeem-status", "aria-live": "polite" }, redeemed
      ? h("p", { class: "ok", role: "status" }, "Credited ", h("strong", { id: "credited" }, money(redeemed.credited)),
        ". Your balance is now ", h("strong", { id: "new-balance" }, usd(redeemed.balance_usd)), ".")
      : null);
    const amount = h("input", { id: "funds-amount", inputmode: "decimal", required: true, value: "20.00", autocomplete: "off", size: 10 });
    const pay = h("button", { type: "submit", id: "pay" }, "Pay with card");
    const presets = ["10", "20", "50", "100"].map((v) =>
      h("button", { type: "button", class: "secondary small", onclick: () => { amount.value = v + ".00"; amount.focus(); } }, "$" + v));
    const funds = h("form", { class: "panel", id: "funds-form", onsubmit: async (e) => {
      e.preventDefault();
      pay.disabled = true;
      fill(payStatus, h("p", { class: "muted" }, "Asking for a payment page…"));
      try {
        const session = await api("POST", "/api/v1/topups/checkout", { amount: amount.value.trim().replace(/^\$/, "").replace(/,/g, "") });
        if (!/^https:\/\//i.test(session.url || "")) throw new Error("the gateway answered no payment page");
        fill(payStatus, message("Taking you to Stripe's payment page…", "ok"));
        location.assign(session.url);
      } catch (err) {
        pay.disabled = false;
        if (err.code === "payments_not_configured") {
          fill(payStatus, message("Card payments are not set up on this gateway. Redeem a voucher code below, or ask the operator to add funds to your account."));
        } else if (err.status === 400) fill(payStatus, message("That amount cannot be paid: " + err.message));
        else fill(payStatus, message("Could not start the payment: " + err.message));
      }
    } },
      h("h2", {}, "Add funds with a card"),
      h("p", { class: "muted" }, "You pay on Stripe's secure page; your balance grows as soon as Stripe confirms the payment, usually within seconds."),
      h("div", { class: "row" }, h("label", { for: "funds-amount" }, "Amount (USD)", amount), pay),
      h("div", { class: "row presets", role: "group", "aria-label": "Common amounts" }, presets),
      payStatus);
    const code = h("input", { id: "voucher-code", required: true, autocomplete: "off", spellcheck: "false", autocapitalize: "characters", placeholder: "GV-XXXX-XXXX-…" });
    const redeem = h("form", { class: "panel", id: "redeem-form", onsubmit: async (e) => {
      e.preventDefault();
      try {
        const r = await api("POST", "/api/v1/vouchers/redeem", { code: code.value.trim() });
        await billingPage(r);
        document.getElementById("voucher-code").focus();
      } catch (err) {
        fill(redeemStatus, message(redeemRefusal(err)));
      }
    } },
      h("h2", {}, "Redeem a voucher code"),
      h("p", { class: "muted" }, "A code from the operator credits its amount to your balance once. Dashes, spaces and case do not matter."),
      h("div", { class: "row" }, h("label", { for: "voucher-code", class: "grow" }, "Code", code), h("button", { type: "submit", id: "redeem" }, "Redeem")),
      redeemStatus);
    const credits = overview.ledger.filter((e) => !e.task_id).slice(0, 10);
    show(
      h("h1", {}, "Billing"),
      h("div", { class: "cards one" }, h("div", { class: "card" }, h("div", { class: "label" }, "Balance"), balance)),
      ...(allowed ? [h("div", { class: "split" }, funds, redeem), alert ? alertPanel(alert) : null]
        : [h("p", { class: "panel muted", id: "billing-scope" }, "The key you signed in with lacks billing:manage, so it cannot add funds, redeem a code or set a low-balance alert. Sign in with a key that has it.")]),
      h("h2", {}, "Recent credits and adjustments"),
      table([{ label: "When", cls: "hide-narrow" }, "Entry", { label: "Amount", num: true }, { label: "Balance after", num: true, cls: "hide-narrow" }],
        credits.map((e) => h("tr", { "data-kind": e.kind }, h("td", { class: "hide-narrow" }, whenCell(e.created_at)),
          h("td", {}, h("strong", {}, KIND_NAMES[e.kind] || e.kind), e.description ? h("div", { class: "muted small desc" }, e.description) : null,
            h("div", { class: "muted small show-narrow" }, shortWhen(e.created_at))),
          h("td", { class: "num" }, dollars(e.amount_microusd, false, true)), h("td", { class: "num hide-narrow" }, usd(e.balance_after)))),
        "No credits yet."),
      h("p", {}, h("a", { href: "#/statements" }, "Monthly statements and CSV exports"))
    );
  }

  // ---- statements: a month's figures, exact, and its CSV exports ----------------------------
  async function statementsPage() {
    const month = monthInQuery();
    const st = await get("/api/v1/statements/" + month);
    const [from, to] = monthDays(month);
    const status = h("div", { "aria-live": "polite" });
    const line = (label, value, id, cls, note) =>
      h("tr", { class: cls }, h("th", { scope: "row" }, label, note ? h("div", { class: "muted small" }, note) : null), h("td", { class: "num", id }, value));
    const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
    const figures = h("div", { class: "table-wrap" }, h("table", { class: "statement" }, h("tbody", {},
      line("Opening balance", money(st.opening_balance), "st-opening", "total", `at 00:00 UTC on ${from}`),
      line("+ Credits", money(st.credits.total), "st-credits", "sum"),
      st.credits.by_kind.map((c) => h("tr", { class: "part", "data-kind": c.kind },
        h("th", { scope: "row" }, `${KIND_NAMES[c.kind] || c.kind} (${plural(c.entries, "entry", "entries")})`), h("td", { class: "num" }, money(c.amount)))),
      line(`− Charges (${plural(st.charges.calls, "call", "calls")})`, money(st.charges.total), "st-charges", "sum"),
      line("− Change in held", money(st.held.change), "st-held-change", "sum",
        `held by open calls: ${money(st.held.at_start)} at the start, ${money(st.held.at_end)} at the end`),
      line("= Closing balance", money(st.closing_balance), "st-closing", "total", st.complete ? `at the month's end` : "so far: the month is in progress"))));
    const go = (m) => { location.hash = "#/statements?month=" + m; };
    show(
      h("h1", {}, "Statement for ", monthName(month)),
      monthPicker(monthChoices(me.user.created_at, month), month, go),
      st.complete ? null : h("p", { class: "muted", id: "st-progress" }, "This month is in progress: its figures change until it ends."),
      figures,
      h("p", { class: "muted small", id: "st-refunds" },
        `Refunds: ${plural(st.refunds.calls, "failed call", "failed calls")} whose ${st.refunds.calls === 1 ? "hold" : "holds"} (${money(st.refunds.amount)}) came back whole; part of the change in held, not a line of their own.`),
      h("h2", {}, "Charges by model"),
      table(["Model", { label: "Calls", num: true }, { label: "Charged", num: true }],
        st.charges.by_model.map((c) => h("tr", { "data-model": c.model }, h("td", { class: "model" }, c.model), h("td", { class: "num" }, c.calls), h("td", { class: "num" }, money(c.amount)))),
        "No call settled this month.", "st-models"),
      h("h2", {}, "Downloads"),
      h("div", { class: "panel" },
        h("p", { class: "muted" }, `CSV files of ${from} to ${to} (UTC, both days included), for a spreadsheet or your accounts department.`),
        h("div", { class: "row" },
          downloadLink(`/api/v1/ledger/export?from=${from}&to=${to}`, `ledger-${from}-${to}.csv`, "Ledger (CSV)", "ledger-csv", status),
          downloadLink(`/api/v1/usage/export?from=${from}&to=${to}`, `usage-${from}-${to}.csv`, "Usage (CSV)", "usage-csv", status)),
        h("p", { class: "muted small" }, "Ledger: every entry written in the month. Usage: one line per call whose hold ended in the month, with its model, usage and charge."),
        status)
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
        ["User", { label: "Email", cls: "hide-narrow" }, { label: "Role", cls: "hide-narrow" }, { label: "Balance", num: true }, "State"],
        page.data.map((u) => h("tr", {}, h("td", {}, h("a", { href: "#/admin/users/" + encodeURIComponent(u.id) }, u.name)),
          h("td", { class: "hide-narrow" }, u.email), h("td", { class: "hide-narrow" }, u.role), h("td", { class: "num" }, usd(u.balance_usd)),
          h("td", {}, u.disabled ? badge("disabled", "failed") : badge("active", "succeeded")))),
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
        card("Balance", usd(u.balance_usd), "user-balance"), card("Email", u.email), card("Role", u.role),
        card("State", u.disabled ? "disabled" : "active"), card("Media", `${u.media_used_bytes} / ${u.media_quota_bytes} B`)),
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
          if (!u.disabled && !confirm(`Disable ${u.name}? Every key of theirs is refused until enabled again.`)) return;
          try {
            await api("PATCH", "/api/v1/admin/users/" + encodeURIComponent(id), { disabled: !u.disabled });
            await reload(u.disabled ? "User enabled." : "User disabled: every key is refused.");
          } catch (err) {
            fill(status, message(err.message));
          }
        } }, u.disabled ? "Enable user" : "Disable user"))),
      status,
      h("h2", {}, "Keys"),
      table(["Name", { label: "Prefix", cls: "hide-narrow" }, { label: "Scopes", cls: "hide-narrow" }, { label: "Spent", num: true }, "State"],
        u.keys.map((k) => h("tr", {}, h("td", {}, k.name), h("td", { class: "hide-narrow" }, h("code", {}, k.prefix + "…")),
          h("td", { class: "hide-narrow small" }, k.scopes.join(", ")),
          h("td", { class: "num" }, usd(k.spent_usd)), h("td", {}, k.revoked_at ? "revoked" : "active")))),
      h("p", {}, h("a", { href: "#/admin/users" }, "Back to users"))
    );
  }

  // A short summary of a sheet for the models table: its first rate and how many more.
  function priceSummary(m) {
    if (!priced(m)) return h("span", { class: "muted" }, "unpriced");
    const rates = sortedRates(m.pricing);
    // The base tier's input and output rates (or the first rate) stand for the sheet.
    let shown = rates.filter(([k]) => /^(input|output)_tokens(_lte_\d+k)?$/.test(k) || /^(text_to_image|output_images_lte|output_audio)/.test(k)).slice(0, 2);
    if (!shown.length) shown = rates.slice(0, 1);
    return h("span", { class: "small" }, shown.map(([k, r]) => rateText(k, r)).join("; "),
      rates.length > shown.length ? h("span", { class: "muted" }, ` +${rates.length - shown.length} more`) : null);
  }

  async function adminModelsPage() {
    const list = await get("/api/v1/admin/models");
    show(
      h("h1", {}, "Models"),
      list.maintenance ? h("p", { class: "error", role: "alert" }, "Maintenance mode is on: generation calls answer 503. ", h("a", { href: "#/admin/maintenance" }, "Maintenance")) : null,
      h("p", { class: "muted" }, "Open a model to change its availability, its concurrency cap or its prices."),
      table(["Model", { label: "Kind", cls: "hide-narrow" }, "Status", { label: "Cap", num: true, cls: "hide-narrow" }, { label: "Price", cls: "hide-narrow" }, ""],
        list.data.map((m) => h("tr", { "data-model": m.model },
          h("td", {}, h("a", { href: "#/admin/models/" + encodeURIComponent(m.model) }, m.model)),
          h("td", { class: "hide-narrow" }, m.kind),
          h("td", {}, m.enabled ? badge("enabled", "succeeded") : badge("disabled", "cancelled"), priced(m) ? null : " ", priced(m) ? null : badge("unpriced", "queued")),
          h("td", { class: "num hide-narrow" }, m.concurrency_limit),
          h("td", { class: "hide-narrow" }, priced(m) ? h("span", {}, h("span", { class: "muted small" }, `v${m.pricing_version} `), priceSummary(m)) : priceSummary(m)),
          h("td", { class: "num" }, h("a", { class: "button-link", href: "#/admin/models/" + encodeURIComponent(m.model), "aria-label": "Manage " + m.model }, "Manage")))),
        "No models.", "admin-models")
    );
  }

  // One model: availability, cap and a price form (one row per rate, dollars per N units).
  async function adminModelPage(name, notice) {
    const list = await get("/api/v1/admin/models");
    const m = list.data.find((x) => x.model === name);
    if (!m) return show(h("h1", {}, "Not found"), h("p", {}, "No model " + name + "."), h("p", {}, h("a", { href: "#/admin/models" }, "Back to models")));
    const status = h("div", { "aria-live": "polite" }, notice ? message(notice, "ok") : null);
    const reload = (text) => adminModelPage(name, text);
    const fail = (err) => fill(status, message(err.message));
    const path = "/api/v1/admin/models/" + encodeURIComponent(m.model);
    const cap = h("input", { id: "model-cap", type: "number", min: 1, max: 100000, value: m.concurrency_limit });
    const availability = h("form", { class: "panel", id: "model-availability", onsubmit: async (e) => {
      e.preventDefault();
      try { await api("PATCH", path, { concurrency_limit: Number(cap.value) }); await reload(`Cap of ${m.model}: ${cap.value} concurrent calls.`); } catch (err) { fail(err); }
    } }, h("h2", {}, "Availability"),
      h("div", { class: "row" }, h("label", { for: "model-cap" }, "Concurrent calls (all users)", cap), h("button", { type: "submit", class: "secondary" }, "Save cap")),
      h("p", {}, m.enabled ? "Enabled: users can call it." : "Disabled: calls to it are refused."),
      h("button", { type: "button", id: "toggle-model", class: m.enabled ? "danger" : "", onclick: async () => {
        if (m.enabled && !confirm(`Disable ${m.model}? Calls to it will be refused.`)) return;
        try { await api("PATCH", path, { enabled: !m.enabled }); await reload(`${m.model} ${m.enabled ? "disabled" : "enabled"}.`); } catch (err) { fail(err); }
      } }, m.enabled ? "Disable model" : "Enable model"));

    // The price form.
    const rows = h("div", { class: "rate-rows" });
    const DENOMINATORS = [["1", "1"], ["1000", "1K"], ["1000000", "1M"]];
    const unitList = h("datalist", { id: "rate-units" }, Object.keys(UNITS).map((u) => h("option", { value: u })));
    function rateRow(rateName, rate) {
      const nameIn = h("input", { class: "rate-name", value: rateName, required: true, "aria-label": "Rate name", placeholder: "input_tokens", spellcheck: "false" });
      const amount = h("input", { class: "rate-amount", inputmode: "decimal", required: true, "aria-label": "Dollars", placeholder: "0.14",
        value: rate ? decimal(rate.amountMicrousd, 6, 2) : "" });
      const denoms = DENOMINATORS.slice();
      const current = rate ? String(rate.denominator) : "1000000";
      if (!denoms.some(([v]) => v === current)) denoms.push([current, group3(current)]);
      const per = h("select", { class: "rate-per", "aria-label": "Per how many units" }, denoms.map(([v, label]) => h("option", { value: v, selected: v === current }, label)));
      const unit = h("input", { class: "rate-unit", value: rate ? rate.unit : "token", list: "rate-units", required: true, "aria-label": "Unit", size: 8, spellcheck: "false" });
      const preview = h("div", { class: "rate-preview muted small" });
      const row = h("div", { class: "rate-row" },
        h("div", { class: "rate-fields" }, nameIn, h("span", { class: "rate-price" }, h("span", {}, "$"), amount, h("span", {}, "per"), per, unit),
          h("button", { type: "button", class: "secondary small", "aria-label": "Remove this rate", onclick: () => { row.remove(); } }, "Remove")),
        preview);
      const update = () => {
        try {
          const micros = parseDollars(amount.value);
          preview.className = "rate-preview muted small";
          preview.textContent = `${rateText(nameIn.value || "rate", { amountMicrousd: String(micros), denominator: per.value, unit: unit.value || "unit" })} = ${micros} µUSD per ${group3(per.value)} ${unit.value}`;
        } catch (err) {
          const typed = amount.value.trim() !== "";
          preview.className = typed ? "rate-preview error small" : "rate-preview muted small";
          preview.textContent = typed ? err.message : "Type the price in dollars.";
        }
      };
      for (const input of [nameIn, amount, per, unit]) input.addEventListener("input", update);
      row.read = () => [nameIn.value.trim(), { amountMicrousd: String(parseDollars(amount.value)), denominator: per.value, unit: unit.value.trim() }];
      update();
      return row;
    }
    for (const [k, r] of sortedRates(m.pricing || {})) rows.append(rateRow(k, r));
    if (!priced(m)) rows.append(rateRow(m.kind === "image" ? "text_to_image_pieces" : "input_tokens", m.kind === "image" ? { amountMicrousd: "0", denominator: "1", unit: "image" } : null));
    const priceForm = h("form", { class: "panel", id: "price-form", onsubmit: async (e) => {
      e.preventDefault();
      const sheet = {};
      try {
        for (const row of rows.children) {
          const [k, rate] = row.read();
          if (!k) throw new Error("Every rate needs a name, such as input_tokens.");
          if (sheet[k]) throw new Error(`The rate ${k} is there twice.`);
          sheet[k] = rate;
        }
        if (!Object.keys(sheet).length) throw new Error("A price version needs at least one rate.");
      } catch (err) {
        return fail(err);
      }
      try {
        const v = await api("POST", path + "/pricing", sheet);
        await reload(`${v.model}: price version ${v.pricing_version} is active.`);
      } catch (err) { fail(err); }
    } },
      h("h2", {}, "Prices"),
      h("p", { class: "muted" }, priced(m) ? `Version ${m.pricing_version} is active. Publishing makes a new version; calls already held keep theirs.` : "Not priced: calls answer 503 until a price version is published."),
      unitList, rows,
      h("div", { class: "row" },
        h("button", { type: "button", class: "secondary", id: "add-rate", onclick: () => rows.append(rateRow("", null)) }, "Add a rate"),
        h("button", { type: "submit", id: "publish-price" }, "Publish price version")));
    show(
      h("h1", {}, m.model),
      status,
      h("div", { class: "cards" }, card("Kind", m.kind), card("Status", m.enabled ? "enabled" : "disabled", "model-status"),
        card("Cap", m.concurrency_limit), card("Price version", m.pricing_version === null ? "unpriced" : "v" + m.pricing_version)),
      availability, priceForm,
      h("p", {}, h("a", { href: "#/admin/models" }, "Back to models"))
    );
  }

  // ---- vouchers: mint (the codes shown once), list, revoke ----------------------------------
  function mintedPanel(m) {
    const text = m.codes.join("\n") + "\n";
    const name = `vouchers-${m.batch_id}.txt`;
    const copied = h("span", { class: "muted small", "aria-live": "polite" });
    const n = m.codes.length;
    return h("div", { class: "panel shown-once", id: "minted", "data-batch": m.batch_id },
      h("p", { class: "ok", role: "status" }, `Minted ${n} code${n === 1 ? "" : "s"} of ${money(m.amount)} each (batch ${m.batch_id}).`),
      h("p", { class: "warning", id: "shown-once" }, h("strong", {}, "Shown once. "),
        "Copy or download these codes now: only their hashes are kept, so they cannot be shown again."),
      h("pre", { class: "secret codes", id: "codes" }, m.codes.join("\n")),
      h("div", { class: "row" },
        h("button", { type: "button", class: "secondary", id: "copy-codes", onclick: async () => {
          try {
            await navigator.clipboard.writeText(text);
            fill(copied, "Copied.");
          } catch (_) {
            fill(copied, "The browser refused to copy: select the codes above, or download them.");
          }
        } }, "Copy all"),
        h("button", { type: "button", class: "secondary", id: "download-codes", onclick: () => saveBlob(new Blob([text], { type: "text/plain" }), name) }, "Download as text"),
        copied));
  }
  function batchState(b) {
    if (b.revoked_at) return ["revoked", "failed"];
    if (b.expires_at && Date.parse(b.expires_at) <= Date.now()) return ["expired", "expired"];
    if (b.redeemed >= b.count) return ["used up", "cancelled"];
    return ["active", "succeeded"];
  }
  async function adminVouchersPage(notice, n) {
    const page = await get(`/api/v1/admin/vouchers?page=${n || 1}&page_size=20`);
    const status = h("div", { "aria-live": "polite" });
    const fields = {
      amount: h("input", { id: "vm-amount", inputmode: "decimal", required: true, placeholder: "10.00", size: 10 }),
      count: h("input", { id: "vm-count", type: "number", min: 1, max: 10000, value: 1, required: true }),
      expires: h("input", { id: "vm-expires", type: "date" }),
      note: h("input", { id: "vm-note", maxlength: 500, placeholder: "launch promo" }),
    };
    const mint = h("form", { class: "panel", id: "mint", onsubmit: async (e) => {
      e.preventDefault();
      const body = { amount: fields.amount.value.trim().replace(/^\$/, "").replace(/,/g, ""), count: Number(fields.count.value) };
      if (fields.expires.value) body.expires_at = fields.expires.value + "T00:00:00Z";
      if (fields.note.value.trim()) body.note = fields.note.value.trim();
      try {
        const made = await api("POST", "/api/v1/admin/vouchers", body);
        await adminVouchersPage(mintedPanel(made), 1);
      } catch (err) {
        fill(status, message("Could not mint: " + err.message));
      }
    } },
      h("h2", {}, "Mint vouchers"),
      h("p", { class: "muted" }, "Each code credits its amount once to whoever redeems it. The codes are shown once, right after minting."),
      h("div", { class: "row" },
        h("label", { for: "vm-amount" }, "Amount each (USD)", fields.amount), h("label", { for: "vm-count" }, "How many", fields.count),
        h("label", { for: "vm-expires" }, "Expires on (optional)", fields.expires), h("label", { for: "vm-note", class: "grow" }, "Note (optional)", fields.note),
        h("button", { type: "submit" }, "Mint")),
      h("p", { class: "muted small" }, "An expiring batch's codes are refused from 00:00 UTC on that day."),
      status);
    const revoke = async (b) => {
      const left = b.count - b.redeemed;
      if (!confirm(`Revoke batch ${b.batch_id}? Its ${left} unredeemed code${left === 1 ? "" : "s"} will be refused; codes already redeemed stay credited.`)) return;
      try {
        const r = await api("DELETE", "/api/v1/admin/vouchers/" + encodeURIComponent(b.batch_id));
        await adminVouchersPage(message(`Batch ${r.batch_id} revoked: its unredeemed codes are refused from now on.`, "ok"), page.pagination.page);
      } catch (err) {
        fill(status, message("Could not revoke: " + err.message));
      }
    };
    show(
      h("h1", {}, "Vouchers"),
      notice || null,
      mint,
      h("h2", {}, "Batches"),
      table(["Batch", { label: "Amount", num: true, cls: "hide-narrow" }, { label: "Redeemed", num: true }, { label: "Expires", cls: "hide-narrow" }, { label: "Minted", cls: "hide-narrow" }, "State", ""],
        page.data.map((b) => {
          const [state, cls] = batchState(b);
          return h("tr", { "data-batch": b.batch_id },
            h("td", {}, b.note ? h("div", {}, b.note) : h("div", { class: "muted" }, "no note"), h("div", { class: "muted small id" }, b.batch_id),
              h("div", { class: "small show-narrow" }, money(b.amount) + " each")),
            h("td", { class: "num hide-narrow amount" }, money(b.amount)), h("td", { class: "num redeemed" }, `${b.redeemed} / ${b.count}`),
            h("td", { class: "hide-narrow" }, b.expires_at ? whenCell(b.expires_at) : "never"), h("td", { class: "hide-narrow" }, whenCell(b.created_at)),
            h("td", { class: "state" }, badge(state, cls)),
            h("td", {}, state === "active" ? h("button", { type: "button", class: "danger small", "aria-label": "Revoke batch " + b.batch_id, onclick: () => revoke(b) }, "Revoke") : null));
        }),
        "No vouchers minted yet.", "vouchers"),
      pager(page.pagination, (p) => adminVouchersPage(null, p))
    );
  }

  // ---- revenue: the whole gateway's month ---------------------------------------------------
  async function adminRevenuePage() {
    const month = monthInQuery();
    const [rev, users] = await Promise.all([
      get("/api/v1/admin/revenue?month=" + month),
      get("/api/v1/admin/users?page=1&page_size=100").catch(() => ({ data: [] })),
    ]);
    const names = new Map(users.data.map((u) => [u.id, u.name]));
    const go = (m) => { location.hash = "#/admin/revenue?month=" + m; };
    show(
      h("h1", {}, "Revenue for ", monthName(month)),
      monthPicker(monthChoices(null, month), month, go),
      rev.complete ? null : h("p", { class: "muted" }, "This month is in progress: its figures change until it ends."),
      h("div", { class: "cards" },
        card("Charged", money(rev.charges.total), "rev-charges"), card("Calls settled", rev.charges.calls, "rev-calls"),
        card("Credits added", money(rev.credits.total), "rev-credits"),
        card(`Refunded holds (${rev.refunds.calls} ${rev.refunds.calls === 1 ? "call" : "calls"})`, money(rev.refunds.amount), "rev-refunds")),
      h("h2", {}, "Charges by model"),
      table(["Model", { label: "Calls", num: true }, { label: "Charged", num: true }],
        rev.charges.by_model.map((c) => h("tr", { "data-model": c.model }, h("td", { class: "model" }, c.model), h("td", { class: "num" }, c.calls), h("td", { class: "num" }, money(c.amount)))),
        "No call settled this month.", "rev-models"),
      h("h2", {}, "Charges by user"),
      table(["User", { label: "Calls", num: true }, { label: "Charged", num: true }],
        rev.charges.by_user.map((c) => h("tr", { "data-user": c.user_id },
          h("td", {}, h("a", { href: "#/admin/users/" + encodeURIComponent(c.user_id) }, names.get(c.user_id) || c.user_id),
            names.has(c.user_id) ? h("div", { class: "muted small id hide-narrow" }, c.user_id) : null),
          h("td", { class: "num" }, c.calls), h("td", { class: "num" }, money(c.amount)))),
        "No call settled this month.", "rev-users"),
      h("h2", {}, "Credits by kind"),
      table(["Kind", { label: "Entries", num: true }, { label: "Amount", num: true }],
        rev.credits.by_kind.map((c) => h("tr", { "data-kind": c.kind }, h("td", {}, KIND_NAMES[c.kind] || c.kind), h("td", { class: "num" }, c.entries), h("td", { class: "num" }, money(c.amount)))),
        "No credits this month.", "rev-kinds")
    );
  }

  async function adminMaintenancePage(notice) {
    const state = await get("/api/v1/admin/maintenance");
    const on = state.enabled;
    const status = h("div", { "aria-live": "polite" }, notice ? message(notice, "ok") : null);
    show(
      h("h1", {}, "Maintenance"),
      status,
      h("div", { class: "panel" },
        h("p", {}, "Maintenance mode is ", h("strong", { id: "maintenance-state" }, on ? "on" : "off"), "."),
        h("p", { class: "muted" }, "While it is on, every generation call answers 503 (nothing is held or charged); reading, keys and the console keep working."),
        h("button", { type: "button", id: "maintenance", class: on ? "" : "danger", onclick: async () => {
          if (!on && !confirm("Turn maintenance on? Every generation call will answer 503.")) return;
          try {
            await api("PUT", "/api/v1/admin/maintenance", { enabled: !on });
            await adminMaintenancePage(on ? "Maintenance off." : "Maintenance on: generation calls answer 503.");
          } catch (err) {
            fill(status, message(err.message));
          }
        } }, on ? "Turn maintenance off" : "Turn maintenance on"))
    );
  }

  async function adminHealthPage() {
    const health = await get("/api/v1/admin/health");
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
      table([{ label: "Replica", cls: "hide-narrow" }, { label: "Pool", cls: "hide-narrow" }, "Endpoint", "State", { label: "Attempts", num: true, cls: "hide-narrow" }, { label: "Failures", num: true }, { label: "Errors", cls: "hide-narrow" }],
        endpoints.map(([replica, e]) => h("tr", {}, h("td", { class: "hide-narrow" }, replica), h("td", { class: "hide-narrow" }, e.pool), h("td", {}, e.name), h("td", {}, e.state),
          h("td", { class: "num hide-narrow" }, e.attempts), h("td", { class: "num" }, e.failures),
          h("td", { class: "hide-narrow" }, Object.entries(e.errors || {}).map(([k, v]) => `${k}: ${v}`).join(", ") || "none"))),
        "No replica has reported its endpoints yet.")
    );
  }

  // ---- the audit trail: only what changed, old → new ---------------------------------------
  // Nested objects become dotted paths; a price rate stays one value.
  function flatten(value, prefix, out) {
    if (value && typeof value === "object" && !Array.isArray(value) && !isRate(value)) {
      for (const [k, v] of Object.entries(value)) flatten(v, prefix ? prefix + "." + k : k, out);
      if (!Object.keys(value).length && prefix) out[prefix] = value;
    } else if (prefix) out[prefix] = value;
    return out;
  }
  function auditValue(field, v) {
    if (v === undefined || v === null) return "—";
    if (isRate(v)) return rateText(field.split(".").pop(), v);
    if (Array.isArray(v)) return v.length ? v.join(", ") : "none";
    if (typeof v === "string" && /(^|_)usd$/.test(field.split(".").pop()) && /^-?\d+\.\d+$/.test(v)) return usd(v);
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  function auditDiff(before, after) {
    const b = before && typeof before === "object" ? flatten(before, "", {}) : null;
    const a = after && typeof after === "object" ? flatten(after, "", {}) : null;
    const items = [];
    const same = (x, y) => JSON.stringify(x) === JSON.stringify(y);
    if (!b && a) {
      for (const [k, v] of Object.entries(a)) if (v !== null && v !== undefined) items.push(h("li", {}, h("span", { class: "field" }, k), " ", h("ins", {}, auditValue(k, v))));
      return h("ul", { class: "diff created" }, items.length ? items : h("li", { class: "muted" }, "created"));
    }
    if (b && !a) return h("ul", { class: "diff" }, h("li", { class: "muted" }, "removed"));
    if (!b && !a) return h("span", { class: "muted" }, "—");
    for (const [k, v] of Object.entries(a)) {
      if (k in b && same(b[k], v)) continue;
      items.push(h("li", {}, h("span", { class: "field" }, k), " ",
        k in b ? [h("del", {}, auditValue(k, b[k])), " → "] : null, h("ins", {}, auditValue(k, v))));
    }
    return h("ul", { class: "diff" }, items.length ? items : h("li", { class: "muted" }, "no change"));
  }

  async function adminAuditPage(n) {
    const page = await get(`/api/v1/admin/audit?page=${n}&page_size=50`);
    show(
      h("h1", {}, "Audit"),
      table(["When", { label: "Who", cls: "hide-narrow" }, "Action", { label: "Target", cls: "hide-narrow" }, "Changes"],
        page.data.map((a) => h("tr", {}, h("td", {}, whenCell(a.at)), h("td", { class: "hide-narrow id" }, me && a.actor === me.user.id ? "you" : a.actor),
          h("td", {}, h("strong", {}, a.action), h("div", { class: "muted small id show-narrow" }, a.target)),
          h("td", { class: "hide-narrow id" }, a.target), h("td", {}, auditDiff(a.before, a.after)))),
        "No operator actions yet.", "audit"),
      pager(page.pagination, adminAuditPage)
    );
  }

  route();
})();
