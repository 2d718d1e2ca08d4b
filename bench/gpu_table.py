#!/usr/bin/env python3
"""bench/gpu_table.py OUT_DIR — one markdown table from a GPU session's JSON (bench/gpu_session.sh):
`ringlm bench gpu` with the in-house attention (gpu.json) and with FlashInfer's (gpu_fi.json)
beside the PyTorch peer (peer.json), decode step time, share of the roofline and kernels a step
(ringlm's, from its graphs) per batch,
prefill time and TFLOP/s, and ringlm's ITL under long prompts. Missing files are left out."""
import json
import os
import sys


def load(d, n):
    try:
        with open(os.path.join(d, n)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/out"
    runs = [("ringlm", load(d, "gpu.json")), ("ringlm + FlashInfer", load(d, "gpu_fi.json")),
            ("PyTorch peer", load(d, "peer.json"))]
    runs = [(n, r) for n, r in runs if r]
    if not runs:
        sys.exit("gpu_table: no gpu.json, gpu_fi.json or peer.json in " + d)
    r0 = runs[0][1]
    print("device %s, synthetic %s, context %s" % (r0.get("device"), r0.get("shape"), r0.get("ctx")))
    print()
    print("| step | " + " | ".join(n for n, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for b in sorted({x["batch"] for _, r in runs for x in r.get("decode", [])}):
        cells = []
        for _, r in runs:
            x = [e for e in r.get("decode", []) if e["batch"] == b]
            k = x[0].get("kernels") if x else None
            cells.append("%.2f ms (%.0f%% of roofline%s)" % (x[0]["step_ms"], 100 * x[0]["efficiency"],
                         ", %d kernels" % k if k else "") if x else "")
        print("| decode batch %d | %s |" % (b, " | ".join(cells)))
    for t in sorted({x["tokens"] for _, r in runs for x in r.get("prefill", [])}):
        cells = []
        for _, r in runs:
            x = [e for e in r.get("prefill", []) if e["tokens"] == t]
            cells.append("%.2f ms (%.0f TFLOP/s)" % (x[0]["ms"], x[0]["tflops"]) if x else "")
        print("| prefill %d tokens | %s |" % (t, " | ".join(cells)))
    for n, r in runs:
        i = r.get("itl")
        if i:
            print("\n%s: ITL of %d streams while %d-token prompts arrive: chunked p99 %.1f ms, unchunked p99 %.1f ms"
                  % (n, i["streams"], i["prompt"], i["chunked_p99_ms"], i["unchunked_p99_ms"]))


if __name__ == "__main__":
    main()
