#!/usr/bin/env python3
"""bench/ncu_table.py OUT_DIR — the per-kernel table of a GPU session's profile stage
(bench/gpu_session.sh): for each profiled step (ncu_decode1.csv, ncu_decode64.csv,
ncu_prefill2048.csv, ncu_mixed.csv, written by `ncu --csv --page raw --print-units base` over
`ringlm bench gpu --profile STEP`), every kernel with its launches in the step, its time per
step, its share of the step's kernel time and its achieved DRAM bandwidth, largest first.
Missing or empty files are reported and left out. Also runs on a synthetic file:
  python3 bench/ncu_table.py DIR   (DIR holding any of the four CSVs)"""
import csv
import io
import os
import sys

STEPS = [("decode1", "decode, batch 1"), ("decode64", "decode, batch 64"),
         ("prefill2048", "prefill, 2048 tokens"), ("mixed", "mixed: a 512-token chunk + 32 decodes")]
TIME, RD, WR = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"


def rows_of(path):
    """The kernel rows of one ncu raw CSV (ncu's own ==PROF== lines and the program's output
    are skipped; so is the units row that follows the header)."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        return None
    rows = []
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if not (r.get("ID") or "").strip().isdigit():
            continue
        rows.append(r)
    return rows


def num(s):
    try:
        return float((s or "0").replace(",", ""))
    except ValueError:
        return 0.0


def table(rows):
    k = {}
    for r in rows:
        name = r.get("Kernel Name") or r.get("Function Name") or "?"
        e = k.setdefault(name, [0, 0.0, 0.0])
        e[0] += 1
        e[1] += num(r.get(TIME))                 # ns (base units)
        e[2] += num(r.get(RD)) + num(r.get(WR))  # bytes
    total = sum(e[1] for e in k.values()) or 1.0
    out = ["| kernel | launches | us per step | share | DRAM GB/s |", "|---|---:|---:|---:|---:|"]
    for name, (n, t, b) in sorted(k.items(), key=lambda x: -x[1][1]):
        short = name if len(name) <= 90 else name[:87] + "..."
        out.append("| `%s` | %d | %.1f | %.1f%% | %.0f |" % (short.replace("|", "\\|"), n, t / 1e3, 100 * t / total,
                                                           b / t if t else 0))
    out.append("| **all kernels** | %d | %.1f | 100%% | %.0f |" % (
        sum(e[0] for e in k.values()), total / 1e3, sum(e[2] for e in k.values()) / total))
    return "\n".join(out)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/out"
    found = 0
    for step, title in STEPS:
        p = os.path.join(d, "ncu_%s.csv" % step)
        if not os.path.exists(p):
            print("%s: no %s\n" % (title, p))
            continue
        rows = rows_of(p)
        if not rows:
            print("%s: %s holds no kernel rows (see ncu_%s.err)\n" % (title, p, step))
            continue
        found += 1
        print("### %s\n\n%s\n" % (title, table(rows)))
    sys.exit(0 if found else 1)


if __name__ == "__main__":
    main()
