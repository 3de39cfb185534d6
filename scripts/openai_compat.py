"""Compatibility check with the official OpenAI Python SDK against a running gateway.

Usage: GATEWAY_BASE=http://127.0.0.1:PORT GATEWAY_KEY=sk-gw-... python openai_compat.py
Checks, with the SDK unchanged but for the base URL and key:
- chat completions to LangB-2.0-pro, plain and streaming;
- responses to LangB-2.0-pro, plain, streaming, and a second turn with `previous_response_id`;
- images.generate (the branch fields in `extra_body`): a sequential Vendor-Imagegen-4.5 request with
  references and one failed item, and a Vendor-Imagegen-5.0-pro request with references at two sizes;
the answers, `svc.task_id` and `svc.billing` (images: top-level `task_id` and `billing`) (settled, and
`actual_amount` equal to the spec's rates applied to the returned usage, rounded once, recomputed here
with Decimal), and the task record.
Prints "N passed, N failed" and exits non-zero on failure.
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
# The spec's image rates, micro-USD per image.
PIECES = {"Vendor-Imagegen-4.5": Decimal(36000), "Vendor-Imagegen-5.0-lite": Decimal(31500)}
PRO_INPUT, PRO_SMALL, PRO_LARGE, PRO_SMALL_MAX_PIXELS = Decimal(3000), Decimal(45000), Decimal(90000), 2360000


def micros_to_usd(exact_micro_millionths: Decimal) -> str:
    micros = (exact_micro_millionths / Decimal(1_000_000)).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{micros / Decimal(1_000_000):.6f}"


def language_amount(prompt: int, cached: int, audio: int, completion: int) -> str:
    rate_in, rate_out, rate_cache = RATES["lte_128k" if prompt <= 128000 else "gt_128k_lte_256k"]
    return micros_to_usd(Decimal(max(prompt - cached - audio, 0) * rate_in + cached * rate_cache + completion * rate_out))


def expected_amount(usage: dict) -> str:
    details = usage.get("prompt_tokens_details") or {}
    return language_amount(
        usage["prompt_tokens"], details.get("cached_tokens") or 0, details.get("audio_tokens") or 0, usage["completion_tokens"]
    )


def response_amount(usage) -> str:
    cached = (usage.input_tokens_details.cached_tokens or 0) if usage.input_tokens_details else 0
    return language_amount(usage.input_tokens, cached, 0, usage.output_tokens)


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


def responses_plain_and_second_turn(client: OpenAI) -> None:
    native = OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0, timeout=30)
    first = native.responses.create(model=MODEL, input="Hello from the Responses API", max_output_tokens=64)
    assert first.model == MODEL, first.model
    assert first.output_text, first
    svc = (first.model_extra or {}).get("svc")
    assert svc and svc["billing"]["status"] == "settled", first
    assert svc["billing"]["actual_amount"] == response_amount(first.usage), (svc["billing"], first.usage)
    second = native.responses.create(model=MODEL, input="And a second turn", previous_response_id=first.id)
    assert second.output_text, second
    svc2 = (second.model_extra or {}).get("svc")
    assert svc2["billing"]["actual_amount"] == response_amount(second.usage), (svc2["billing"], second.usage)
    task = get(f"/api/v1/tasks/{svc2['task_id']}")
    assert task["kind"] == "language" and task["status"] == "succeeded", task


def responses_streaming(client: OpenAI) -> None:
    native = OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0, timeout=30)
    raw = native.responses.with_raw_response.create(model=MODEL, input="Stream a response", stream=True)
    task_id = raw.headers.get("x-svc-task-id")
    assert task_id, dict(raw.headers)
    text, completed = "", None
    for event in raw.parse():
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.completed":
            completed = event.response
    assert text, "no text streamed"
    assert completed is not None and completed.model == MODEL, completed
    task = get(f"/api/v1/tasks/{task_id}")
    assert task["billing"]["status"] == "settled", task
    assert task["billing"]["actual_amount"] == response_amount(completed.usage), (task["billing"], completed.usage)


def image_amount(model: str, items: list, references: int) -> str:
    """The spec's charge for the successful items (DESIGN §3), in USD with 6 decimals."""
    ok = [item for item in items if not (item.model_extra or {}).get("error")]
    if model in PIECES:
        total = PIECES[model] * len(ok)
    elif not ok:
        total = Decimal(0)
    else:
        total = PRO_INPUT * references
        for item in ok:
            width, height = (int(side) for side in item.model_extra["size"].lower().split("x"))
            total += PRO_SMALL if width * height <= PRO_SMALL_MAX_PIXELS else PRO_LARGE
    return micros_to_usd(total * Decimal(1_000_000))


