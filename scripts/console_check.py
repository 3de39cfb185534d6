#!/usr/bin/env python3
"""The web console's flows in a real browser (Playwright for Python, Debian's Chromium).

Run by scripts/console.sh against a fresh gateway: sign in (by keyboard) and the balance equals the
API's; a playground chat streams, its task appears in the list, today's bar grows by its charge and
the balance left after it is shown; a key made with two scopes works and, revoked, is refused; an
operator's top-up shows in the user's overview; a queued video task cancelled from the console is
refunded; a prompt or name holding <script> renders as text; a wrong key gets a clear message.

Money in and out: an operator mints vouchers on the Vouchers page (the codes shown once, with a
warning, and downloadable as text), the batch is listed, a customer redeems a code on the Billing
page (credited amount and new balance shown; again: "already redeemed"; a made-up code: not found),
and revoking the batch refuses its other codes; "Pay with card" sends the browser to the Checkout
URL the gateway answered (Stripe's page is played by the check: nothing leaves the machine), a bad
amount shows the gateway's 400 message and unconfigured payments point to vouchers; the statement
page shows the API's figures for the month (and a previous month), and both CSV exports download
through a Blob under the CSP with their header lines, summing to the statement; the revenue page
shows the API's figures. A low-balance alert set on the Billing page above the balance puts a
banner with the API's figures atop every page (each page asks for it once, and only with
billing:manage); a webhook URL the egress policy refuses shows the API's message inline; turned
off, the banner is gone.

The console speaks money: every price reads in dollars per the catalog's unit ("$0.14 / 1M input
tokens", exact to the micro-dollar); the playground offers only priced models and only the fields
of the model's kind; the ledger shows one row per call (model, net charge in $, its entries behind a
disclosure) with a bounded number of task look-ups; the chart has a dollar y-axis with readable
labels and totals, and tiny series stay visible; the operator's models page has no column of red
buttons, maintenance has its own page, and a price form publishes the exact integer sheet; the audit
shows only changed fields, old → new. Every page is opened at 390 and 1,280 px wide without
horizontal overflow, failed requests or browser console errors, and at 390 px the navigation folds
into a Menu button.
"""

import argparse
import calendar
import csv
import json
import re
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

LANGUAGE_MODEL = "LangB-2.0-pro"
IMAGE_MODEL = "Vendor-Imagegen-4.5"
VIDEO_MODEL = "videogen-2-0"
AUDIO_MODEL = "AudioGen-1.0"
UNPRICED_MODEL = "LangC-5.2"
NARROW_SHOTS = ("overview", "playground", "tasks", "ledger", "admin/models", "statements")
PAGES = ["overview", "models", "tasks", "ledger", "statements", "billing", "keys", "playground", "settings",
         "admin/users", "admin/models", f"admin/models/{UNPRICED_MODEL}", "admin/vouchers", "admin/revenue",
         "admin/maintenance", "admin/health", "admin/audit"]
LEDGER_CSV_HEADER = "id,created_at,kind,amount_usd,balance_after_usd,task_id,note"
USAGE_CSV_HEADER = "task_id,created_at,ended_at,model,kind,status,billing_status,held_usd,amount_usd,usage"
# Screenshot names of pages whose route names one thing.
SHOT_NAMES = {f"admin/models/{UNPRICED_MODEL}": "admin-model"}


def call(base, method, path, key=None, body=None):
    """One API request; (status, JSON body)."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def ok(base, method, path, key, body=None, expect_status=(200, 201)):
    status, data = call(base, method, path, key, body)
    if status not in expect_status:
        raise AssertionError(f"{method} {path}: {status} {data}")
    return data


def dollars(micros, fixed=False):
    """Integer micro-USD as the console writes it: exact, trailing zeros trimmed to two decimals
    (all six when `fixed`), "-$" for a negative amount."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(int(micros)), 10**6)
    frac = f"{frac:06d}" if fixed else f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${whole:,}.{frac}"


def micros(text):
    """The API's USD text ("12.340000", "-0.5") as integer micro-USD, exactly."""
    sign = -1 if text.startswith("-") else 1
    whole, _, frac = text.lstrip("-").partition(".")
    return sign * (int(whole) * 10**6 + int((frac + "000000")[:6]))


def money(text):
    """The API's USD text as the console writes it ("$12.34", "$0.0025")."""
    return dollars(micros(text))


def price_prefix(rate):
    """The start of a rate's text: "$0.14 / 1M " for 140000 per 1000000, "$0.036 / image"."""
    amount = dollars(int(rate["amountMicrousd"]))
    denominator = int(rate["denominator"])
    if denominator == 1:
        return f"{amount} / "
    for value, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if denominator % value == 0:
            return f"{amount} / {denominator // value:,}{suffix} "
    return f"{amount} / {denominator:,} "


def priced(model):
    return bool(model.get("pricing"))


def today_micros(base, key):
    usage = ok(base, "GET", "/api/v1/usage?group_by=day", key)
    return usage["data"][-1]["spent_microusd"]


