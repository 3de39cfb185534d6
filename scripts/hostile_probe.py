#!/usr/bin/env python3
"""Re-runs the hostile-client probes of the hardening work against a release gateway, as a foreign
client would, and prints each figure: the gateway's RSS for a large chat body of zeros, a multipart
body without its boundary, 2,000 idle connections and a half-sent header, and two trickled 600-MiB
image bodies while another user sends a 2-MiB one.

Usage: python3 scripts/hostile_probe.py [path/to/gateway]   (default target/release/gateway)
It starts the upstream simulator (`gateway sim-upstream`, a process of its own) and `gateway serve` on a
fresh SQLite file, on 127.0.0.1 only, and stops both at the end. Every loop is bounded in count and time.
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1024 * 1024


def rss_mib(pid):
    """(VmRSS, VmHWM) of pid in MiB."""
    status = open(f"/proc/{pid}/status").read()
    get = lambda name: int(re.search(rf"{name}:\s+(\d+)", status).group(1)) // 1024
    return get("VmRSS"), get("VmHWM")


def read_status(sock, limit):
    """The status code of the first response on sock within limit seconds (None if none came)."""
    sock.settimeout(0.2)
    got, start = b"", time.time()
    while time.time() - start < limit:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
        if b"\r\n" in got:
            return int(got.split(b" ", 2)[1])
    return None


def open_post(addr, path, key, length, ctype="application/json"):
    s = socket.create_connection(addr)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {length}\r\n\r\n")
    s.sendall(head.encode())
    return s


def send_all(sock, data, chunk=1 << 20):
    try:
        for i in range(0, len(data), chunk):
            sock.sendall(data[i:i + chunk])
    except OSError:
        pass


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/gateway"
    work = tempfile.mkdtemp(prefix="hostile-probe-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_LISTEN="127.0.0.1:0", GATEWAY_DATABASE_URL=f"sqlite://{work}/gw.db?mode=rwc",
               GATEWAY_MEDIA_DIR=f"{work}/media", GATEWAY_LOG="warn",
               # Every probe connection comes from 127.0.0.1: its 2,000 idle ones need more than
               # the per-address cap's default of 256.
               GATEWAY_MAX_CONNECTIONS_PER_IP="8192")
    # The upstream simulator in a process of its own, so that the gateway's memory is the gateway's.
    sim = subprocess.Popen([binary, "sim-upstream", "--listen", "127.0.0.1:0"], env=env, cwd=work,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    sim_base = json.loads(sim.stdout.readline())["simulator"]
    origin = sim_base.rsplit("/api/v3", 1)[0]
    env.update(GATEWAY_UPSTREAM_URL=sim_base, GATEWAY_UPSTREAM_API_KEY="sim-platform-key",
               GATEWAY_SPEECH_URL=origin, GATEWAY_SPEECH_API_KEY="sim-speech-key",
               GATEWAY_MESSAGES_URL=f"{origin}/api/compatible")
    admin = lambda *args: json.loads(subprocess.run([binary, "admin", *args], env=env, cwd=work, check=True,
                                                    capture_output=True, text=True).stdout)
    server = subprocess.Popen([binary, "serve"], env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        addr = None
        for _ in range(200):
            line = server.stdout.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if m:
                addr = ("127.0.0.1", int(m.group(1)))
                break
        assert addr, "the gateway did not start"
        threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
        keys = []
        for name in ("a", "b"):
            user = admin("user", "create", "--name", name, "--email", f"{name}@example.com", "--balance", "100")
            key = admin("key", "create", "--user", user["id"], "--scopes",
                        "language:create,image:create,video:create,task:read")
            keys.append(key["key"])
        a, b = keys
        pid = server.pid
        print(f"gateway {binary}, pid {pid}, idle RSS {rss_mib(pid)[0]} MiB")

        # 1. A 57-MiB chat body whose extra member is [0,0,0,...].
        zeros = b"0," * (57 * MIB // 2)
        body = (b'{"model":"LangA-V4-flash","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"pad":['
                + zeros + b'0]}')
        before = rss_mib(pid)[1]
        s = open_post(addr, "/api/v1/chat/completions", a, len(body))
        t = time.time()
        send_all(s, body)
        status = read_status(s, 60)
        s.close()
        print(f"57-MiB chat body of zeros: {status} in {time.time() - t:.2f} s; peak RSS {before} -> {rss_mib(pid)[1]} MiB")
        del body, zeros

        # 2. 200 MiB of multipart/form-data that never contains the boundary.
        before = rss_mib(pid)[0]
        s = open_post(addr, "/api/v1/tasks", a, 200 * MIB, "multipart/form-data; boundary=xyz")
        t = time.time()
        sender = threading.Thread(target=send_all, args=(s, b"\0" * (200 * MIB)))
        sender.start()
        status = read_status(s, 60)
        took = time.time() - t
        s.close()
        sender.join(30)
        print(f"200-MiB multipart without boundary: {status} after {took:.2f} s; RSS {before} -> {rss_mib(pid)[0]} MiB")

        # 3. 2,000 idle connections and one half-sent header; a normal call meanwhile.
        idle = [socket.create_connection(addr) for _ in range(2000)]
        half = socket.create_connection(addr)
        half.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        t = time.time()
        call = json.dumps({"model": "LangA-V4-flash", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        s = open_post(addr, "/api/v1/chat/completions", b, len(call))
        s.sendall(call)
        status = read_status(s, 30)
        s.close()
        print(f"with 2,000 idle connections and a half header open: a chat call {status} in {(time.time() - t) * 1000:.0f} ms")
        half.settimeout(30)
        t = time.time()
        try:
            closed = half.recv(1) == b""
        except socket.timeout:
            closed = False
        except OSError:
            closed = True
        print(f"half-sent header: {'closed' if closed else 'still open'} after {time.time() - t:.1f} s "
              "(header timeout 10 s; the probe waits 30 s)")
        for c in idle:
            c.close()

        # 4. Two image requests declaring 600 MiB that trickle; another user's 2-MiB image request.
        trickling = []
        for _ in range(2):
            s = open_post(addr, "/api/v1/images/generations", a, 600 * MIB)
            s.sendall(b'{"model":"Vendor-Imagegen-4.5","prompt":"a cat","image":"data:image/png;base64,'
                      + b"A" * (64 * 1024))
            trickling.append(s)
        time.sleep(0.5)
        ref = "data:image/png;base64," + "A" * (2 * MIB)
        small = json.dumps({"model": "Vendor-Imagegen-4.5", "prompt": "a cat", "image": ref}).encode()
        t = time.time()
        s = open_post(addr, "/api/v1/images/generations", b, len(small))
        s.sendall(small)
        status = read_status(s, 60)
        s.close()
        print(f"while A trickles two 600-MiB image bodies: B's 2-MiB image request {status} in {(time.time() - t) * 1000:.0f} ms")
        t = time.time()
        ends = []
        for s in trickling:
            deadline = time.time() + 40
            code = None
            while code is None and time.time() < deadline:
                try:
                    s.sendall(b"A")
                except OSError:
                    pass
                code = read_status(s, 1)
            ends.append((code, round(time.time() - t, 1)))
        print(f"A's trickled bodies (64 KiB, then a byte a second) ended (status, seconds): {ends} "
              "(due at 10 s + 64 KiB at 32 KiB/s = 12 s)")
    finally:
        server.terminate()
        server.wait(20)
        sim.terminate()
        sim.wait(20)


if __name__ == "__main__":
    main()
