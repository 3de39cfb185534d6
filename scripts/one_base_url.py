"""The one base URL, driven by clients no one here wrote, against a running gateway.

Usage: GATEWAY_BASE=http://127.0.0.1:PORT GATEWAY_KEY=sk-gw-... python one_base_url.py
Each client is set to one base URL and left as it ships:
- the OpenAI SDK at `<base>/v1`: models.list and models.retrieve, a chat completion, a stream with
  usage, an image, speech, and a 404 for embeddings that names what is served;
- the Anthropic SDK at `<base>`: models.list, a message, a stream, count_tokens, an error;
- LangChain's ChatOpenAI (langchain-openai) at `<base>/v1`: invoke and stream;
- the LiteLLM SDK's `openai/` provider with `api_base=<base>/v1`: completion.
After every billed call the balance must have moved by exactly what the call's task was charged
(`GET /api/v1/tasks`, newest first), and the answer's own billing, where it carries one, must say
the same. Prints "N passed, N failed" and exits non-zero on failure.
"""

import json
import os
import sys
import time
import urllib.request
from decimal import Decimal

# LiteLLM reads its model price map from the network unless told to use the copy it ships with;
# nothing in these checks leaves the machine.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from anthropic import Anthropic  # noqa: E402
from openai import NotFoundError, OpenAI  # noqa: E402

BASE = os.environ["GATEWAY_BASE"].rstrip("/")
KEY = os.environ["GATEWAY_KEY"]
CHAT = "LangA-V4-flash"


def get(path: str) -> dict:
    req = urllib.request.Request(BASE + path, headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def balance() -> Decimal:
    return Decimal(get("/api/v1/overview")["user"]["balance_usd"])


def newest_task() -> dict:
    return get("/api/v1/tasks?page_size=20")["data"][0]


def billed(call, what: str) -> dict:
    """Runs `call` and checks that the balance moved by exactly its task's charge; returns the task."""
    before_task = newest_task()["id"] if get("/api/v1/tasks?page_size=20")["data"] else None
    before = balance()
    result = call()
    task = newest_task()
    # A stream's charge is written as its last event goes out: give it a moment (at most 5 s).
    for _ in range(50):
        if task["id"] != before_task and task["billing"]["status"] != "reserved":
            break
        time.sleep(0.1)
        task = newest_task()
    assert task["id"] != before_task, f"{what}: no new task"
    assert task["billing"]["status"] == "settled", (what, task["billing"])
    charged = Decimal(task["billing"]["actual_amount"])
    assert charged > 0, (what, task["billing"])
    assert before - balance() == charged, (what, before, balance(), charged)
    return {"task": task, "result": result, "charged": charged}


def openai_models(o: OpenAI) -> None:
    ids = [m.id for m in o.models.list()]
    assert CHAT in ids and "AudioGen-1.0" in ids, ids
    assert o.models.retrieve(CHAT).id == CHAT


def openai_chat(o: OpenAI) -> None:
    run = billed(lambda: o.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Hi"}], max_tokens=8), "chat")
    r = run["result"]
    assert r.model == CHAT and r.choices[0].message.content, r
    assert Decimal(r.model_extra["svc"]["billing"]["actual_amount"]) == run["charged"], r.model_extra


def openai_stream(o: OpenAI) -> None:
    def call():
        chunks = list(o.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Stream"}], max_tokens=8,
                                                stream=True, stream_options={"include_usage": True}))
        text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
        usage = [c.usage for c in chunks if c.usage]
        assert text and usage, chunks
        return usage[-1]

    run = billed(call, "stream")
    assert run["task"]["model"] == CHAT, run["task"]


def openai_image(o: OpenAI) -> None:
    run = billed(lambda: o.images.generate(model="Vendor-Imagegen-4.5", prompt="a lighthouse", n=1), "image")
    img = run["result"]
    assert img.data and (img.data[0].url or img.data[0].b64_json), img
    assert Decimal(img.model_extra["billing"]["actual_amount"]) == run["charged"], img.model_extra


def openai_speech(o: OpenAI) -> None:
    run = billed(lambda: o.audio.speech.with_raw_response.create(model="AudioGen-1.0", input="Hello there.", voice="alloy",
                                                                 response_format="wav"), "speech")
    raw = run["result"]
    assert raw.headers["content-type"].startswith("audio/"), raw.headers
    assert raw.content[:4] == b"RIFF", raw.content[:16]
    assert Decimal(raw.headers["x-svc-billed-usd"]) == run["charged"], raw.headers
    assert raw.headers["x-svc-task-id"] == run["task"]["id"]


def openai_unserved(o: OpenAI) -> None:
    try:
        o.embeddings.create(model=CHAT, input="x")
    except NotFoundError as e:
        assert "/v1/chat/completions" in str(e), str(e)
        return
    raise AssertionError("embeddings were served")


def anthropic_models(a: Anthropic) -> None:
    ids = [m.id for m in a.models.list()]
    assert CHAT in ids, ids


def anthropic_message(a: Anthropic) -> None:
    run = billed(lambda: a.messages.create(model=CHAT, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]), "message")
    m = run["result"]
    assert m.content[0].text and m.model == CHAT, m
    assert Decimal(m.model_extra["svc"]["billing"]["actual_amount"]) == run["charged"], m.model_extra