class Browser:
    """One page with the console's error watch."""

    def __init__(self, playwright, chromium, base, width):
        self.browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        self.context = self.browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.base = base
        self.errors = []
        self.server_errors = []
        self.failed = []  # requests that failed or answered >= 400 (some 401s are on purpose early on)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("console", self._console)
        self.page.on("response", lambda r: r.status >= 500 and self.server_errors.append(f"{r.status} {r.url}"))
        self.page.on("response", lambda r: r.status >= 400 and self.failed.append(f"{r.status} {r.url}"))
        self.page.on("requestfailed", lambda r: self.failed.append(f"failed {r.url}: {r.failure}"))
        self.page.on("dialog", lambda d: d.accept())

    def _console(self, message):
        # A refused request (401 for a wrong or revoked key, on purpose here) is logged by Chromium
        # as "Failed to load resource"; anything else is an error of the console itself.
        if message.type == "error" and "Failed to load resource" not in message.text:
            self.errors.append(f"console: {message.text}")

    def goto(self, page):
        self.page.goto(f"{self.base}/console/#/{page}")

    def sign_in(self, key):
        self.page.goto(f"{self.base}/console/")
        field = self.page.locator("#key")
        expect(field).to_be_focused()
        self.page.keyboard.type(key)
        self.page.keyboard.press("Enter")
        expect(self.page.locator("#balance")).to_be_visible()

    def no_overflow(self, what):
        overflow = self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{what}: the page is {overflow}px wider than the window"
        # Nor does a table scroll sideways inside its frame.
        tables = self.page.evaluate("""() => [...document.querySelectorAll('main .table-wrap')]
          .map((w) => w.scrollWidth - w.clientWidth)""")
        assert all(t <= 1 for t in tables), f"{what}: a table is wider than its frame by {max(tables)}px"

    def refused(self, status, path):
        """A refusal asked for on purpose: it happened, and is no failure of the console."""
        mine = lambda f: f.startswith(f"{status} ") and f.split("?")[0].endswith(path)  # noqa: E731
        assert any(mine(f) for f in self.failed), f"no {status} from {path} among {self.failed}"
        self.failed = [f for f in self.failed if not mine(f)]
        self.server_errors = [f for f in self.server_errors if not mine(f)]

    def texts(self, selector):
        """The text of each match, as written (not as CSS capitalises it)."""
        return self.page.locator(selector).evaluate_all("nodes => nodes.map((n) => n.textContent.trim())")

    def close(self):
        self.browser.close()


def check_prices(b, base, key):
    """The models page reads every rate in dollars per the catalog's unit, exactly."""
    page = b.page
    models = ok(base, "GET", "/api/v1/models", key)["data"]
    b.goto("models")
    expect(page.locator("table.models tbody tr")).to_have_count(len(models))
    for m in models:
        row = page.locator(f'table.models tr[data-model="{m["id"]}"]')
        if not priced(m):
            expect(row).to_contain_text("Not priced")
            continue
        for name, rate in m["pricing"].items():
            text = row.locator(f'li[data-rate="{name}"]').inner_text().strip()
            assert text.startswith(price_prefix(rate)), f"{m['id']} {name}: {text!r} does not start with {price_prefix(rate)!r}"
            assert "µUSD" not in text and "amountMicrousd" not in text, text
    # The catalog's own examples, as a person would say them (while the catalog still has them).
    examples = [("LangA-V4-flash", "input_tokens", "140000", "$0.14 / 1M input tokens"),
                (IMAGE_MODEL, "text_to_image_pieces", "36000", "$0.036 / image"),
                (AUDIO_MODEL, "output_audio_seconds", "2500", "$0.0025 / second")]
    by_id = {m["id"]: m for m in models}
    for model, rate, amount, text in examples:
        if ((by_id.get(model) or {}).get("pricing") or {}).get(rate, {}).get("amountMicrousd") == amount:
            expect(page.locator(f'table.models tr[data-model="{model}"] li[data-rate="{rate}"]')).to_contain_text(text)


def check_playground_models(b, base, key):
    """Only priced models are offered, each kind with its own fields and its price in dollars."""
    page = b.page
    models = ok(base, "GET", "/api/v1/models", key)["data"]
    by_id = {m["id"]: m for m in models}
    assert not priced(by_id[UNPRICED_MODEL]), f"{UNPRICED_MODEL} is expected unpriced at this point"
    b.goto("playground")
    expect(page.locator("#pg-model")).to_be_visible()
    offered = page.locator("#pg-model option").evaluate_all("options => options.map(o => o.value)")
    wanted = [m["id"] for m in models if m["kind"] in ("language", "image") and priced(m)]
    assert sorted(offered) == sorted(wanted), f"the playground offers {offered}, not the priced models {wanted}"
    assert UNPRICED_MODEL not in offered
    page.select_option("#pg-model", IMAGE_MODEL)
    expect(page.locator("#pg-max")).to_be_hidden()
    expect(page.get_by_text("Max tokens")).to_be_hidden()
    expect(page.locator("#pg-size")).to_be_visible()
    rate = by_id[IMAGE_MODEL]["pricing"]["text_to_image_pieces"]
    expect(page.locator("#pg-price")).to_contain_text(price_prefix(rate) + "image")
    page.select_option("#pg-model", LANGUAGE_MODEL)
    expect(page.locator("#pg-max")).to_be_visible()
    expect(page.locator("#pg-size")).to_be_hidden()
    name, rate = next((k, r) for k, r in by_id[LANGUAGE_MODEL]["pricing"].items() if k.startswith("input_tokens"))
    expect(page.locator(f'#pg-price li[data-rate="{name}"]')).to_contain_text(price_prefix(rate) + "input tokens")


def check_ledger(b, base, key, settled_task):
    """One row per call (model, link, net charge in $), its entries behind a disclosure; other
    entries one row each; the models come from a bounded number of task requests."""
    page = b.page
    entries = ok(base, "GET", "/api/v1/ledger?page=1&page_size=100", key)["data"]
    calls = {}
    for e in entries:
        if e["task_id"]:
            calls.setdefault(e["task_id"], []).append(e)
    others = [e for e in entries if not e["task_id"]]
    assert any(len(g) > 1 for g in calls.values()), "the ledger has calls of several entries to fold"
    requests = []
    listen = lambda r: "/api/v1/tasks" in r.url and requests.append(r.url)  # noqa: E731
    b.goto("ledger")
    expect(page.locator("table.ledger")).to_be_visible()
    page.on("request", listen)
    page.reload()  # a fresh console that knows no task yet
    expect(page.locator("table.ledger tr.call")).to_have_count(len(calls))
    expect(page.locator("table.ledger tr.entry")).to_have_count(len(others))
    page.remove_listener("request", listen)
    lists = [u for u in requests if "/api/v1/tasks?" in u]
    singles = [u for u in requests if "/api/v1/tasks/" in u]
    assert len(lists) <= 3 and len(singles) <= 10, f"too many task requests for one ledger page: {requests}"
    for task_id, group in calls.items():
        row = page.locator(f'tr.call[data-task="{task_id}"]')
        model = ok(base, "GET", f"/api/v1/tasks/{task_id}", key)["model"]
        expect(row.locator("a.model")).to_have_text(model)
        expect(row.locator("a.model")).to_have_attribute("href", f"#/tasks/{task_id}")
        if any(e["kind"] == "reserve" for e in group):
            net = sum(e["amount_microusd"] for e in group)
            expect(row.locator("td.charge")).to_have_text(("+" if net > 0 else "") + dollars(net, fixed=True))
    task = ok(base, "GET", f"/api/v1/tasks/{settled_task}", key)
    row = page.locator(f'tr.call[data-task="{settled_task}"]')
    expect(row.locator("td.charge")).to_have_text(dollars(-task["billing"]["actual_amount_microusd"], fixed=True))
    expect(row).to_contain_text("charged")
    # Its entries unfold under it, as the API keeps them.
    row_id = row.get_attribute("id")
    raw = page.locator(f'tr.raw[data-for="{row_id}"]')
    expect(raw.first).to_be_hidden()
    row.locator("button.disclose").click()
    expect(row.locator("button.disclose")).to_have_attribute("aria-expanded", "true")
    expect(raw).to_have_count(len(calls[settled_task]))
    for i in range(len(calls[settled_task])):
        expect(raw.nth(i)).to_be_visible()
    expect(page.locator("table.ledger tr.entry").first).to_contain_text("$")


