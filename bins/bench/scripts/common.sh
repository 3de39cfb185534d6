# Shared by the wrk scripts beside it (sourced, not run): the gateway binary and wrk, waiting for a
# port, the gateway's settings against the simulator on 127.0.0.1:9100, a funded account's key,
# starting the simulator and a gateway together,
# and the Lua script that makes wrk send a chat completion.
#
# Environment (none may start with GATEWAY_: the gateway refuses settings it does not know):
# GW_BIN (default target/release/gateway), WRK (default wrk on PATH).

G=$(realpath "${GW_BIN:-target/release/gateway}")
W=${WRK:-wrk}
SIM_URL=http://127.0.0.1:9100

# Waits (10 s at most) until something listens on 127.0.0.1:$1.
wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "port $1 never opened" >&2
  return 1
}

# Exports the settings of a gateway on SQLite file $1 listening on port $2, every upstream at the
# simulator; every load comes from 127.0.0.1, so the per-address connection cap is lifted.
gateway_env() {
  export GATEWAY_DATABASE_URL="sqlite://$1?mode=rwc" GATEWAY_LOG=warn GATEWAY_LISTEN="127.0.0.1:$2" \
    GATEWAY_UPSTREAM_URL="$SIM_URL/api/v3" GATEWAY_UPSTREAM_API_KEY=bench \
    GATEWAY_SPEECH_URL="$SIM_URL" GATEWAY_SPEECH_API_KEY=bench \
    GATEWAY_MESSAGES_URL="$SIM_URL/api/compatible" \
    GATEWAY_MAX_CONNECTIONS_PER_IP=65536
}

# Migrates the database of gateway_env and prints the key of a new account with every scope and
# 1,000,000 USD ($1: a label for its e-mail address).
bench_key() {
  "$G" migrate > /dev/null
  local user
  user=$("$G" admin user create --name b --email "b$1@example.com" --balance 1000000 --concurrency-limit 100000 \
    | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  "$G" admin key create --user "$user" --all-scopes --name bench | sed -n 's/.*"key":"\([^"]*\)".*/\1/p'
}

# Writes to $1 the wrk script that POSTs a chat completion of model $3 with bearer key $2; $4 adds
# fields to the body (for example `"stream":true,`).
chat_lua() {
  cat > "$1" <<LUA
wrk.method = "POST"
wrk.body = '{"model":"$3",${4:-}"messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $2"
LUA
}

# Starts the simulator on port 9100 and `gateway serve` (under $PRE when set, e.g. a profiler) on a
# fresh SQLite file in a new directory, listening on port 9301, and waits for both; sets `work` (the
# directory), SIM and GW (their pids) and `key` (a funded account's key; $1 labels its e-mail).
# $AFTER_MIGRATE, when set, is an SQL file run on the migrated file (with the sqlite3 shell) before
# `serve`: a schema variant measured with the same binary.
start_pair() {
  work=$(mktemp -d)
  "$G" sim-upstream --listen 127.0.0.1:9100 > "$work/sim.log" 2>&1 &
  SIM=$!
  wait_port 9100
  gateway_env "$work/g.db" 9301
  key=$(bench_key "$1")
  if [ -n "${AFTER_MIGRATE:-}" ]; then
    sqlite3 "$work/g.db" < "$AFTER_MIGRATE" || { echo "AFTER_MIGRATE failed" >&2; return 1; }
  fi
  ${PRE:-} "$G" serve > "$work/serve.log" 2>&1 &
  GW=$!
  wait_port 9301
}
