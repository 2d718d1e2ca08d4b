#!/usr/bin/env python3
"""schema_suite_check.py OUT.jsonl [--json FILE] — the verdicts on `ringlm bench schemas`' output
that do not come from ringlm: every generated answer is decoded as UTF-8, parsed as JSON and
validated against its schema by python's `jsonschema` (Draft 2020-12, formats checked where it
can); the suite's invalid instances the automaton accepted are listed. Prints the summary and the most common refusal
reasons; writes the summary as JSON (default bench/out/schemas.json). Exit 1 when any answer
fails or any invalid instance was accepted."""
import collections, json, sys

import jsonschema


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit("usage: schema_suite_check.py OUT.jsonl [--json FILE]")
    src, out = args[0], "bench/out/schemas.json"
    if "--json" in args:
        out = args[args.index("--json") + 1]
    status = collections.Counter()
    reasons = collections.Counter()
    answers = bad = unsound = 0
    bad_list = []
    compile_ms = []
    for line in open(src, encoding="utf-8"):
        r = json.loads(line)
        status[r["status"]] += 1
        if r["status"] != "compiled":
            # the reason without the path to the keyword: "items: 'x' ..." and "'x' ..." are one
            reasons[r["reason"].split(": ")[-1][:80]] += 1
            continue
        compile_ms.append(r["compile_ms"])
        schema = json.loads(r["schema"])
        v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        for h in r["generated_hex"]:
            answers += 1
            raw = bytes.fromhex(h)
            try:
                inst = json.loads(raw.decode("utf-8"))
                errs = list(v.iter_errors(inst))
                why = errs[0].message if errs else None
            except (UnicodeDecodeError, ValueError) as e:
                why = f"not JSON: {e}"
            if why:
                bad += 1
                bad_list.append({"file": r["file"], "group": r["group"], "answer": raw.decode("utf-8", "replace"), "why": why})
        unsound += len(r["accepted_invalid"])
    print(f"schemas {sum(status.values())}: compiled {status['compiled']}, refused by name {status['refused']}, "
          f"too large {status['too_large']}, failed {status['failed']}")
    compile_ms.sort()
    pct = lambda q: compile_ms[min(len(compile_ms) - 1, int(q * len(compile_ms)))] if compile_ms else 0.0
    print(f"compile ms: p50 {pct(0.5):.2f}, p90 {pct(0.9):.2f}, p99 {pct(0.99):.2f}, max {pct(1.0):.2f}")
    print(f"answers generated {answers}: valid {answers - bad}, invalid {bad}; invalid instances accepted {unsound}")
    for b in bad_list[:10]:
        print(f"  INVALID {b['file']} / {b['group']}: {b['answer'][:80]!r}: {b['why'][:100]}")
    print("most common refusals:")
    for k, n in reasons.most_common(12):
        print(f"  {n:4d}  {k}")
    with open(out, "w") as f:
        json.dump({"status": status, "compile_ms_p50": pct(0.5), "compile_ms_p99": pct(0.99), "answers": answers, "answers_invalid": bad, "invalid_accepted": unsound,
                   "refusals": reasons.most_common(), "bad": bad_list[:50]}, f, indent=1)
    sys.exit(1 if bad or unsound else 0)


if __name__ == "__main__":
    main()