def check_chart(b, base, key, width):
    """A dollar y-axis, labels of at least 10 px inside the chart that do not overlap, every
    non-zero series at least 2 px tall, and a totals table per model."""
    page = b.page
    ticks = b.texts("#spend-chart svg .y-tick")
    assert len(ticks) >= 2 and all(re.fullmatch(r"\$[\d,]+\.\d{2,6}", t) for t in ticks), f"y-axis labels at {width}px: {ticks}"
    boxes = page.evaluate("""() => {
      const svg = document.querySelector('#spend-chart svg').getBoundingClientRect();
      const text = [...document.querySelectorAll('#spend-chart svg text')].map((t) => {
        const r = t.getBoundingClientRect();
        return {x: t.closest('.x-axis') !== null, h: r.height, l: r.left, r: r.right, t: r.top, b: r.bottom, s: t.textContent};
      });
      const bars = [...document.querySelectorAll('#spend-chart svg g.day rect')].map((r) => r.getBoundingClientRect().height);
      return {svg: {l: svg.left, r: svg.right, t: svg.top, b: svg.bottom}, text, bars};
    }""")
    svg = boxes["svg"]
    for t in boxes["text"]:
        assert t["h"] >= 10, f"chart label {t['s']!r} is {t['h']:.1f}px tall at {width}px"
        assert svg["l"] - 0.5 <= t["l"] and t["r"] <= svg["r"] + 0.5 and svg["t"] - 0.5 <= t["t"] and t["b"] <= svg["b"] + 0.5, \
            f"chart label {t['s']!r} is clipped at {width}px"
    days = sorted((t for t in boxes["text"] if t["x"]), key=lambda t: t["l"])
    assert len(days) >= 2, f"day labels at {width}px: {days}"
    for a, c in zip(days, days[1:]):
        assert a["r"] <= c["l"], f"day labels {a['s']!r} and {c['s']!r} overlap at {width}px"
    assert boxes["bars"] and min(boxes["bars"]) >= 2, f"a series is too thin to see at {width}px: {boxes['bars']}"
    usage = ok(base, "GET", "/api/v1/usage?group_by=day", key)["data"]
    totals = {}
    for d in usage:
        for m in d["models"]:
            totals[m["model"]] = totals.get(m["model"], 0) + m["spent_microusd"]
    for model, micros in totals.items():
        expect(page.locator(f'#spend-chart .legend-table tr[data-model="{model}"] td').last).to_have_text(dollars(micros, fixed=True))


def check_nav(b, width):
    """At ≤ 600 px the navigation folds into a Menu button; nowhere a stray "|"."""
    page = b.page
    nav, menu = page.locator("#nav"), page.locator("#menu")
    assert "|" not in page.locator("header").inner_text(), "a stray separator in the header"
    if width > 600:
        expect(menu).to_be_hidden()
        expect(nav).to_be_visible()
        return
    expect(menu).to_be_visible()
    expect(nav).to_be_hidden()
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(nav).to_be_visible()
    nav.get_by_role("link", name="Tasks").click()
    expect(page.locator("main h1")).to_have_text("Tasks")
    expect(nav).to_be_hidden()


def check_narrow_columns(b):
    """At 390 px the tables keep model, status and charge in view."""
    page = b.page
    b.goto("tasks")
    expect(page.locator("main table")).to_be_visible()
    assert b.texts("main th:visible") == ["Model", "Status", "Charged"], b.texts("main th:visible")
    expect(page.locator("main tbody tr a.model").first).to_be_visible()
    b.goto("ledger")
    expect(page.locator("main table")).to_be_visible()
    assert b.texts("main th:visible") == ["Call or entry", "Status", "Amount"], b.texts("main th:visible")
    expect(page.locator("tr.call a.model").first).to_be_visible()
    expect(page.locator("tr.call td.charge").first).to_be_visible()
    b.goto("admin/vouchers")
    expect(page.locator("table.vouchers")).to_be_visible()
    assert b.texts("table.vouchers th:visible") == ["Batch", "Redeemed", "State", ""], b.texts("table.vouchers th:visible")
    expect(page.locator("table.vouchers td .show-narrow").first).to_contain_text(" each")


