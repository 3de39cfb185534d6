"""Runs the examples of README.md and docs/API.md as pasted against a running gateway, so they
cannot rot.

Usage: GATEWAY_BASE=http://127.0.0.1:PORT GATEWAY_KEY=sk-gw-... python doc_examples.py

- Every ```sh block with a `curl` runs in bash with `GW`, `KEY` and `ADMIN` set (the demo key is an
  operator's); `export` lines are skipped (those variables are set already), `http://127.0.0.1:8080`
  becomes the gateway's address. Each curl call's HTTP status is recorded (curl's `--write-out` to
  stderr) and must be below 400, except the few the docs say are refused (EXPECTED).
- The placeholders the docs use for ids are filled with real ones made for the purpose: `usr_…` a
  scratch user, `key_…` a fresh key for each command (the caller's own on the self-service
  routes, else the scratch user's), `task_…` a finished chat task
  (a queued video task for a cancellation); `vb_…` and `GV-…` a fresh voucher batch
  and its code; `first_frame.png` is a small PNG.
- Every ```python block runs with `KEY` defined, in the same virtual environment as this script
  (the OpenAI, Anthropic, LangChain and LiteLLM packages installed by scripts/sdk_compat.sh).
- A command that needs what a local run cannot have (a public webhook host) is skipped, and named.
"""

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.environ["GATEWAY_BASE"].rstrip("/")
KEY = os.environ["GATEWAY_KEY"]
DOCS = ["README.md", "docs/API.md"]
ELLIPSIS = "\u2026"
# Substrings of a curl command whose refusal is the point of the example, and its status.
EXPECTED = {"X-Max-Cost: 0.001": 402}
# Substrings of a command that cannot run here, and why.
SKIPPED = {"YOUR-HOST": "needs a public webhook host"}
TINY_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def call(method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{BASE}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {KEY}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def blocks(lang: str):
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        for n, (kind, body) in enumerate(re.findall(r"```(\w*)\n(.*?)```", text, re.S)):
            if kind == lang:
                yield f"{doc} block {n + 1}", body


def commands(block: str):
    """The block's shell commands: continuation lines joined, comments and exports dropped."""
    out, current = [], ""
    for line in block.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#") or stripped.startswith("export ")):
            continue
        current += line + "\n"
        if not line.rstrip().endswith("\\") and current.count("'") % 2 == 0:
            out.append(current)
            current = ""
    if current:
        out.append(current)
    return out


class Ids:
    """Real ids for the docs' placeholders."""

    def __init__(self) -> None:
        self.user = call("POST", "/api/v1/admin/users", {"name": "Docs", "email": "docs@example.com", "balance": "5"})
        self.user_id = self.user["user"]["id"] if "user" in self.user else self.user["id"]

    def key(self, own: bool) -> str:
        """A fresh key: the caller's own (for the self-service routes) or the scratch user's."""
        path = "/api/v1/keys" if own else f"/api/v1/admin/users/{self.user_id}/keys"
        return call("POST", path, {"name": "docs", "scopes": ["models:read"]})["id"]

    def task(self, cancel: bool) -> str:
        if cancel:
            made = call("POST", "/api/v1/tasks", {"model": "videogen-2-0", "prompt": "a queued wave", "duration": 5})
            # The worker submits the task upstream after the answer (`submitting`, then `queued`);
            # only a queued task can be cancelled, so wait for it (10 s at most).
            for _ in range(200):
                if call("GET", f"/api/v1/tasks/{made['id']}")["status"] != "submitting":
                    break
                time.sleep(0.05)
            return made["id"]
        made = call("POST", "/api/v1/chat/completions",
                    {"model": "LangA-V4-flash", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})
        return made["svc"]["task_id"]

    def fill(self, command: str) -> str:
        command = command.replace("http://127.0.0.1:8080", BASE).replace(f"usr_{ELLIPSIS}", self.user_id)
        if f"key_{ELLIPSIS}" in command:
            own = f"/api/v1/keys/key_{ELLIPSIS}" in command
            command = command.replace(f"key_{ELLIPSIS}", self.key(own))
        if f"vb_{ELLIPSIS}" in command or f"GV-{ELLIPSIS}" in command:
            made = call("POST", "/api/v1/admin/vouchers", {"amount": "1", "count": 1})
            command = command.replace(f"vb_{ELLIPSIS}", made["batch_id"]).replace(f"GV-{ELLIPSIS}", made["codes"][0])
        if f"task_{ELLIPSIS}" in command:
            command = command.replace(f"task_{ELLIPSIS}", self.task("-X DELETE" in command))
        return command


def run_shell(where: str, command: str, cwd: str) -> str | None:
    expected = next((status for text, status in EXPECTED.items() if text in command), None)
    script = (
        "curl() { command curl --write-out '%{stderr}HTTP_STATUS %{http_code}\\n' \"$@\"; }\n" + command
    )
    env = dict(os.environ, GW=BASE, KEY=KEY, ADMIN=KEY)
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    statuses = [int(s) for s in re.findall(r"HTTP_STATUS (\d+)", done.stderr)]
    if done.returncode != 0:
        return f"{where}: exit {done.returncode}: {done.stderr.strip()[-400:]}"
    if not statuses:
        return f"{where}: no HTTP status recorded"
    for status in statuses:
        if expected is not None:
            if status != expected:
                return f"{where}: status {status}, the docs say {expected}: {done.stdout[-300:]}"
        elif status >= 400:
            return f"{where}: status {status}: {done.stdout[-300:]}"
    return None


def main() -> int:
    failures, ran, skipped = [], 0, []
    ids = Ids()
    with tempfile.TemporaryDirectory() as cwd:
        with open(os.path.join(cwd, "first_frame.png"), "wb") as f:
            f.write(TINY_PNG)
        for where, block in blocks("sh"):
            if "curl " not in block:
                continue
            for command in commands(block):
                first = command.strip().splitlines()[0][:70]
                reason = next((why for text, why in SKIPPED.items() if text in command), None)
                if reason:
                    skipped.append(f"{where}: {first} ({reason})")
                    continue
                if not command.lstrip().startswith("curl"):
                    continue
                ran += 1
                failure = run_shell(f"{where}: {first}", ids.fill(command), cwd)
                if failure:
                    failures.append(failure)
            # An example may switch maintenance on; the next block starts without it.
            call("PUT", "/api/v1/admin/maintenance", {"enabled": False})
        for where, block in blocks("python"):
            ran += 1
            source = f"KEY = {KEY!r}\n" + block.replace("http://127.0.0.1:8080", BASE)
            done = subprocess.run([sys.executable, "-c", source], cwd=cwd, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                failures.append(f"{where} (python): {done.stderr.strip()[-400:]}")
    for s in skipped:
        print(f"skipped: {s}")
    for f in failures:
        print(f"FAILED: {f}")
    print(f"doc examples: {ran - len(failures)}/{ran} ran as pasted, {len(skipped)} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
