#!/usr/bin/env python3
"""Issue 12's attacks on `trellis serve`, measured on one binary at a time.

    host/benches/server-attacks.py reads   BINARY [BINARY...]
    host/benches/server-attacks.py stalled BINARY [BINARY...]

`reads`: a server on the sample shop (`trellis demo`), asked
`GET /views/shop.datamart/MonthlyTotal/rym(...)` over long ranges of
months with no token, as the outside probe did: first 12 ranges of 800
years each (9,600 monthly totals, 1.79 million views with their
dependencies), then 40 consecutive ranges of 50 years (111,600 views each). Prints the server's resident
memory (VmRSS) and views held after each request.

`stalled`: a server whose open-file limit is 1,024 (the usual default),
1,000 connections that send half a request head and then nothing, and
/health asked 200 times meanwhile, each on a new connection. Prints the
latency distribution and how many /health requests got no answer within
5 s (it gives up after 10 such). Several binaries are measured one after another in the same run,
for ratios.
"""

import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def start(binary, project, *, files=None, args=()):
    def limit():
        if files:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    env = {k: v for k, v in os.environ.items() if k not in ("TRELLIS_TOKEN", "TRELLIS_SERVER")}
    env["TRELLIS_LOG"] = "warn"
    server = subprocess.Popen(
        [binary, "serve", "--bind", "127.0.0.1:0", "-p", project, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        preexec_fn=limit,
        text=True,
    )
    line = server.stdout.readline()
    assert line.startswith("listening on "), line
    return server, line.strip().removeprefix("listening on ")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def get(url, timeout=600):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def demo(binary, directory):
    project = os.path.join(directory, "demo")
    subprocess.run([binary, "demo", project], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return project


def reads(binary):
    with tempfile.TemporaryDirectory() as directory:
        project = demo(binary, directory)
        server, url = start(binary, project)
        try:
            print(f"{binary}: started, {rss_mib(server.pid):.0f} MiB")
            ranges = [(2015 + 600 * n, 2814 + 600 * n) for n in range(12)]
            ranges += [(2015 + 50 * n, 2064 + 50 * n) for n in range(40)]
            for n, (first, last) in enumerate(ranges, 1):
                asked = time.monotonic()
                status, body = get(f"{url}/views/shop.datamart/MonthlyTotal/rym({first:04}01-{last:04}12)?overview=true")
                took = time.monotonic() - asked
                _, health = get(f"{url}/health")
                views = json.loads(health)["views"]
                answer = json.loads(body)
                said = answer.get("error", f"{answer.get('total')} views")[:90]
                print(f"  GET {n:2} months {first}-{last}: {status} in {took:5.1f} s, "
                      f"{rss_mib(server.pid):6.0f} MiB, {views:>9} views held  ({said})")
            print(f"{binary}: after the attack, {rss_mib(server.pid):.0f} MiB")
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait()


def stalled(binary):
    with tempfile.TemporaryDirectory() as directory:
        project = demo(binary, directory)
        server, url = start(binary, project, files=1024)
        address = url.removeprefix("http://")
        host, port = address.rsplit(":", 1)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        clients = []
        try:
            for _ in range(1000):
                client = socket.create_connection((host, int(port)))
                client.sendall(b"GET /health HTTP/1.1\r\nHost: stalled\r\n")
                clients.append(client)
            latencies, unanswered = [], 0
            for _ in range(200):
                asked = time.monotonic()
                try:
                    status, _ = get(f"{url}/health", timeout=5)
                    assert status == 200, status
                    latencies.append((time.monotonic() - asked) * 1000)
                except (OSError, urllib.error.URLError):
                    unanswered += 1
                    if unanswered == 10:
                        break
            if latencies:
                latencies.sort()
                p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
                print(f"{binary}: 1,000 stalled connections; /health answered {len(latencies)} of {len(latencies) + unanswered} asked, "
                      f"unanswered {unanswered}; median {statistics.median(latencies):.2f} ms, "
                      f"p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms")
            else:
                print(f"{binary}: 1,000 stalled connections; /health answered 0 of 200 within 5 s")
        finally:
            for client in clients:
                client.close()
            server.send_signal(signal.SIGTERM)
            server.wait()


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("reads", "stalled"):
        sys.exit(__doc__)
    for binary in sys.argv[2:]:
        {"reads": reads, "stalled": stalled}[sys.argv[1]](binary)