def check_admin_models(b, base, key):
    """Grouped model rows without red buttons, maintenance on its own page, and a price form that
    publishes the exact integer sheet."""
    page = b.page
    models = ok(base, "GET", "/api/v1/admin/models", key)["data"]
    b.goto("admin/models")
    expect(page.locator("main tr[data-model]")).to_have_count(len(models))
    expect(page.locator("main button.danger")).to_have_count(0)
    expect(page.locator("#maintenance")).to_have_count(0)
    b.goto("admin/maintenance")
    expect(page.locator("#maintenance")).to_be_visible()
    expect(page.locator("#maintenance-state")).to_have_text("off")

    # An existing sheet is shown as dollars per N units.
    flash = next(m for m in models if m["model"] == "LangA-V4-flash")
    b.goto("admin/models/LangA-V4-flash")
    rows = page.locator("#price-form .rate-row")
    expect(rows).to_have_count(len(flash["pricing"]))
    names = rows.locator(".rate-name").evaluate_all("inputs => inputs.map(i => i.value)")
    assert sorted(names) == sorted(flash["pricing"]), names
    row = rows.nth(names.index("input_tokens"))
    rate = flash["pricing"]["input_tokens"]
    expect(row.locator(".rate-amount")).to_have_value(dollars(int(rate["amountMicrousd"])).lstrip("$"))
    expect(row.locator(".rate-per")).to_have_value(rate["denominator"])
    expect(row.locator(".rate-unit")).to_have_value(rate["unit"])

    # A new sheet for the unpriced model: dollars in, exact micro-USD out.
    b.goto(f"admin/models/{UNPRICED_MODEL}")
    rows = page.locator("#price-form .rate-row")
    expect(rows).to_have_count(1)
    first = rows.nth(0)
    first.locator(".rate-name").fill("input_tokens")
    first.locator(".rate-amount").fill("0.29")
    first.locator(".rate-per").select_option("1000000")
    first.locator(".rate-unit").fill("token")
    expect(first.locator(".rate-preview")).to_contain_text("$0.29 / 1M input tokens")
    page.click("#add-rate")
    second = rows.nth(1)
    second.locator(".rate-name").fill("output_tokens")
    second.locator(".rate-amount").fill("1.0000001")
    second.locator(".rate-per").select_option("1000000")
    second.locator(".rate-unit").fill("token")
    page.click("#publish-price")
    expect(page.locator("main [role=alert]")).to_contain_text("six decimals")
    unpriced = next(m for m in ok(base, "GET", "/api/v1/admin/models", key)["data"] if m["model"] == UNPRICED_MODEL)
    assert unpriced["pricing"] is None, "an amount finer than $0.000001 is refused before anything is sent"
    second.locator(".rate-amount").fill("1.1")
    page.click("#publish-price")
    expect(page.get_by_role("status")).to_contain_text("price version 1 is active")
    priced_now = next(m for m in ok(base, "GET", "/api/v1/admin/models", key)["data"] if m["model"] == UNPRICED_MODEL)
    assert priced_now["pricing"] == {
        "input_tokens": {"amountMicrousd": "290000", "denominator": "1000000", "unit": "token"},
        "output_tokens": {"amountMicrousd": "1100000", "denominator": "1000000", "unit": "token"},
    }, priced_now["pricing"]
    expect(page.locator("#price-form .rate-row")).to_have_count(2)


def check_audit(b):
    """Only changed fields, old → new, prices in dollars; dates on at most two lines."""
    page = b.page
    b.goto("admin/audit")
    price = page.locator("table.audit tbody tr").filter(has_text="model.price").first
    expect(price).to_contain_text("$0.29 / 1M input tokens")
    expect(price).not_to_contain_text("amountMicrousd")
    topup = page.locator("table.audit tbody tr").filter(has_text="user.topup").first
    expect(topup.locator("del")).to_have_count(1)
    expect(topup.locator("ins").first).to_be_visible()
    lines = page.evaluate("""() => [...document.querySelectorAll('table.audit .when')].map((w) =>
      w.getBoundingClientRect().height / parseFloat(getComputedStyle(w).lineHeight))""")
    assert lines and max(lines) <= 2.2, f"audit dates take {max(lines):.1f} lines"


def check_mint(b, base, key):
    """An operator mints a batch on the Vouchers page: its codes are shown once with a warning and
    download as text; the batch is listed with what the API says; a reload shows no code."""
    page = b.page
    b.goto("admin/vouchers")
    page.fill("#vm-amount", "2.50")
    page.fill("#vm-count", "3")
    page.fill("#vm-note", "console check")
    page.click("#mint button[type=submit]")
    expect(page.locator("#shown-once")).to_contain_text("Shown once")
    codes = page.locator("#codes").inner_text().split()
    assert len(codes) == 3 and len(set(codes)) == 3 and all(c.startswith("GV-") for c in codes), codes
    batch_id = page.locator("#minted").get_attribute("data-batch")
    expect(page.locator("#minted [role=status]")).to_contain_text("3 codes of $2.50 each")
    with page.expect_download() as info:
        page.click("#download-codes")
    download = info.value
    assert download.suggested_filename == f"vouchers-{batch_id}.txt", download.suggested_filename
    with open(download.path()) as f:
        assert f.read().split() == codes, "the text file holds the codes shown"
    listed = ok(base, "GET", "/api/v1/admin/vouchers?page=1&page_size=100", key)["data"]
    batch = next(x for x in listed if x["batch_id"] == batch_id)
    assert (batch["amount"], batch["count"], batch["redeemed"], batch["note"]) == ("2.500000", 3, 0, "console check"), batch
    row = page.locator(f'table.vouchers tr[data-batch="{batch_id}"]')
    expect(row.locator("td.redeemed")).to_have_text("0 / 3")
    expect(row.locator("td.amount")).to_have_text("$2.50")
    expect(row.locator("td.state")).to_have_text("active")
    page.reload()
    expect(row).to_be_visible()
    expect(page.locator("#codes")).to_have_count(0)
    assert all(c not in page.content() for c in codes), "the codes are shown once"
    return batch_id, codes


def redeem(page, code):
    page.fill("#voucher-code", code)
    page.click("#redeem")


def check_redeem(b, base, key, codes):
    """A customer redeems a code on the Billing page (lower case and without dashes: both are
    forgiven): the credited amount and the new balance; again: already redeemed; a made-up one: not
    found; the balance moved once."""
    page = b.page
    shown = ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"]
    before = micros(shown)
    b.goto("billing")
    expect(page.locator("#billing-balance")).to_have_text("$" + shown)
    redeem(page, codes[0].lower().replace("-", ""))
    expect(page.locator("#credited")).to_have_text("$2.50")
    balance = ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"]
    assert micros(balance) == before + 2_500_000, (before, balance)
    expect(page.locator("#new-balance")).to_have_text("$" + balance)
    expect(page.locator("#billing-balance")).to_have_text("$" + balance)
    expect(page.locator("#voucher-code")).to_have_value("")
    status = page.locator("#redeem-status [role=alert]")
    redeem(page, codes[0])
    expect(status).to_contain_text("already been redeemed")
    b.refused(409, "/api/v1/vouchers/redeem")
    redeem(page, "GV-0000-0000-0000-0000-0000-0000-0000")
    expect(status).to_contain_text("No such code")
    b.refused(404, "/api/v1/vouchers/redeem")
    assert ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"] == balance, "credited once"
    # The credit is in the billing page's recent credits.
    expect(page.locator('main tr[data-kind="voucher"]').first).to_contain_text("+$2.50")


