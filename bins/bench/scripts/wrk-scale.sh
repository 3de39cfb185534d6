#!/bin/bash
# The gateway measured with wrk (an outside load generator), as others will measure it: the
# upstream simulator and wrk pinned to their own cores, the gateway on 2, 4 and 8 cores in turn
# (SQLite, a fresh file each; DBDIR=/dev/shm puts it in memory). For each: chat completions at 1,
# 64 and 256 connections (req/s, p50, p99, non-2xx, gateway CPU per call from /proc), and during
# the 256-connection run the gateway's busiest threads (% of one core). Needs 12+ cores for the
# default layout (gateway 0-7, wrk SIM_CORES/WRK_CORES below); on a small machine set
# CORES="1" SIM_CORES=0 WRK_CORES=1.
#
#   GW_BIN=target/release/gateway OUT=/tmp/scale bash bins/bench/scripts/wrk-scale.sh
#
# Environment (none may start with GATEWAY_: the gateway refuses settings it does not know):
# GW_BIN (default target/release/gateway), WRK (default wrk on PATH), CORES
# (default "2 4 8"), SIM_CORES (11-15), WRK_CORES (8-10), DBDIR, OUT (summary in $OUT/scale.txt,
# wrk's own output in $OUT/raw.txt).
set -u
. "$(dirname "$0")/common.sh"
OUT=${OUT:-/tmp/wrk-scale}
mkdir -p "$OUT"
work=$(mktemp -d)
SUM=$OUT/scale.txt
RAW=$OUT/raw.txt
: > "$SUM"; : > "$RAW"
TCK=$(getconf CLK_TCK)
echo "nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo)" | tee -a "$SUM"

SIM_CORES=${SIM_CORES:-11-15}
WRK_CORES=${WRK_CORES:-8-10}
WRK_T=3

taskset -c "$SIM_CORES" "$G" sim-upstream --listen 127.0.0.1:9100 > "$work/sim.log" 2>&1 &
SIM=$!

wait_port 9100 2>&1 | tee -a "$SUM"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# Per-thread CPU ticks of process $1: "tid name ticks" lines (names have no spaces here).
thread_ticks() {
  for t in /proc/$1/task/*; do
    s=$(cat "$t/stat" 2>/dev/null) || continue
    name=${s#*(}; name=${name%%)*}; rest=${s##*) }
    set -- $rest
    echo "${t##*/} ${name// /_} $((${12} + ${13}))"
  done
}

# run LABEL URL LUA CONNS SECS PID(or 0)
run() {
  local label=$1 url=$2 script=$3 conns=$4 secs=$5 pid=$6 threads=$WRK_T
  [ "$conns" -lt "$threads" ] && threads=$conns
  local before=0 after=0
  [ "$pid" != 0 ] && before=$(cpu_ticks "$pid")
  taskset -c "$WRK_CORES" "$W" -t"$threads" -c"$conns" -d"${secs}s" --latency -s "$script" "$url" > "$work/w.txt" 2>&1
  [ "$pid" != 0 ] && after=$(cpu_ticks "$pid")
  { echo "== $label"; cat "$work/w.txt"; } >> "$RAW"
  local rps reqs p50 p99 non2xx cpu
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/w.txt")
  reqs=$(awk '/requests in/ {print $1}' "$work/w.txt")
  p50=$(awk '$1=="50%" {print $2}' "$work/w.txt")
  p99=$(awk '$1=="99%" {print $2}' "$work/w.txt")
  non2xx=$(awk '/Non-2xx/ {print $5}' "$work/w.txt")
  cpu="-"
  if [ "$pid" != 0 ] && [ -n "$reqs" ] && [ "$reqs" -gt 0 ]; then
    cpu=$(awk -v t=$((after - before)) -v k="$TCK" -v n="$reqs" 'BEGIN {printf "%.1f", t / k * 1e6 / n}')
  fi
  printf '%-28s c%-4s %10s req/s  p50 %8s  p99 %8s  cpu/call %6s us  non2xx %s\n' \
    "$label" "$conns" "$rps" "$p50" "$p99" "$cpu" "${non2xx:-0}" | tee -a "$SUM"
}

chat_lua "$work/direct.lua" "sim-platform-key" "doubao-seed-1-6-flash-250828"
run "direct simulator" "http://127.0.0.1:9100/api/v3/chat/completions" "$work/direct.lua" 1 5 0
run "direct simulator" "http://127.0.0.1:9100/api/v3/chat/completions" "$work/direct.lua" 64 8 0
run "direct simulator" "http://127.0.0.1:9100/api/v3/chat/completions" "$work/direct.lua" 256 8 0

port=9200
for cores in ${CORES:-2 4 8}; do
  port=$((port + 1))
  last=$((cores - 1))
  gateway_env "${DBDIR:-$work}/g$cores.db" "$port"
  key=$(bench_key "$cores")
  taskset -c "0-$last" "$G" serve > "$work/serve$cores.log" 2>&1 &
  gw=$!
  wait_port "$port" || { tail -5 "$work/serve$cores.log" | tee -a "$SUM"; continue; }
  chat_lua "$work/gw.lua" "$key" "LangA-V4-flash"
  url="http://127.0.0.1:$port/api/v1/chat/completions"
  taskset -c "$WRK_CORES" "$W" -t"$WRK_T" -c64 -d3s -s "$work/gw.lua" "$url" > /dev/null 2>&1
  run "gateway $cores cores" "$url" "$work/gw.lua" 1 5 "$gw"
  run "gateway $cores cores" "$url" "$work/gw.lua" 64 10 "$gw"
  thread_ticks "$gw" > "$work/t0"
  run "gateway $cores cores" "$url" "$work/gw.lua" 256 10 "$gw"
  thread_ticks "$gw" > "$work/t1"
  # Busiest threads over the 10 s run, as % of one core, summed by name.
  join <(sort "$work/t0") <(sort "$work/t1") | awk -v k="$TCK" '{busy[$2] += ($5 - $3); n[$2]++}
    END {for (t in busy) printf "  %-18s x%-3d %6.1f%% of one core\n", t, n[t], busy[t] / k / 10 * 100}' \
    | sort -k3,3nr | head -6 | tee -a "$SUM"
  echo "rss_kib $(awk '/VmHWM/ {print $2}' "/proc/$gw/status") (peak)" | tee -a "$SUM"
  kill "$gw"; wait "$gw" 2>/dev/null
  grep -iE "error|panic" "$work/serve$cores.log" | head -3 >> "$SUM"
done
kill "$SIM"
