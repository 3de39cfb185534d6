#!/bin/bash
# What an idle gateway keeps resident, measured from outside: one `gateway serve` (SQLite, a fresh
# file) against the upstream simulator, read from /proc/<pid>/smaps at start, after five chat
# calls, and again after two seconds of calls (wrk, 8 connections), each as the total RSS and its parts:
# the heap and other anonymous memory, the gateway binary's pages, and each shared library's.
#
#   GW_BIN=target/release/gateway bash bins/bench/scripts/idle-memory.sh
#
# Environment (none may start with GATEWAY_): GW_BIN (default target/release/gateway), WRK
# (default wrk).
set -u
. "$(dirname "$0")/common.sh"
start_pair idle

# Prints the RSS of $GW in KiB, whole and by mapping: anonymous, the binary, each library.
breakdown() {
  awk -v label="$1" -v bin="$G" '
    /^[0-9a-f]+-[0-9a-f]+ / { path = (NF >= 6) ? $6 : "[anon]"; next }
    /^Rss:/ {
      if (path == bin) key = "binary"
      else if (path ~ /^\// ) { n = split(path, p, "/"); key = p[n] }
      else if (path == "[heap]" || path == "[anon]") key = "anonymous"
      else key = path
      rss[key] += $2; total += $2
    }
    END {
      printf "%s: total %d KiB;", label, total
      for (k in rss) if (rss[k] >= 64) printf " %s %d", k, rss[k]
      printf "\n"
    }' "/proc/$GW/smaps"
}

sleep 1
breakdown "at start"
url=http://127.0.0.1:9301/api/v1/chat/completions
body='{"model":"LangA-V4-flash","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}'
for _ in 1 2 3 4 5; do
  curl -s -o /dev/null -H "Authorization: Bearer $key" -H 'Content-Type: application/json' -d "$body" "$url"
done
sleep 1
breakdown "after 5 calls"
chat_lua "$work/c.lua" "$key" "LangA-V4-flash"
"$W" -t1 -c8 -d2s -s "$work/c.lua" "$url" > /dev/null
sleep 2
breakdown "after wrk, idle again"
kill "$GW" "$SIM"
wait 2>/dev/null
rm -rf "$work"