def check_revoke(b, base, key, batch_id, codes):
    """Revoking (confirmed) marks the batch revoked; its unredeemed codes are refused."""
    page = b.page
    b.goto("admin/vouchers")
    row = page.locator(f'table.vouchers tr[data-batch="{batch_id}"]')
    expect(row.locator("td.redeemed")).to_have_text("1 / 3")
    row.get_by_role("button", name=f"Revoke batch {batch_id}").click()
    expect(page.get_by_role("status")).to_contain_text(f"Batch {batch_id} revoked")
    expect(row.locator("td.state")).to_have_text("revoked")
    expect(row.get_by_role("button")).to_have_count(0)
    listed = ok(base, "GET", "/api/v1/admin/vouchers?page=1&page_size=100", key)["data"]
    assert next(x for x in listed if x["batch_id"] == batch_id)["revoked_at"], "revoked in the API"
    b.goto("billing")
    redeem(page, codes[1])
    expect(page.locator("#redeem-status [role=alert]")).to_contain_text("No such code")
    b.refused(404, "/api/v1/vouchers/redeem")


CHECKOUT_PAGE = "<!doctype html><title>Checkout</title><p>Stripe Checkout, played by console_check.py</p>"


def check_add_funds(b, base, key):
    """Bad amounts show the gateway's 400 message; unconfigured payments point to vouchers; a good
    amount sends the browser to the Checkout URL the gateway answered."""
    page = b.page
    balance = ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"]
    b.goto("billing")
    status = page.locator("#funds-status [role=alert]")
    for amount, says in (("2.001", "at most 2 decimals"), ("1", "amount must be")):
        page.fill("#funds-amount", amount)
        page.click("#pay")
        expect(status).to_contain_text("That amount cannot be paid")
        expect(status).to_contain_text(says)
        b.refused(400, "/api/v1/topups/checkout")
    assert page.url.startswith(base), "a refused amount stays here"
    # A gateway without Stripe keys answers 503 payments_not_configured (played here: this one has them).
    unset = {"error": {"code": "payments_not_configured", "message": "payments are not configured on this gateway"}}
    route = "**/api/v1/topups/checkout"
    page.route(route, lambda r: r.fulfill(status=503, content_type="application/json", body=json.dumps(unset)))
    page.fill("#funds-amount", "20")
    page.click("#pay")
    expect(status).to_contain_text("Card payments are not set up")
    expect(status).to_contain_text("voucher")
    b.refused(503, "/api/v1/topups/checkout")
    page.unroute(route)
    # Stripe's hosted page is played here: nothing leaves the machine.
    landed = []

    def stripe(r):
        landed.append(r.request.url)
        r.fulfill(status=200, content_type="text/html", body=CHECKOUT_PAGE)

    # The gateway's answer is read on its way to the page (its body is gone once the page leaves).
    answers = []

    def through(r):
        answer = r.fetch()
        answers.append((answer.status, answer.json()))
        r.fulfill(response=answer)

    page.route(route, through)
    page.route("https://checkout.stripe.com/**", stripe)
    page.fill("#funds-amount", "$20")
    page.click("#pay")
    page.wait_for_url(re.compile(r"^https://checkout\.stripe\.com/"))
    assert len(answers) == 1 and answers[0][0] == 201, answers
    session = answers[0][1]
    assert session["id"].startswith("cs_") and session["url"].startswith("https://checkout.stripe.com/"), session
    assert page.url == session["url"] and landed == [session["url"]], (page.url, landed, session)
    expect(page.locator("body")).to_contain_text("Stripe Checkout")
    page.unroute("https://checkout.stripe.com/**")
    page.unroute(route)
    assert ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"] == balance, "nothing is credited before Stripe's event"
    # Back from Stripe, the tab is still signed in.
    b.goto("billing")
    expect(page.locator("#billing-balance")).to_have_text("$" + balance)


def csv_file(path):
    """(header line, rows as dicts) of an RFC 4180 file."""
    with open(path, newline="") as f:
        text = f.read()
    return text.split("\r\n", 1)[0], list(csv.DictReader(text.splitlines(keepends=True)))


def check_statement(b, base, key):
    """The month's figures are the API's; both CSV exports download (a Blob behind <a download>,
    under the console's CSP) with their header lines and sum to the statement; a previous month
    is selectable."""
    page = b.page
    month = time.strftime("%Y-%m", time.gmtime())
    st = ok(base, "GET", f"/api/v1/statements/{month}", key)
    b.goto("statements")
    expect(page.locator("#month")).to_have_value(month)
    for cell, value in (("#st-opening", st["opening_balance"]), ("#st-credits", st["credits"]["total"]),
                        ("#st-charges", st["charges"]["total"]), ("#st-held-change", st["held"]["change"]),
                        ("#st-closing", st["closing_balance"])):
        expect(page.locator(cell)).to_have_text(money(value))
    kinds = {c["kind"]: c for c in st["credits"]["by_kind"]}
    assert "voucher" in kinds and st["charges"]["by_model"], f"the month has a voucher and calls: {st}"
    expect(page.locator("table.statement tr[data-kind]")).to_have_count(len(kinds))
    for kind, c in kinds.items():
        expect(page.locator(f'table.statement tr[data-kind="{kind}"] td')).to_have_text(money(c["amount"]))
    expect(page.locator("table.st-models tbody tr")).to_have_count(len(st["charges"]["by_model"]))
    for m in st["charges"]["by_model"]:
        cells = page.locator(f'table.st-models tr[data-model="{m["model"]}"] td')
        expect(cells.nth(1)).to_have_text(str(m["calls"]))
        expect(cells.nth(2)).to_have_text(money(m["amount"]))
    expect(page.locator("#st-refunds")).to_contain_text(money(st["refunds"]["amount"]))
    year, number = int(month[:4]), int(month[5:])
    first, last = f"{month}-01", f"{month}-{calendar.monthrange(year, number)[1]:02d}"
    files = {}
    for link, name, header in (("#ledger-csv", "ledger", LEDGER_CSV_HEADER), ("#usage-csv", "usage", USAGE_CSV_HEADER)):
        with page.expect_download() as info:
            page.click(link)
        download = info.value
        assert download.suggested_filename == f"{name}-{first}-{last}.csv", download.suggested_filename
        head, rows = csv_file(download.path())
        assert head == header, f"{name}: {head!r}"
        files[name] = rows
    assert sum(micros(r["amount_usd"]) for r in files["ledger"]) == micros(st["closing_balance"]) - micros(st["opening_balance"])
    settled = sum(micros(r["amount_usd"]) for r in files["usage"] if r["billing_status"] == "settled")
    assert settled == micros(st["charges"]["total"]), (settled, st["charges"])
    # A previous month: its own statement.
    earlier = f"{year - 1}-12" if number == 1 else f"{year}-{number - 1:02d}"
    page.select_option("#month", earlier)
    expect(page).to_have_url(re.compile(rf"#/statements\?month={earlier}$"))
    old = ok(base, "GET", f"/api/v1/statements/{earlier}", key)
    expect(page.locator("main h1")).to_have_text(f"Statement for {calendar.month_name[int(earlier[5:])]} {earlier[:4]}")
    expect(page.locator("#st-closing")).to_have_text(money(old["closing_balance"]))
    expect(page.locator("#st-progress")).to_have_count(0)


