"""Compatibility check with the official OpenAI Python SDK against a running gateway.

Usage: GATEWAY_BASE=http://127.0.0.1:PORT GATEWAY_KEY=sk-gw-... python openai_compat.py
Checks a non-streaming and a streaming call to LangB-2.0-pro: the answers, `svc.task_id` and
`svc.billing` (settled, and `actual_amount` equal to the spec's rates applied to the returned
usage, rounded once), and the task record. Prints "N passed, N failed" and exits non-zero on failure.
"""

import json
import os
import sys
import urllib.request
from decimal import ROUND_HALF_UP, Decimal

from openai import OpenAI

BASE = os.environ["GATEWAY_BASE"].rstrip("/")
KEY = os.environ["GATEWAY_KEY"]
MODEL = "LangB-2.0-pro"
# The spec's LangB-2.0-pro rates, micro-USD per 1,000,000 tokens: (input, output, cache_hit) per tier.
RATES = {"lte_128k": (500000, 3000000, 100000), "gt_128k_lte_256k": (1000000, 6000000, 200000)}


def expected_amount(usage: dict) -> str:
    prompt = usage["prompt_tokens"]
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0
    audio = details.get("audio_tokens") or 0
    rate_in, rate_out, rate_cache = RATES["lte_128k" if prompt <= 128000 else "gt_128k_lte_256k"]
    exact = Decimal(max(prompt - cached - audio, 0) * rate_in + cached * rate_cache + usage["completion_tokens"] * rate_out)
    micros = (exact / Decimal(1_000_000)).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{micros / Decimal(1_000_000):.6f}"


def get(path: str) -> dict:
    req = urllib.request.Request(BASE + path, headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def non_streaming(client: OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello from the OpenAI SDK"}], max_tokens=32
    )
    assert r.model == MODEL, r.model
    assert r.choices and r.choices[0].message.content, r
    svc = (r.model_extra or {}).get("svc")
    assert svc and svc["task_id"], r
    billing = svc["billing"]
    assert billing["status"] == "settled", billing
    usage = r.usage.model_dump()
    assert billing["actual_amount"] == expected_amount(usage), (billing, usage)
    task = get(f"/api/v1/tasks/{svc['task_id']}")
    assert task["kind"] == "language" and task["status"] == "succeeded", task
    assert task["billing"]["actual_amount"] == billing["actual_amount"], task


def streaming(client: OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Stream to the OpenAI SDK"}], max_tokens=32, stream=True
    )
    task_id = raw.headers.get("x-svc-task-id")
    assert task_id, dict(raw.headers)
    text, usage = "", None
    for chunk in raw.parse():
        assert chunk.model == MODEL, chunk.model
        for choice in chunk.choices:
            text += choice.delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
    assert text, "no content streamed"
    assert usage, "no usage chunk"
    task = get(f"/api/v1/tasks/{task_id}")
    assert task["billing"]["status"] == "settled", task
    assert task["billing"]["actual_amount"] == expected_amount(usage), (task["billing"], usage)


def main() -> int:
    client = OpenAI(base_url=f"{BASE}/api/v1", api_key=KEY, max_retries=0, timeout=30)
    passed = failed = 0
    for check in (non_streaming, streaming):
        try:
            check(client)
            print(f"ok: {check.__name__}")
            passed += 1
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            print(f"FAILED: {check.__name__}: {e!r}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