def check_image_answer(r, model: str, references: int, expected_items: int) -> dict:
    """The ImageGenerationResponse as the SDK parsed it: items, usage, task_id, billing and the task."""
    extra = r.model_extra or {}
    assert extra.get("model") == model, extra.get("model")
    assert r.data and len(r.data) == expected_items, r.data
    for item in r.data:
        fields = item.model_extra or {}
        if fields.get("error"):
            assert fields["error"]["code"] and item.url is None and item.b64_json is None, item
        else:
            assert (item.url is None) != (item.b64_json is None), item
            assert fields["size"] and fields["output_format"] in ("png", "jpeg"), item
    billing = extra["billing"]
    assert billing["currency"] == "USD" and billing["status"] == "settled", billing
    assert billing["actual_amount"] == image_amount(model, r.data, references), (billing, r.data)
    usage = r.usage.to_dict()
    generated = sum(1 for item in r.data if not (item.model_extra or {}).get("error"))
    assert usage["generated_images"] == generated and usage["input_images"] == references, usage
    task = get(f"/api/v1/tasks/{extra['task_id']}")
    assert task["kind"] == "image" and task["status"] == "succeeded", task
    assert task["billing"]["actual_amount"] == billing["actual_amount"], task
    return billing


def images_sequential(client: OpenAI) -> None:
    model = "Vendor-Imagegen-4.5"
    refs = [f"https://images.example.com/ref-{i}.png" for i in range(3)]
    r = client.images.generate(
        model=model,
        prompt="A four-panel comic strip [sim:fail_image=1]",
        extra_body={
            "image": refs,
            "sequential_image_generation": "auto",
            "sequential_image_generation_options": {"max_images": 4},
            "watermark": False,
        },
    )
    billing = check_image_answer(r, model, len(refs), 4)
    assert (r.data[1].model_extra or {}).get("error"), r.data[1]
    assert billing["actual_amount"] == micros_to_usd(3 * PIECES[model] * Decimal(1_000_000)), billing
    assert billing["estimated_amount"] == micros_to_usd(4 * PIECES[model] * Decimal(1_000_000)), billing


def images_pro_with_references(client: OpenAI) -> None:
    model = "Vendor-Imagegen-5.0-pro"
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    refs = [f"data:image/png;base64,{png}", "https://images.example.com/face.png"]
    for size, rate in (("1536x1536", PRO_SMALL), ("1552x1552", PRO_LARGE)):
        r = client.images.generate(
            model=model,
            prompt="A portrait in the style of the references",
            size=size,
            response_format="b64_json",
            extra_body={"image": refs, "seed": 42, "output_format": "png", "optimize_prompt_options": {"mode": "fast"}},
        )
        billing = check_image_answer(r, model, len(refs), 1)
        assert r.data[0].b64_json and r.data[0].model_extra["size"] == size, r.data[0]
        assert r.data[0].model_extra["output_format"] == "png", r.data[0]
        assert billing["actual_amount"] == micros_to_usd((2 * PRO_INPUT + rate) * Decimal(1_000_000)), billing


def main() -> int:
    client = OpenAI(base_url=f"{BASE}/api/v1", api_key=KEY, max_retries=0, timeout=30)
    passed = failed = 0
    checks = (
        non_streaming,
        streaming,
        responses_plain_and_second_turn,
        responses_streaming,
        images_sequential,
        images_pro_with_references,
    )
    for check in checks:
        try:
            check(client)
            print(f"ok: openai {check.__name__}")
            passed += 1
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            print(f"FAILED: openai {check.__name__}: {e!r}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
