#!/usr/bin/env python3
"""The web console's flows in a real browser (Playwright for Python, Debian's Chromium).

Run by scripts/console.sh against a fresh gateway: sign in (by keyboard) and the balance equals the
API's; a playground chat streams, its task appears in the list and today's bar grows by its
charge; a key made with two scopes works and, revoked, is refused; an operator's top-up shows in
the user's overview; a queued video task cancelled from the console is refunded; a prompt or name
holding <script> renders as text; a wrong key gets a clear message. Every page is opened at 390 and
1,280 px wide without horizontal overflow, and the browser console stays free of errors.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

LANGUAGE_MODEL = "LangB-2.0-pro"
IMAGE_MODEL = "Vendor-Imagegen-4.5"
VIDEO_MODEL = "videogen-2-0"
NARROW_SHOTS = ("overview", "playground", "tasks")
PAGES = ["overview", "tasks", "ledger", "keys", "playground", "settings",
         "admin/users", "admin/models", "admin/health", "admin/audit"]


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
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("console", self._console)
        self.page.on("response", lambda r: r.status >= 500 and self.server_errors.append(f"{r.status} {r.url}"))
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

    def close(self):
        self.browser.close()


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
    b.goto("tasks")
    expect(page.get_by_role("link", name=task_id)).to_be_visible()
    b.goto("overview")
    expect(page.locator("#spent-today")).to_have_text("$%.6f" % ((before + charge) / 1e6))
    last_bar = page.locator("#spend-chart svg g").last
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

    # Every page, at both widths, loads without overflow or errors.
    b.goto("overview")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for name in PAGES:
            b.goto(name)
            expect(page.locator("main h1")).to_be_visible()
            expect(page.locator("main .error")).to_have_count(0)
            b.no_overflow(f"{name} at {width}px")
            if args.screenshots and (width == 1280 or name in NARROW_SHOTS):
                page.screenshot(path=f"{args.screenshots}/{name.replace('/', '-')}-{width}.png", full_page=True)

    # Sign out clears the session.
    page.set_viewport_size({"width": 1280, "height": 900})
    page.click("#signout")
    expect(page.locator("#key")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0, "signed out"
    if args.screenshots:
        page.screenshot(path=f"{args.screenshots}/signin-1280.png")

    assert not b.errors, "browser console errors:\n" + "\n".join(b.errors)
    assert not b.server_errors, "server errors:\n" + "\n".join(b.server_errors)
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
