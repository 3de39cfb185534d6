#!/usr/bin/env bash
# The web console in a real browser: starts the gateway (debug build, fresh SQLite, built-in
# simulator) and drives /console/ with Playwright for Python and Debian's Chromium (no browser
# download), both installed here when missing. Extra arguments go to scripts/console_check.py,
# e.g. `--screenshots docs/console` to refresh the README's screenshots.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get install -y -qq chromium || (apt-get update -qq && apt-get install -y -qq chromium)) >/dev/null
fi
# shellcheck source=scripts/start_gateway.sh
source "$root/scripts/start_gateway.sh"
"$venv/bin/pip" install -q --disable-pip-version-check 'playwright>=1.40,<2'
"$venv/bin/python" "$root/scripts/console_check.py" --base "$base" --key "$key" --chromium "$(command -v chromium)" "$@"
if grep -q 'panicked' "$work/err.txt"; then
  echo "the gateway panicked during the run:" >&2
  grep -A3 'panicked' "$work/err.txt" >&2
  exit 1
fi
