#!/bin/bash
# What a CSV export costs the gateway in memory and time, measured from outside: one `gateway
# serve` on a fresh SQLite file whose ledger holds ROWS entries of one user (default 1,000,000),
# written by SQL in seconds: ROWS/2 calls of LangA-V4-flash, each a `reserve` and a `settle` entry
# with its task and reservation, spread evenly over 300 days from 2025-12-01, after one top-up.
# Then, through the real server on 127.0.0.1, read by curl as a client would (counting lines):
#   1. GET /api/v1/ledger/export of one day (about ROWS/300 rows),
#   2. GET /api/v1/ledger/export of all 300 days (ROWS + 1 rows),
#   3. GET /api/v1/usage/export of all 300 days (ROWS/2 calls),
#   4. GET /api/v1/statements/2026-06 (a month after 6 months of history),
#   5. GET /api/v1/admin/revenue?month=2026-06 (an operator's key).
# For each: lines, bytes, seconds, the gateway's peak RSS so far (VmHWM from /proc), and the
# peaks of its two parts sampled every 20 ms during the request: anonymous memory (RssAnon: the
# heap, buffers, rows in flight) and file pages (RssFile: the binary, and SQLite's database pages,
# which the store maps, `mmap_size` 256 MiB, so they count as the gateway's RSS while they stay in
# the page cache; the fill is checkpointed into the database file first, as a running gateway's
# checkpointer keeps it). An export in constant memory leaves the anonymous peak of the whole
# ledger where the one day left it.
#
#   GW_BIN=target/release/gateway ROWS=1000000 bash bins/bench/scripts/export-memory.sh
#
# Environment (none may start with GATEWAY_): GW_BIN (default target/release/gateway), ROWS (even,
# at most 2,000,000), PORT (default 9302). Bounded: one fill, four requests, each of which the
# script waits for (curl --max-time 600).
set -eu
. "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
PORT=${PORT:-9302}
if [ $((ROWS % 2)) -ne 0 ] || [ "$ROWS" -gt 2000000 ]; then
  echo "ROWS must be even and at most 2,000,000" >&2
  exit 64
fi
calls=$((ROWS / 2))
start_ms=1764547200000                     # 2025-12-01T00:00:00Z
step_ms=$((300 * 86400000 / calls))        # one call every step_ms, 300 days in all
work=$(mktemp -d)
trap 'kill "${GW:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
gateway_env "$work/g.db" "$PORT"
"$G" migrate > /dev/null
user=$("$G" admin user create --name export --email export@example.com --balance 0 \
  | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
key=$("$G" admin key create --user "$user" --scopes overview:read --name export \
  | sed -n 's/.*"key":"\([^"]*\)".*/\1/p')
operator=$("$G" admin user create --name operator --email operator@example.com --role admin \
  | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
admin=$("$G" admin key create --user "$operator" --scopes admin --name export \
  | sed -n 's/.*"key":"\([^"]*\)".*/\1/p')

# The fill: one top-up of 10 USD, then call k (1..calls) holds 0.000101 USD at start + k·step and
# settles at 0.000005 one millisecond later; the user's balance and spend follow the ledger.
fill_start=$(date +%s.%N)
sqlite3 "$work/g.db" > /dev/null <<SQL
PRAGMA journal_mode = WAL;
BEGIN;
INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, created_at)
  VALUES ('$user', NULL, 'topup', 10000000, 10000000, 'bench', $start_ms - 1);
CREATE TEMP TABLE n AS WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < $calls) SELECT i FROM k;
INSERT INTO tasks (id, user_id, model, kind, status, provider, usage, created_at, updated_at, completed_at)
  SELECT 'task_bench_' || i, '$user', 'LangA-V4-flash', 'language', 'succeeded', 'bench',
         '{"prompt_tokens":9,"completion_tokens":16,"total_tokens":25}',
         $start_ms + i * $step_ms, $start_ms + i * $step_ms + 1, $start_ms + i * $step_ms + 1 FROM n;
INSERT INTO reservations (task_id, user_id, amount_micros, status, actual_micros, balance_after_micros, created_at, updated_at)
  SELECT 'task_bench_' || i, '$user', 101, 'settled', 5, 10000000 - 5 * i, $start_ms + i * $step_ms,
         $start_ms + i * $step_ms + 1 FROM n;
INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, created_at)
  SELECT '$user', 'task_bench_' || i,
         CASE j WHEN 0 THEN 'reserve' ELSE 'settle' END,
         CASE j WHEN 0 THEN -101 ELSE 96 END,
         CASE j WHEN 0 THEN 10000000 - 5 * (i - 1) - 101 ELSE 10000000 - 5 * i END,
         CASE j WHEN 0 THEN 'hold of 0.000101' ELSE 'charged 0.000005 of 0.000101 held' END,
         $start_ms + i * $step_ms + j
  FROM n CROSS JOIN (SELECT 0 AS j UNION ALL SELECT 1) ORDER BY i, j;
UPDATE users SET balance_micros = 10000000 - 5 * $calls, spent_micros = 5 * $calls WHERE id = '$user';
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
SQL
echo "fill: $((ROWS + 1)) ledger rows, $calls tasks and reservations in $(echo "$(date +%s.%N) - $fill_start" | bc) s"

"$G" serve > "$work/serve.log" 2>&1 &
GW=$!
wait_port "$PORT"
base="http://127.0.0.1:$PORT"
kib() { awk -v f="$1" '$1 == f":" {print $2}' "/proc/$GW/status"; }

# Reads $2 (a path) with the key $3 (default the user's) and prints $1, lines, bytes, seconds and
# the memory figures.
fetch() {
  local t0 t1 lines bytes status sampler
  : > "$work/samples"
  ( while :; do echo "$(kib RssAnon) $(kib RssFile)" >> "$work/samples"; sleep 0.02; done ) &
  sampler=$!
  t0=$(date +%s.%N)
  status=$(curl -sS --max-time 600 -H "Authorization: Bearer ${3:-$key}" -o "$work/body" -w '%{http_code}' "$base$2")
  t1=$(date +%s.%N)
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  lines=$(wc -l < "$work/body")
  bytes=$(wc -c < "$work/body")
  read -r anon file <<< "$(awk '$1 > a {a = $1} $2 > f {f = $2} END {print a, f}' "$work/samples")"
  echo "$1: status $status lines $lines bytes $bytes seconds $(echo "$t1 - $t0" | bc)" \
    "peak_rss_kib $(kib VmHWM) peak_anon_kib $anon peak_file_kib $file"
  rm -f "$work/body"
}
echo "gateway before any export: rss_kib $(kib VmRSS) anon_kib $(kib RssAnon) file_kib $(kib RssFile)"
fetch "ledger export, one day" "/api/v1/ledger/export?from=2026-03-01&to=2026-03-01"
fetch "ledger export, 300 days" "/api/v1/ledger/export?from=2025-11-30&to=2026-09-27"
fetch "usage export, 300 days" "/api/v1/usage/export?from=2025-11-30&to=2026-09-27"
fetch "statement of 2026-06" "/api/v1/statements/2026-06"
fetch "revenue of 2026-06" "/api/v1/admin/revenue?month=2026-06" "$admin"