def anthropic_stream(a: Anthropic) -> None:
    def call():
        with a.messages.stream(model=CHAT, max_tokens=8, messages=[{"role": "user", "content": "Stream"}]) as stream:
            text = "".join(stream.text_stream)
        assert text, "no text"

    billed(call, "message stream")


def anthropic_count_and_errors(a: Anthropic) -> None:
    import anthropic

    counted = a.messages.count_tokens(model=CHAT, messages=[{"role": "user", "content": "Count me " * 50}])
    assert counted.input_tokens > 100, counted
    try:
        a.messages.create(model="NoSuch-Model-1", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    except anthropic.APIStatusError as e:
        # The SDK reads Anthropic's error shape: the type and the message come through.
        assert e.body["type"] == "error" and e.body["error"]["type"].endswith("_error"), e.body
        assert e.body["error"]["message"], e.body
        return
    raise AssertionError("an unknown model was served")


def langchain(_: None) -> None:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=f"{BASE}/v1", api_key=KEY, model=CHAT, max_tokens=8, max_retries=0)
    run = billed(lambda: chat.invoke("Hi from LangChain"), "langchain invoke")
    assert run["result"].content, run["result"]
    billed(lambda: "".join(c.content for c in chat.stream("Stream from LangChain")), "langchain stream")


def litellm_completion(_: None) -> None:
    import litellm

    run = billed(lambda: litellm.completion(model=f"openai/{CHAT}", api_base=f"{BASE}/v1", api_key=KEY,
                                            messages=[{"role": "user", "content": "Hi from LiteLLM"}], max_tokens=8),
                 "litellm")
    assert run["result"].choices[0].message.content, run["result"]


def main() -> int:
    o = OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0, timeout=30)
    a = Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=30)
    checks = [
        ("openai", openai_models, o), ("openai", openai_chat, o), ("openai", openai_stream, o),
        ("openai", openai_image, o), ("openai", openai_speech, o), ("openai", openai_unserved, o),
        ("anthropic", anthropic_models, a), ("anthropic", anthropic_message, a), ("anthropic", anthropic_stream, a),
        ("anthropic", anthropic_count_and_errors, a),
        ("langchain-openai", langchain, None), ("litellm", litellm_completion, None),
    ]
    passed = failed = 0
    for client, check, arg in checks:
        try:
            check(arg)
            print(f"ok: {client} {check.__name__}")
            passed += 1
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            print(f"FAILED: {client} {check.__name__}: {e!r}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
