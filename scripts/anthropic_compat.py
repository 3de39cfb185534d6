"""Compatibility check with the official Anthropic Python SDK against a running gateway.

Usage: GATEWAY_BASE=http://127.0.0.1:PORT GATEWAY_KEY=sk-gw-... python anthropic_compat.py
`messages.create` plain and streaming, unchanged but for the base URL and key: the answers, the public
model name, the task named by `svc.task_id` / `X-Svc-Task-Id`, and the charge equal to the spec's
LangA-V4-flash rates applied to the returned usage (prompt = input + cache read + cache creation; cache
reads at the cache-hit rate), rounded once. Prints "N passed, N failed" and exits non-zero on failure.
"""

import json
import os
import sys
import urllib.request
from decimal import ROUND_HALF_UP, Decimal

from anthropic import Anthropic

BASE = os.environ["GATEWAY_BASE"].rstrip("/")
KEY = os.environ["GATEWAY_KEY"]
MODEL = "LangA-V4-flash"
# micro-USD per 1,000,000 tokens: input, output, cache hit.
RATES = (140000, 280000, 28000)


def expected_amount(input_tokens: int, output_tokens: int, cache_read: int, cache_creation: int) -> str:
    rate_in, rate_out, rate_cache = RATES
    exact = Decimal((input_tokens + cache_creation) * rate_in + cache_read * rate_cache + output_tokens * rate_out)
    micros = (exact / Decimal(1_000_000)).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{micros / Decimal(1_000_000):.6f}"


def get(path: str) -> dict:
    req = urllib.request.Request(BASE + path, headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def usage_amount(usage) -> str:
    return expected_amount(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens or 0,
        usage.cache_creation_input_tokens or 0,
    )


def plain(client: Anthropic) -> None:
    m = client.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hello from the Anthropic SDK"}]
    )
    assert m.model == MODEL, m.model
    assert m.content and m.content[0].text, m
    svc = (m.model_extra or {}).get("svc")
    assert svc and svc["task_id"], m
    assert svc["billing"]["status"] == "settled", svc
    assert svc["billing"]["actual_amount"] == usage_amount(m.usage), (svc["billing"], m.usage)
    task = get(f"/api/v1/tasks/{svc['task_id']}")
    assert task["kind"] == "language" and task["status"] == "succeeded", task


def streaming(client: Anthropic) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Stream to the Anthropic SDK"}]
    ) as stream:
        text = "".join(stream.text_stream)
        task_id = stream.response.headers.get("x-svc-task-id")
        final = stream.get_final_message()
    assert text, "no text streamed"
    assert final.model == MODEL, final.model
    assert task_id, "no X-Svc-Task-Id header"
    task = get(f"/api/v1/tasks/{task_id}")
    assert task["billing"]["status"] == "settled", task
    assert task["billing"]["actual_amount"] == usage_amount(final.usage), (task["billing"], final.usage)


def main() -> int:
    client = Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=30)
    passed = failed = 0
    for check in (plain, streaming):
        try:
            check(client)
            print(f"ok: anthropic {check.__name__}")
            passed += 1
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            print(f"FAILED: anthropic {check.__name__}: {e!r}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