def check_revenue(b, base, key):
    """The revenue page shows the API's figures: charges by model and by user, credits by kind."""
    page = b.page
    month = time.strftime("%Y-%m", time.gmtime())
    rev = ok(base, "GET", f"/api/v1/admin/revenue?month={month}", key)
    b.goto("admin/revenue")
    expect(page.locator("#month")).to_have_value(month)
    expect(page.locator("#rev-charges")).to_have_text(money(rev["charges"]["total"]))
    expect(page.locator("#rev-calls")).to_have_text(str(rev["charges"]["calls"]))
    expect(page.locator("#rev-credits")).to_have_text(money(rev["credits"]["total"]))
    expect(page.locator("#rev-refunds")).to_have_text(money(rev["refunds"]["amount"]))
    assert rev["charges"]["by_model"] and rev["charges"]["by_user"] and rev["credits"]["by_kind"], rev
    for table, field, lines in (("rev-models", "model", rev["charges"]["by_model"]), ("rev-users", "user", rev["charges"]["by_user"]),
                                ("rev-kinds", "kind", rev["credits"]["by_kind"])):
        expect(page.locator(f"table.{table} tbody tr")).to_have_count(len(lines))
        for line in lines:
            name = line.get("model") or line.get("user_id") or line["kind"]
            cells = page.locator(f'table.{table} tr[data-{field}="{name}"] td')
            expect(cells.nth(1)).to_have_text(str(line.get("calls", line.get("entries"))))
            expect(cells.nth(2)).to_have_text(money(line["amount"]))


REFUSED_WEBHOOK = "https://127.0.0.1/x"  # not a public address: the egress policy refuses it


def shoot(page, path, width):
    """The whole page, cut at 1,200 px so that a long list keeps the picture small."""
    height = min(1200, page.evaluate("document.documentElement.scrollHeight"))
    page.screenshot(path=path, full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height})


def goto_counting_alerts(b, name):
    """Opens a page and waits for its look-up of the alert; how many times it asked (once)."""
    asked = []
    listen = lambda r: r.url.split("?")[0].endswith("/api/v1/alerts") and r.method == "GET" and asked.append(r.url)  # noqa: E731
    b.page.on("request", listen)
    with b.page.expect_response(lambda r: r.url.split("?")[0].endswith("/api/v1/alerts") and r.request.method == "GET"):
        b.goto(name)
    expect(b.page.locator("main h1")).to_be_visible()
    b.page.wait_for_load_state("networkidle")
    b.page.remove_listener("request", listen)
    return len(asked)


def check_banner(b, alert, what):
    """The banner tops the page with the API's figures and a link to the billing page."""
    banner = b.page.locator("main > #low-balance")
    expect(banner).to_be_visible()
    expect(banner).to_have_attribute("role", "status")
    expect(banner.locator("#alert-balance")).to_have_text(money(alert["balance_usd"]))
    expect(banner.locator("#alert-threshold")).to_have_text(money(alert["low_balance_usd"]))
    expect(banner).to_contain_text(f"Your balance {money(alert['balance_usd'])} is below your alert threshold of "
                                   f"{money(alert['low_balance_usd'])}.")
    expect(banner.get_by_role("link", name="Add funds")).to_have_attribute("href", "#/billing")
    assert b.page.evaluate("document.querySelector('main').firstElementChild.id") == "low-balance", f"{what}: the banner is first"
    b.no_overflow(what)


