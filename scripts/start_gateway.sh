# Sourced by the scripts that check a running gateway (sdk_compat.sh, schemathesis.sh): builds the
# gateway (debug), makes the Python virtual environment `$venv`, starts `gateway serve` on a free
# port with a fresh SQLite database and the built-in simulator, and sets `base` (its URL) and `key`
# (the demo key), and `db` (its SQLite file); payments go to a local fake Stripe
# (scripts/fake_stripe.py) whose webhook secret is `stripe_whsec`. The gateway is stopped and its folder removed when
# the calling script exits.
# Expects `root` (the repository) to be set.
work="$(mktemp -d)"
gateway_pid=""
stripe_pid=""
cleanup() {
  if [ -n "$gateway_pid" ]; then kill -TERM "$gateway_pid" 2>/dev/null || true; wait "$gateway_pid" 2>/dev/null || true; fi
  if [ -n "$stripe_pid" ]; then kill -TERM "$stripe_pid" 2>/dev/null || true; wait "$stripe_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# GW_PROFILE=release builds and runs the optimised binary (for timings); debug by default.
profile="${GW_PROFILE:-debug}"
if [ "$profile" = release ]; then
  cargo build -q --release -p gateway --manifest-path "$root/Cargo.toml"
else
  cargo build -q -p gateway --manifest-path "$root/Cargo.toml"
fi
venv="$root/.venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"

# Payments through a local server playing Stripe's API (scripts/fake_stripe.py), so that the
# top-up routes answer as with a real account; the webhook secret signs test events (`stripe_whsec`).
stripe_key="sk_test_local_$(date +%s)"
stripe_whsec="whsec_local_$(date +%s)"
python3 "$root/scripts/fake_stripe.py" "$work/stripe.port" "$stripe_key" &
stripe_pid=$!
for _ in $(seq 1 50); do [ -s "$work/stripe.port" ] && break; sleep 0.1; done
(cd "$work" && GATEWAY_STRIPE_SECRET_KEY="$stripe_key" GATEWAY_STRIPE_WEBHOOK_SECRET="$stripe_whsec" \
  GATEWAY_STRIPE_API_BASE="http://127.0.0.1:$(cat "$work/stripe.port")" GATEWAY_LISTEN=127.0.0.1:0 GATEWAY_DATABASE_URL="sqlite://$work/gw.db?mode=rwc" GATEWAY_LOG=warn \
  GATEWAY_MEDIA_DIR="$work/media" exec "$root/target/$profile/gateway" serve >"$work/out.txt" 2>"$work/err.txt") &
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
db="$work/gw.db"
