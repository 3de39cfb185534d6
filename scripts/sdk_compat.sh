#!/usr/bin/env bash
# Starts the gateway (debug build, fresh SQLite, built-in simulator) and runs the compatibility checks
# against it with the official OpenAI and Anthropic Python SDKs installed in a virtual environment:
# openai_compat.py (chat, responses, images) and anthropic_compat.py (messages).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
gateway_pid=""
cleanup() {
  if [ -n "$gateway_pid" ]; then kill -TERM "$gateway_pid" 2>/dev/null || true; wait "$gateway_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cargo build -q -p gateway --manifest-path "$root/Cargo.toml"
venv="$root/.venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check openai anthropic

(cd "$work" && GATEWAY_LISTEN=127.0.0.1:0 GATEWAY_DATABASE_URL="sqlite://$work/gw.db?mode=rwc" GATEWAY_LOG=warn \
  exec "$root/target/debug/gateway" serve >"$work/out.txt" 2>"$work/err.txt") &
gateway_pid=$!
line=""
for _ in $(seq 1 100); do
  line="$(grep -m1 '^Try: ' "$work/out.txt" 2>/dev/null || true)"
  [ -n "$line" ] && break
  sleep 0.1
done
if [ -z "$line" ]; then
  echo "the gateway did not start" >&2
  cat "$work/err.txt" >&2
  exit 1
fi
base="$(echo "$line" | sed -E 's#.*(http://[^/]+)/api/v1/models.*#\1#')"
key="$(echo "$line" | grep -o 'sk-gw-[0-9a-f]*' | head -n1)"
status=0
GATEWAY_BASE="$base" GATEWAY_KEY="$key" "$venv/bin/python" "$root/scripts/openai_compat.py" || status=1
GATEWAY_BASE="$base" GATEWAY_KEY="$key" "$venv/bin/python" "$root/scripts/anthropic_compat.py" || status=1
exit "$status"
