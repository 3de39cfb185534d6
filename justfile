# Developer recipes. `just --list` shows them.

# Run the gateway: embedded SQLite under ./data, built-in upstream simulator, printed demo key.
run:
    cargo run -p gateway -- serve

# All tests on SQLite (the README's test command).
test:
    cargo test --workspace

# All tests, also against PostgreSQL (database `test` on the local server unless TEST_DATABASE_URL is set).
test-pg:
    TEST_DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}" cargo test --workspace

# Formatting and lints as CI runs them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Benchmark: the simulator and the gateway as child processes, direct vs. gateway, non-streaming
# c=1/16/64, 32 accounts, two replicas and streaming; figures and targets in docs/PERFORMANCE.md.
# Extra flags override the defaults, e.g. `just bench --scenarios gateway-c64 --duration-secs 5`
# or `just bench --database-url sqlite --database-url postgres://postgres@127.0.0.1:5432/gw_bench`.
bench *ARGS:
    cargo build --release -p gateway -p bench
    cargo run --release -p bench -- --duration-secs 10 --warmup-secs 1 --max-requests 2000000 {{ARGS}}

# The benchmark with `wrk` beside bench's own load (Debian's `wrk` package, installed when
# missing), e.g. `just bench-wrk --scenarios direct-c1,direct-c64,gateway-c1,gateway-c64`.
bench-wrk *ARGS:
    command -v wrk >/dev/null || (apt-get install -y wrk || sudo apt-get install -y wrk)
    cargo build --release -p gateway -p bench
    cargo run --release -p bench -- --duration-secs 10 --warmup-secs 1 --max-requests 2000000 --wrk "$(command -v wrk)" {{ARGS}}
