#!/usr/bin/env bash
# How long each console page's data takes on a database of 100,000 tasks: starts the release
# gateway on a fresh SQLite file, seeds 100,000 settled calls for the demo user (with their
# reservations and ledger entries, spread over 90 days) and times the requests each page makes.
# A measurement, not a test: it prints a table for docs/PERFORMANCE.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export GW_PROFILE=release
# shellcheck source=scripts/start_gateway.sh
source "$root/scripts/start_gateway.sh"
"$venv/bin/python" "$root/scripts/console_timing.py" --base "$base" --key "$key" --sqlite "$db" "$@"
