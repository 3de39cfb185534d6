#!/bin/bash
# The gateway's CPU per billed chat call, by thread, measured from outside: `gateway serve`
# (SQLite, a fresh file) against the upstream simulator, driven by wrk at C connections (default
# 64) for SECS seconds (default 8) after a two-second warm-up; each thread's user + system time
# from /proc/<pid>/task/*/stat before and after, divided by the calls wrk made, and its context
# switches per call (/proc/<pid>/task/*/status). The tokio workers are summed as one line. Also
# the bytes the `ledger-writer` thread wrote per call (its `wchar`: WAL frames, 4,120 bytes each).
#
#   GW_BIN=target/release/gateway bash bins/bench/scripts/thread-cpu.sh
#
# Environment (none may start with GATEWAY_): GW_BIN (default target/release/gateway), WRK
# (default wrk), C, SECS, AFTER_MIGRATE (an SQL file run on the database before `serve`, see
# common.sh).
set -u
. "$(dirname "$0")/common.sh"
start_pair threads
chat_lua "$work/s.lua" "$key" "LangA-V4-flash"
url=http://127.0.0.1:9301/api/v1/chat/completions
"$W" -t2 -c"${C:-64}" -d2s -s "$work/s.lua" "$url" > /dev/null
# One line per thread: its name, its user + system clock ticks, the bytes it wrote and its context
# switches (voluntary and not).
snapshot() {
  for t in /proc/"$GW"/task/*; do
    echo "$(tr ' ' _ < "$t/comm") $(awk '{print $14 + $15}' "$t/stat") $(awk '/^wchar/ {print $2}' "$t/io" 2>/dev/null) \
$(awk '/ctxt_switches/ {n += $2} END {print n}' "$t/status")"
  done
}
snapshot > "$work/before"
"$W" -t2 -c"${C:-64}" -d"${SECS:-8}s" -s "$work/s.lua" "$url" > "$work/w.txt"
snapshot > "$work/after"
calls=$(awk '/ requests in / {print $1}' "$work/w.txt")
grep -E "requests in|Non-2xx|Socket errors" "$work/w.txt"
awk -v calls="$calls" -v tick="$(getconf CLK_TCK)" '
  { name = ($1 ~ /^tokio-r/) ? "tokio workers" : $1 }
  FNR == NR { before[name] += $2; wrote[name] -= $3; switched[name] -= $4; next }
  { after[name] += $2; wrote[name] += $3; switched[name] += $4 }
  END {
    for (n in after) {
      us = (after[n] - before[n]) / tick * 1e6 / calls
      total += us
      switches += switched[n]
      if (us >= 0.5) printf "%-16s %7.1f us/call %5.2f switches/call\n", n, us, switched[n] / calls
    }
    printf "%-16s %7.1f us/call %5.2f switches/call (%d calls)\n", "total", total, switches / calls, calls
    printf "%-16s %7.0f bytes/call\n", "WAL written", wrote["ledger-writer"] / calls
  }' "$work/before" "$work/after"
kill "$GW" "$SIM"
wait 2>/dev/null
rm -rf "$work"
