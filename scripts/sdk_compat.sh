#!/usr/bin/env bash
# Starts the gateway (debug build, fresh SQLite, built-in simulator) and runs the compatibility checks
# against it with the official OpenAI and Anthropic Python SDKs installed in a virtual environment:
# openai_compat.py (chat, responses, images) and anthropic_compat.py (messages) under `/api/v1`, and
# one_base_url.py: the OpenAI SDK, the Anthropic SDK, LangChain's ChatOpenAI and the LiteLLM SDK each
# set to one base URL, with the balance checked after every call; and doc_examples.py: every curl and
# Python example of README.md and docs/API.md, run as pasted.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/start_gateway.sh
source "$root/scripts/start_gateway.sh"
"$venv/bin/pip" install -q --disable-pip-version-check openai anthropic langchain-openai litellm
status=0
GATEWAY_BASE="$base" GATEWAY_KEY="$key" "$venv/bin/python" "$root/scripts/openai_compat.py" || status=1
GATEWAY_BASE="$base" GATEWAY_KEY="$key" "$venv/bin/python" "$root/scripts/anthropic_compat.py" || status=1
GATEWAY_BASE="$base" GATEWAY_KEY="$key" "$venv/bin/python" "$root/scripts/one_base_url.py" || status=1
# Last: the docs' examples switch models and maintenance as an operator would.
GATEWAY_BASE="$base" GATEWAY_KEY="$key" "$venv/bin/python" "$root/scripts/doc_examples.py" || status=1
exit "$status"