def check_alerts(b, base, key, screenshots):
    """A low-balance alert set on the Billing page above the balance (no webhook URL) puts a banner
    with the API's figures atop every page, each page asking for the alert once; a webhook URL the
    egress policy refuses shows the API's message inline and changes nothing; turned off, the banner
    is gone. At 1,280 and 390 px. A key without billing:manage never asks for the alert."""
    page = b.page
    banner = page.locator("#low-balance")
    assert ok(base, "GET", "/api/v1/alerts", key)["low_balance_usd"] is None, "no alert is set yet"
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert goto_counting_alerts(b, "billing") == 1, "the billing page asks for the alert once"
        expect(page.locator("#alert-state")).to_contain_text("No alert is set")
        expect(page.locator("#alert-off")).to_be_disabled()
        expect(banner).to_be_hidden()
        # Above the balance (a round figure, $5 to $6 above): low at once.
        balance = micros(ok(base, "GET", "/api/v1/alerts", key)["balance_usd"])
        threshold = (balance // 10**6 + 6) * 10**6
        page.fill("#alert-amount", dollars(threshold))
        page.fill("#alert-webhook", "")
        page.click("#alert-save")
        expect(page.locator("#alert-status [role=status]")).to_contain_text("Saved")
        alert = ok(base, "GET", "/api/v1/alerts", key)
        assert micros(alert["low_balance_usd"]) == threshold and alert["webhook_url"] is None, alert
        assert alert["below"] and not alert["armed"], f"set above the balance, it is below and not armed: {alert}"
        check_banner(b, alert, f"billing with its alert at {width}px")
        expect(page.locator("#alert-state")).to_contain_text("below threshold")
        # Atop every page, each asking once.
        for name in ("overview", "ledger", "billing"):
            assert goto_counting_alerts(b, name) == 1, f"{name} asks for the alert once"
            check_banner(b, alert, f"{name} with the banner at {width}px")
        expect(page.locator("#alert-amount")).to_have_value(dollars(threshold)[1:])
        expect(page.locator("#alert-state")).to_contain_text(f"is below {money(alert['low_balance_usd'])}")
        if screenshots:
            shoot(page, f"{screenshots}/billing-alert-{width}.png", width)
        # A webhook URL the egress policy refuses: the API's message, inline; nothing changes.
        status, refusal = call(base, "PUT", "/api/v1/alerts", key, {"low_balance_usd": "1.00", "webhook_url": REFUSED_WEBHOOK})
        assert status == 400 and refusal["error"]["code"] == "invalid_request", (status, refusal)
        page.fill("#alert-amount", "1.00")
        page.fill("#alert-webhook", REFUSED_WEBHOOK)
        page.click("#alert-save")
        refused = page.locator("#alert-status [role=alert]")
        expect(refused).to_contain_text("Could not save the alert")
        expect(refused).to_contain_text(refusal["error"]["message"])
        b.refused(400, "/api/v1/alerts")
        b.no_overflow(f"a refused webhook URL at {width}px")
        assert ok(base, "GET", "/api/v1/alerts", key) == alert, "a refused URL changes nothing"
        # A bad amount is refused before anything is sent.
        page.fill("#alert-amount", "five")
        page.click("#alert-save")
        expect(refused).to_contain_text("not an amount in dollars")
        # Turned off: the banner is gone, here and on the next page.
        page.click("#alert-off")
        expect(page.locator("#alert-status [role=status]")).to_contain_text("alert is off")
        expect(banner).to_be_hidden()
        expect(page.locator("#alert-state")).to_contain_text("No alert is set")
        off = ok(base, "GET", "/api/v1/alerts", key)
        assert off["low_balance_usd"] is None and not off["below"], off
        assert goto_counting_alerts(b, "overview") == 1
        expect(banner).to_be_hidden()
    page.set_viewport_size({"width": 1280, "height": 900})

    # A key without billing:manage: no alert panel, no banner, and never a request for the alert.
    made = ok(base, "POST", "/api/v1/keys", key, {"name": "no-billing", "scopes": ["models:read", "overview:read"]})
    context = b.browser.new_context(viewport={"width": 390, "height": 900})
    other = context.new_page()
    errors, asked = [], []
    other.on("pageerror", lambda e: errors.append(str(e)))
    other.on("request", lambda r: "/api/v1/alerts" in r.url and asked.append(r.url))
    other.goto(f"{base}/console/")
    other.fill("#key", made["secret"])
    other.press("#key", "Enter")
    expect(other.locator("#balance")).to_be_visible()
    other.goto(f"{base}/console/#/billing")
    expect(other.locator("#billing-scope")).to_contain_text("low-balance alert")
    expect(other.locator("#alert-form")).to_have_count(0)
    other.wait_for_load_state("networkidle")
    expect(other.locator("#low-balance")).to_be_hidden()
    assert not asked and not errors, (asked, errors)
    context.close()
    ok(base, "DELETE", f"/api/v1/keys/{made['id']}", key, expect_status=(200, 204))


def flows(playwright, args):
    base, key = args.base, args.key
    b = Browser(playwright, args.chromium, base, 1280)
    page = b.page

    # A wrong key gets a clear message and no session.
    page.goto(f"{base}/console/")
    page.fill("#key", "sk-gw-not-a-key")
    page.press("#key", "Enter")
    expect(page.get_by_role("alert")).to_contain_text("That key was refused")
    assert page.evaluate("sessionStorage.length") == 0, "a refused key is not kept"

    # Sign in by keyboard; the balance shown is the API's; the key is in sessionStorage only.
    b.sign_in(key)
    overview = ok(base, "GET", "/api/v1/overview", key)
    expect(page.locator("#balance")).to_have_text("$" + overview["user"]["balance_usd"])
    assert key not in page.url, "the key is never in a URL"
    assert page.evaluate("localStorage.length") == 0, "nothing in localStorage"
    b.failed.clear()  # the refused key above answered 401 on purpose

    # Prices read in dollars; the playground offers priced models with their own fields.
    check_prices(b, base, key)
    check_playground_models(b, base, key)

    # A chat in the playground streams; its task is listed; today's bar grows by its charge.
    before = today_micros(base, key)
    streams = []
    page.on("response", lambda r: r.url.endswith("/api/v1/chat/completions") and streams.append(r.headers.get("content-type", "")))
    b.goto("playground")
    page.select_option("#pg-model", LANGUAGE_MODEL)
    page.fill("#pg-prompt", "Tell me about the sea")
    expect(page.locator("#pg-hold")).to_contain_text("will hold $")
    page.click("#pg-send")
    expect(page.locator("#pg-task")).to_be_visible(timeout=20000)
    assert page.locator("#pg-output").inner_text().strip(), "the answer was shown"
    assert streams and streams[0].startswith("text/event-stream"), f"the chat was streamed: {streams}"
    task_id = page.locator("#pg-task").inner_text().removeprefix("Task ").strip()
    task = ok(base, "GET", f"/api/v1/tasks/{task_id}", key)
    charge = task["billing"]["actual_amount_microusd"]
    assert charge and charge > 0, f"the call was charged: {task['billing']}"
    left = ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"]
    expect(page.locator("#pg-balance-left")).to_have_text("$" + left)
    b.goto("tasks")
    expect(page.get_by_role("link", name=task_id)).to_be_visible()
    b.goto("overview")
    expect(page.locator("#spent-today")).to_have_text("$%.6f" % ((before + charge) / 1e6))
    last_bar = page.locator("#spend-chart svg g.day").last
    expect(last_bar).to_have_attribute("data-microusd", str(before + charge))

    # A key with two scopes: created, shown once, used, revoked, refused.
    b.goto("keys")
    page.fill("#key-name", "browser-key")
    page.check('input[value="models:read"]')
    page.check('input[value="overview:read"]')
    page.click("#new-key button[type=submit]")
    secret = page.locator("#new-secret").inner_text().strip()
    assert secret.startswith("sk-"), secret
    assert call(base, "GET", "/api/v1/models", secret)[0] == 200, "the new key works"
    assert call(base, "GET", "/api/v1/tasks", secret)[0] == 401, "it has only its two scopes"
    page.get_by_role("button", name="Revoke browser-key").click()
    expect(page.get_by_role("status")).to_contain_text("revoked")
    assert call(base, "GET", "/api/v1/models", secret)[0] == 401, "the revoked key is refused"

    # An operator tops a user up; the user's overview shows it. The name renders as text.
    name = "Bob <script>window.__xss = 1</script>"
    user = ok(base, "POST", "/api/v1/admin/users", key, {"name": name, "email": "bob@example.com", "balance": "1"})
    user_key = ok(base, "POST", f"/api/v1/admin/users/{user['id']}/keys", key,
                  {"name": "bob", "scopes": ["overview:read"]})["secret"]
    page.goto(f"{base}/console/#/admin/users?q=bob%40example")
    page.get_by_role("link", name=name).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name)
    page.fill("#topup-amount", "5.25")
    page.fill("#topup-note", "browser top-up")
    page.click("#topup button[type=submit]")
    expect(page.locator("#user-balance")).to_have_text("$6.250000")
    seen = ok(base, "GET", "/api/v1/overview", user_key)
    assert seen["user"]["balance_usd"] == "6.250000", seen["user"]
    assert page.evaluate("window.__xss") is None, "no script from a name ran"

    # A prompt holding <script> renders as text on its task page.
    b.goto("playground")
    page.select_option("#pg-model", IMAGE_MODEL)
    page.fill("#pg-prompt", "<script>window.__xss = 2</script> a red fox")
    page.click("#pg-send")
    expect(page.locator("#pg-task")).to_be_visible(timeout=20000)
    page.locator("#pg-task").click()
    expect(page.locator("pre.prompt")).to_have_text("<script>window.__xss = 2</script> a red fox")
    assert page.evaluate("window.__xss") is None, "no script from a prompt ran"

    # A queued video task cancelled from the console is refunded.
    balance = ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"]
    video = ok(base, "POST", "/api/v1/tasks", key, {"model": VIDEO_MODEL, "prompt": "[sim:video=slow_queue] a slow fox"},
               expect_status=(202,))
    deadline = time.monotonic() + 60
    while ok(base, "GET", f"/api/v1/tasks/{video['id']}", key)["status"] != "queued":
        assert time.monotonic() < deadline, "the video task never reached queued"
        time.sleep(0.2)
    b.goto(f"tasks/{video['id']}")
    page.click("#cancel-task")
    expect(page.locator(".badge").first).to_have_text("cancelled")
    cancelled = ok(base, "GET", f"/api/v1/tasks/{video['id']}", key)
    assert cancelled["billing"]["status"] == "refunded", cancelled["billing"]
    after = ok(base, "GET", "/api/v1/overview", key)["user"]["balance_usd"]
    assert after == balance, f"the hold came back: {balance} -> {after}"

    # A finished video task shows its video.
    done = ok(base, "POST", "/api/v1/tasks", key, {"model": VIDEO_MODEL, "prompt": "a quick fox"}, expect_status=(202,))
    deadline = time.monotonic() + 60
    while ok(base, "GET", f"/api/v1/tasks/{done['id']}", key)["status"] != "succeeded":
        assert time.monotonic() < deadline, "the video task never succeeded"
        time.sleep(0.3)
    b.goto(f"tasks/{done['id']}")
    expect(page.locator("#task-video")).to_have_attribute("src", ok(base, "GET", f"/api/v1/tasks/{done['id']}", key)["output_url"])

    # The ledger folds each call into one row; the operator's pages.
    check_ledger(b, base, key, task_id)
    check_admin_models(b, base, key)
    check_audit(b)

    # Money in and out: vouchers minted, redeemed and revoked; a card payment up to Stripe's page;
    # the month's statement and its exports; the revenue report.
    batch_id, codes = check_mint(b, base, key)
    check_redeem(b, base, key, codes)
    check_revoke(b, base, key, batch_id, codes)
    check_add_funds(b, base, key)
    check_statement(b, base, key)
    check_revenue(b, base, key)

    # A low-balance alert: its banner on every page while the balance is below it.
    check_alerts(b, base, key, args.screenshots)

    # Every page, at both widths, loads without overflow, failed requests or errors.
    b.goto("overview")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        b.goto("overview")
        expect(page.locator("#spend-chart svg")).to_be_visible()
        check_chart(b, base, key, width)
        check_nav(b, width)
        if width <= 600:
            check_narrow_columns(b)
        for name in PAGES + [f"tasks/{task_id}"]:
            b.goto(name)
            expect(page.locator("main h1")).to_be_visible()
            expect(page.locator("main .error")).to_have_count(0)
            b.no_overflow(f"{name} at {width}px")
            if args.screenshots and name in PAGES and (width == 1280 or name in NARROW_SHOTS):
                shot = SHOT_NAMES.get(name, name.replace("/", "-"))
                shoot(page, f"{args.screenshots}/{shot}-{width}.png", width)

    # Sign out clears the session.
    page.set_viewport_size({"width": 1280, "height": 900})
    page.click("#signout")
    expect(page.locator("#key")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0, "signed out"
    if args.screenshots:
        page.screenshot(path=f"{args.screenshots}/signin-1280.png")

    assert not b.errors, "browser console errors:\n" + "\n".join(b.errors)
    assert not b.server_errors, "server errors:\n" + "\n".join(b.server_errors)
    assert not b.failed, "failed requests:\n" + "\n".join(b.failed)
    b.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--screenshots", help="folder to write a screenshot of each page to")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        flows(playwright, args)
    print("console flows: ok")


if __name__ == "__main__":
    sys.exit(main())
