#!/usr/bin/env python3
"""bench/metrics_scrape.py — what a fleet router's scraping costs ringlm-http: GET /metrics at a
fixed rate (llm-d's endpoint picker scrapes every 50 ms: 20 per second) over one keep-alive
connection, as the picker does, while the caller's load (if any) runs; prints a table of the
scrape latency (p50/p99/max), the body size and ringlm-http's CPU time per scrape (from
/proc/PID/stat), and writes it as JSON.

    bench/metrics_scrape.py --url http://127.0.0.1:8080 --pid PID [--rate 20] [--seconds 10]
                            [--out bench/out/metrics_scrape.json]

Standard library only (http.client)."""
import argparse
import http.client
import json
import os
import time
import urllib.parse


def cpu_s(pid):
    """user + system seconds of process pid so far"""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="ringlm-http's base URL")
    ap.add_argument("--pid", type=int, help="ringlm-http's pid, for its CPU time per scrape")
    ap.add_argument("--rate", type=float, default=20.0, help="scrapes per second (default 20)")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long (default 10)")
    ap.add_argument("--out", default="bench/out/metrics_scrape.json")
    a = ap.parse_args()
    if a.rate <= 0 or a.seconds <= 0:
        ap.error("--rate and --seconds must be positive")
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
    lat, size = [], 0
    c0 = cpu_s(a.pid) if a.pid else None
    t_end = time.monotonic() + a.seconds
    nxt = time.monotonic()
    while time.monotonic() < t_end:
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read()
        lat.append(time.perf_counter() - t0)
        if r.status != 200:
            raise SystemExit("metrics_scrape: GET /metrics answered %d" % r.status)
        size = len(body)
        nxt += 1.0 / a.rate
        time.sleep(max(0.0, nxt - time.monotonic()))
    cpu = (cpu_s(a.pid) - c0) if a.pid else None
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6   # noqa: E731
    res = {"scrapes": len(lat), "rate_per_s": a.rate, "p50_us": q(0.5), "p99_us": q(0.99), "max_us": lat[-1] * 1e6,
           "bytes": size, "http_cpu_us_per_scrape": cpu / len(lat) * 1e6 if cpu is not None else None,
           "http_cpu_share_of_a_core": cpu / a.seconds if cpu is not None else None}
    print("| scrapes | rate/s | p50 µs | p99 µs | max µs | bytes | ringlm-http CPU µs/scrape | CPU share |")
    print("|---|---|---|---|---|---|---|---|")
    print("| %d | %g | %.0f | %.0f | %.0f | %d | %s | %s |" % (
        res["scrapes"], a.rate, res["p50_us"], res["p99_us"], res["max_us"], size,
        "%.0f" % res["http_cpu_us_per_scrape"] if cpu is not None else "-",
        "%.2f%%" % (100 * res["http_cpu_share_of_a_core"]) if cpu is not None else "-"))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
