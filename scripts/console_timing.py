#!/usr/bin/env python3
"""Times the API requests behind each console page on a database of N tasks (default 100,000).

Seeds the demo user's history straight into the gateway's SQLite file (settled chat calls with
their reservations and `reserve` / `settle` ledger entries, spread over 90 days, and a top-up that
keeps the balance equal to the ledger's sum), then asks each page's requests `--runs` times and
prints median, 95th percentile and worst, in milliseconds. Run by scripts/console_timing.sh.
"""

import argparse
import json
import random
import sqlite3
import statistics
import time
import urllib.request

DAY_MS = 86_400_000
MODELS = ["LangB-2.0-pro", "LangA-V4-flash", "LangB-2.0-mini", "Vendor-Imagegen-4.5"]


def get(base, key, path):
    request = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + key})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def seed(path, user, tasks):
    now = int(time.time() * 1000)
    rng = random.Random(23)
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA busy_timeout = 30000")
    keys = [row[0] for row in db.execute("SELECT id FROM api_keys WHERE user_id = ?", (user,))]
    task_rows, reservation_rows, ledger_rows = [], [], []
    total = 0
    # In time order, as a live gateway inserts them (rows of one period lie together).
    times = sorted(now - rng.randrange(90 * DAY_MS) for _ in range(tasks))
    for i, created in enumerate(times):
        model = MODELS[i % len(MODELS)]
        kind = "image" if model.startswith("Vendor") else "language"
        held, actual = 5_000, rng.randrange(1, 5_000)
        total += actual
        tid = f"task_seed_{i:07d}"
        key_id = keys[i % len(keys)] if keys else None
        task_rows.append((tid, user, model, kind, "succeeded", "sim", created, created + 900, created + 900, key_id))
        reservation_rows.append((tid, user, held, "settled", actual, 0, created, created + 900))
        ledger_rows.append((user, tid, "reserve", -held, 0, f"hold of {held}", created))
        ledger_rows.append((user, tid, "settle", held - actual, 0, f"charged {actual} of {held} held", created + 900))
    with db:
        db.executemany(
            "INSERT INTO tasks (id, user_id, model, kind, status, provider, created_at, updated_at, completed_at, key_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", task_rows)
        db.executemany(
            "INSERT INTO reservations (task_id, user_id, amount_micros, status, actual_micros, balance_after_micros, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", reservation_rows)
        db.executemany(
            "INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)", ledger_rows)
        # The seeded charges are paid by a top-up of the same amount: the balance stays the sum.
        db.execute(
            "INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, "
            "created_at) VALUES (?, NULL, 'topup', ?, 0, 'seed', ?)", (user, total, now))
        db.execute("UPDATE users SET spent_micros = spent_micros + ? WHERE id = ?", (total, user))
    db.execute("ANALYZE")
    db.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--sqlite", required=True)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    base, key = args.base, args.key
    user = get(base, key, "/api/v1/overview")["user"]["id"]
    started = time.monotonic()
    seed(args.sqlite, user, args.tasks)
    print(f"seeded {args.tasks} tasks and {2 * args.tasks + 1} ledger entries in {time.monotonic() - started:.1f} s")
    some_task = "task_seed_0000042"
    deep = args.tasks // 20 // 2
    pages = {
        "overview: GET /overview": ["/api/v1/overview"],
        "overview: GET /usage (30 days by day)": ["/api/v1/usage?group_by=day"],
        "overview page (both)": ["/api/v1/overview", "/api/v1/usage?group_by=day"],
        "tasks: page 1": ["/api/v1/tasks?page=1&page_size=20"],
        "tasks: page 1, completed + language": ["/api/v1/tasks?page=1&page_size=20&status=completed&kind=language"],
        f"tasks: page {deep} of {args.tasks // 20}": [f"/api/v1/tasks?page={deep}&page_size=20"],
        "task detail": [f"/api/v1/tasks/{some_task}"],
        "ledger: page 1 (50)": ["/api/v1/ledger?page=1&page_size=50"],
        f"ledger: page {deep}": [f"/api/v1/ledger?page={deep}&page_size=50"],
        "usage: 366 days by model": ["/api/v1/usage?group_by=model&from=" + time.strftime("%Y-%m-%d", time.gmtime(time.time() - 365 * 86400))],
        "keys": ["/api/v1/keys"],
        "admin: users": ["/api/v1/admin/users?page=1&page_size=20"],
        "admin: user detail": [f"/api/v1/admin/users/{user}"],
        "admin: models": ["/api/v1/admin/models"],
        "admin: health": ["/api/v1/admin/health"],
        "admin: audit": ["/api/v1/admin/audit?page=1&page_size=50"],
    }
    print(f"| page data ({args.tasks:,} tasks, {args.runs} runs) | median ms | p95 ms | worst ms |")
    print("|---|---|---|---|")
    for name, paths in pages.items():
        for path in paths:
            get(base, key, path)  # warm
        took = []
        for _ in range(args.runs):
            start = time.perf_counter()
            for path in paths:
                get(base, key, path)
            took.append((time.perf_counter() - start) * 1000)
        took.sort()
        p95 = took[min(len(took) - 1, int(len(took) * 0.95))]
        print(f"| {name} | {statistics.median(took):.1f} | {p95:.1f} | {took[-1]:.1f} |")


if __name__ == "__main__":
    main()
