#!/bin/bash
# What an open chat stream costs the gateway in memory, measured from outside: N concurrent
# streams (default 1,000) held open by wrk through one `gateway serve` (SQLite, a fresh file)
# against the upstream simulator, whose `sim_chunk_delay_ms` keeps each stream open about 8 s.
# Prints the gateway's RSS when idle (after one warm-up call) and its peak while the streams are
# open (sampled every 0.2 s), and (peak - idle) / N per stream.
#
#   GW_BIN=target/release/gateway N=1000 bash bins/bench/scripts/stream-memory.sh
#
# Environment (none may start with GATEWAY_): GW_BIN (default target/release/gateway), WRK
# (default wrk), N, SECS (how long wrk runs, default 12), DELAY (ms between a stream's chunks,
# default 400), PRE (a command to run the gateway under, e.g. "heaptrack -o /tmp/ht").
set -u
. "$(dirname "$0")/common.sh"
N=${N:-1000}
start_pair memory
chat_lua "$work/s.lua" "$key" "LangA-V4-flash" '"stream":true,"sim_chunk_delay_ms":'"${DELAY:-400}"','
url=http://127.0.0.1:9301/api/v1/chat/completions
"$W" -t1 -c2 -d2s -s "$work/s.lua" "$url" > /dev/null
idle=$(awk '/VmRSS/ {print $2}' "/proc/$GW/status")
"$W" -t2 -c"$N" -d"${SECS:-12}s" --timeout 30s -s "$work/s.lua" "$url" > "$work/w.txt" 2>&1 &
WRK=$!
peak=0
fds=0
while kill -0 "$WRK" 2>/dev/null; do
  r=$(awk '/VmRSS/ {print $2}' "/proc/$GW/status")
  [ "$r" -gt "$peak" ] && peak=$r
  f=$(ls "/proc/$GW/fd" | wc -l)
  [ "$f" -gt "$fds" ] && fds=$f
  sleep 0.2
done
grep -E "requests in|Non-2xx|Socket errors" "$work/w.txt"
echo "streams $N idle_rss_kib $idle peak_rss_kib $peak max_fds $fds per_stream_kib $(( (peak - idle) / N ))"
kill "$GW" "$SIM"
wait 2>/dev/null
rm -rf "$work"
