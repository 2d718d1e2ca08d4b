"""bench/dynamo_serve.py — ringlm behind NVIDIA Dynamo 1.6.1 on this machine, two measurements:

1. overhead: what Dynamo's frontend + `python -m ringlm.dynamo` add per request and per token
   against ringlm-http, each in front of its own ringlmd (identical flags, --threads 1): the same
   streamed chat load (default 40 short prompts, max_tokens 32, temperature 0) closed-loop with 1
   and with 2 concurrent clients, the two fronts alternating round by round (A B A B ...; each
   round's prompts are new, and the same for both fronts, so both ringlmds see the same cache
   state); then open loop, Poisson arrivals at 2.5 req/s (the same seeded schedule for both).
   Two closed-loop clients with equal-length answers can phase-lock (both prompts prefilled in
   one step, both streams decoding together), and a front that adds jitter breaks the lock:
   that changes TTFT and gap tails for reasons other than the front's own cost; Poisson
   arrivals cannot lock. Client-side TTFT, inter-chunk gaps and per-request time per output
   token (TPOT: (last chunk - first chunk) / (tokens - 1); ringlm-http may put several tokens in one SSE chunk
   when they are ready together, so its chunk gaps are not token gaps), and the CPU seconds the
   front's processes (ringlm-http; or frontend + worker) spent per request.
2. routing: two ringlmd workers behind one frontend, `--router-mode kv` against `round-robin`
   (a fresh frontend for each run, both workers' prefix caches emptied with `ringlm reset-cache`
   first; modes alternate kv, rr, kv, rr ...): a few long distinct system prompts (default 4 of
   ~600 tokens) each followed by a short distinct user question (default 48 requests,
   max_tokens 8), closed loop with 1 and with 3 concurrent clients (or Poisson arrivals with
   --routing-rate). The prefix-hit ratio over both workers (delta of prefix_hit_tokens / delta of
   prefix_query_tokens, from `ringlm stats --json`), TTFT p50/p99 and requests per worker.
   Bounds to read it by: with P system prompts on 2 workers, round robin prefills each prompt at
   most twice (2P cold prefills), KV routing at best once (P); with 4 prompts over 48 requests
   the hit ratio can only move between ~0.79 and ~0.87. Dynamo's KV router also weighs load
   (in-flight blocks), so under concurrency it may send a request to the worker without its
   prefix; more prompts (--system-prompts 8) widen the gap.

Run it with the Dynamo venv's python, from anywhere:

    ~/.cache/ringlm/dynamo/bin/python bench/dynamo_serve.py [--model GGUF] [--rounds 3]
        [--requests 40] [--concurrency 1,2] [--poisson 2.5] [--max-tokens 32] [--overhead-router kv]
        [--routing-requests 48] [--system-prompts 4] [--system-sentences 13]
        [--routing-concurrency 1,3] [--routing-rate 0] [--routing-rounds 2]
        [--frontend-args '...'] [--only overhead|routing] [--out bench/out/dynamo_serve.json] [--keep-tmp]

Prints markdown tables and writes every figure (each round's too) as JSON. Every process it
starts runs in a session of its own and is killed with its group at the end, on error and on
SIGTERM/SIGINT too; every wait and every request is bounded. Loopback only; HF_HUB_OFFLINE=1 and
TRANSFORMERS_OFFLINE=1 for every Dynamo process."""
import argparse
import asyncio
import json
import os
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
import aiohttp  # noqa: E402  (the Dynamo venv has it)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
RINGLM = os.path.join(BUILD, "ringlm")
MODEL_NAME = "smollm2-ringlm"
DEFAULT_MODEL = os.path.expanduser("~/.cache/ringlm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
REQ_TIMEOUT = 120.0            # seconds, one request at most


# ------------------------------------------------------------------ processes ----------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def free_port_i16():
    """a free loopback port below 32768: Dynamo 1.6.1 reads DYN_SYSTEM_PORT as an i16"""
    for _ in range(200):
        p = random.randint(20000, 32767)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            return p
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port in 20000..32767")


def cpu_s(pid):
    """user + system seconds of process pid (all its threads) so far; 0 once it is gone"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Procs:
    """every process this bench starts: each the leader of its own session, logged to tmp"""

    def __init__(self, tmp, py, model):
        self.tmp, self.py, self.model = tmp, py, model
        self.procs = {}                                   # name -> Popen
        self.env = dict(os.environ, DYN_FILE_KV=os.path.join(tmp, "kv"), DYN_LOG="warn", HF_HUB_OFFLINE="1",
                        TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.path.join(REPO, "clients", "python"),
                        RINGLM_LIB=os.path.join(BUILD, "libringlm.so"), DYN_SELF_HOST_METADATA="0",
                        XDG_CACHE_HOME=os.path.join(tmp, "cache"), HOME=tmp,
                        DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS="1")
        self.hf = None
        self.rd = {}                                      # ringlmd name -> {"sock", "ep"}

    def spawn(self, name, argv, env=None):
        assert name not in self.procs or self.procs[name].poll() is not None, name
        log = open(os.path.join(self.tmp, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env or self.env, start_new_session=True, cwd=self.tmp)
        log.close()
        self.procs[name] = p
        return p

    def log_tail(self, name, n=2000):
        try:
            with open(os.path.join(self.tmp, name + ".log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def check_alive(self, *names):
        for name in names:
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                raise RuntimeError("%s exited (rc %s):\n%s" % (name, p.returncode, self.log_tail(name)))

    def stop(self, name, grace=5.0):
        p = self.procs.pop(name, None)
        if p is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(p.pid, sig)             # the group: nothing of it lives on
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=wait)
                if sig == signal.SIGTERM:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)   # stragglers of the group
                    except (ProcessLookupError, PermissionError):
                        pass
                break
            except subprocess.TimeoutExpired:
                continue

    def close(self):
        names = list(self.procs)
        for name in names:                         # SIGTERM all first, then wait, then SIGKILL
            try:
                os.killpg(self.procs[name].pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 8
        for name in names:
            try:
                self.procs[name].wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for name in names:
            p = self.procs.pop(name)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print("warning: %s (pid %d) did not die" % (name, p.pid), file=sys.stderr)

    # ---- the pieces

    def export_hf(self):
        self.hf = os.path.join(self.tmp, "hf")
        r = subprocess.run([RINGLM, "export-hf", self.model, self.hf], capture_output=True, text=True, timeout=120)
        if r.returncode:
            raise RuntimeError("ringlm export-hf failed: " + r.stderr)

    def ringlmd(self, name, threads):
        sock = os.path.join(self.tmp, name + ".sock")
        ep = "tcp://127.0.0.1:%d" % free_port()
        self.spawn(name, [os.path.join(BUILD, "ringlmd"), "--model", self.model, "--threads", str(threads),
                          "--kv-events", ep, "--socket", sock, "--quiet"])
        self.rd[name] = {"sock": sock, "ep": ep}
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            self.check_alive(name)
            if os.path.exists(sock) and stats(sock, quiet=True) is not None:
                return
            time.sleep(0.1)
        raise RuntimeError("%s did not come up in 60 s:\n%s" % (name, self.log_tail(name)))

    def http(self, name, rd):
        port = free_port()
        self.spawn(name, [os.path.join(BUILD, "ringlm-http"), "--socket", self.rd[rd]["sock"], "--port", str(port)])
        return "http://127.0.0.1:%d" % port

    def worker(self, name, rd):
        env = dict(self.env, DYN_SYSTEM_PORT=str(free_port_i16()), DYN_SYSTEM_HOST="127.0.0.1",
                   DYN_SYSTEM_ENABLED="true")
        self.spawn(name, [self.py, "-m", "ringlm.dynamo", "--socket", self.rd[rd]["sock"], "--hf-dir", self.hf,
                          "--model-name", MODEL_NAME, "--kv-events", self.rd[rd]["ep"],
                          "--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"], env=env)

    def instances(self):
        d = os.path.join(self.tmp, "kv", "v1", "instances")
        try:
            return [f for f in os.listdir(d) if f.startswith("dynamo%2Fbackend%2Fgenerate%2F")]
        except OSError:
            return []

    def wait_instances(self, n, names, timeout=90):
        t0 = time.monotonic()
        while len(self.instances()) < n:
            self.check_alive(*names)
            if time.monotonic() - t0 > timeout:
                raise RuntimeError("%d of %d workers registered after %d s:\n%s" % (
                    len(self.instances()), n, timeout, "".join(self.log_tail(x) for x in names)))
            time.sleep(0.2)

    def frontend(self, name, mode, extra=()):
        port = free_port()
        self.spawn(name, [self.py, "-m", "dynamo.frontend", "--router-mode", mode, "--discovery-backend", "file",
                          "--request-plane", "tcp", "--event-plane", "zmq", "--http-host", "127.0.0.1",
                          "--http-port", str(port)] + list(extra))
        return "http://127.0.0.1:%d" % port


def stats(sock, quiet=False):
    r = subprocess.run([RINGLM, "stats", "--socket", sock, "--json"], capture_output=True, text=True, timeout=20)
    if r.returncode:
        if quiet:
            return None
        raise RuntimeError("ringlm stats --socket %s: %s" % (sock, r.stderr))
    return json.loads(r.stdout)


def reset_cache(sock):
    for _ in range(50):                    # refused while requests hold cached blocks: bounded retries
        r = subprocess.run([RINGLM, "reset-cache", "--socket", sock], capture_output=True, text=True, timeout=20)
        if r.returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("ringlm reset-cache --socket %s kept failing: %s" % (sock, r.stderr))


# ------------------------------------------------------------------ the client ----------

async def one_chat(session, url, messages, max_tokens):
    """one streamed chat: {"ttft", "e2e", "gaps": [s], "ntok", "prompt_tokens", "chunks", "text"}"""
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    times, parts, usage = [], [], None
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError("HTTP %d from %s: %s" % (resp.status, url, (await resp.text())[:300]))
        async for raw in resp.content:
            now = time.perf_counter()
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ch = json.loads(data)
            if ch.get("usage"):
                usage = ch["usage"]
            for c in ch.get("choices") or []:
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    times.append(now)
                    parts.append(piece)
    t_end = time.perf_counter()
    if not times:
        raise RuntimeError("no content streamed back from %s" % url)
    ntok = (usage or {}).get("completion_tokens") or len(times)
    return {"ttft": times[0] - t0, "e2e": t_end - t0, "gaps": [b - a for a, b in zip(times, times[1:])],
            "tpot": (times[-1] - times[0]) / (ntok - 1) if ntok > 1 else None, "ntok": ntok,
            "prompt_tokens": (usage or {}).get("prompt_tokens"), "chunks": len(times), "text": "".join(parts)}


async def run_load(url, prompts, max_tokens, concurrency=1, rate=0.0, seed=1):
    """closed loop with `concurrency` clients over prompts (a list of message lists), or open loop:
    Poisson arrivals at `rate` requests/s when rate > 0 (the same seeded schedule every time); every
    request bounded by REQ_TIMEOUT. Returns (results, wall s)."""
    timeout = aiohttp.ClientTimeout(total=REQ_TIMEOUT)
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    res = [None] * len(prompts)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as s:
        t0 = time.perf_counter()
        if rate > 0:
            rng, at, offsets = random.Random(seed), 0.0, []
            for _ in prompts:
                offsets.append(at)
                at += rng.expovariate(rate)

            async def fire(i):
                await asyncio.sleep(max(0.0, t0 + offsets[i] - time.perf_counter()))
                res[i] = await one_chat(s, url, prompts[i], max_tokens)
            await asyncio.gather(*(fire(i) for i in range(len(prompts))))
        else:
            nxt = iter(range(len(prompts)))

            async def client():
                for i in nxt:
                    res[i] = await one_chat(s, url, prompts[i], max_tokens)
            await asyncio.gather(*(client() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return res, wall


def load(url, prompts, max_tokens, concurrency=1, rate=0.0, seed=1):
    return asyncio.run(run_load(url, prompts, max_tokens, concurrency, rate, seed))


def wait_serving(url, procs, names, timeout=120):
    """until a one-token chat through url comes back (the frontend lists the model only once a worker
    has registered)"""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        procs.check_alive(*names)
        try:
            load(url, [[{"role": "user", "content": "Hello"}]], 1)
            return time.monotonic() - t0
        except Exception as e:           # refused, 404 model not found, 503 no instances: not yet
            last = e
        time.sleep(0.3)
    raise RuntimeError("%s did not serve in %d s (%s):\n%s" % (url, timeout, last,
                                                               "".join(procs.log_tail(n) for n in names)))


def pct(xs, p):
    """nearest-rank percentile of xs (None if empty)"""
    if not xs:
        return None
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(-(-p * len(xs) // 1)) - 1))
    return xs[k]


def ms(x):
    return None if x is None else round(1000.0 * x, 2)


def summarize(res, wall):
    ttft = [r["ttft"] for r in res]
    gaps = [g for r in res for g in r["gaps"]]
    tpot = [r["tpot"] for r in res if r["tpot"] is not None]
    e2e = [r["e2e"] for r in res]
    pt = [r["prompt_tokens"] for r in res if r["prompt_tokens"] is not None]
    return {"requests": len(res), "wall_s": round(wall, 3), "req_per_s": round(len(res) / wall, 3),
            "ttft_p50_ms": ms(pct(ttft, 0.5)), "ttft_p99_ms": ms(pct(ttft, 0.99)),
            "gap_p50_ms": ms(pct(gaps, 0.5)), "gap_p99_ms": ms(pct(gaps, 0.99)),
            "tpot_p50_ms": ms(pct(tpot, 0.5)), "tpot_p99_ms": ms(pct(tpot, 0.99)),
            "e2e_p50_ms": ms(pct(e2e, 0.5)), "e2e_p99_ms": ms(pct(e2e, 0.99)),
            "out_tokens_mean": round(statistics.mean(r["ntok"] for r in res), 2),
            "chunks_per_request": round(statistics.mean(r["chunks"] for r in res), 2),
            "prompt_tokens_mean": round(statistics.mean(pt), 1) if pt else None}


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join("" if v is None else (("%.2f" % v) if isinstance(v, float) else str(v))
                                     for v in r) + " |")
    return "\n".join(out)


# ------------------------------------------------------------------ workloads ----------

TOPICS = ["tides", "volcanoes", "bread baking", "bicycles", "honeybees", "glaciers", "lighthouses", "compilers",
          "violins", "coral reefs", "windmills", "chess openings", "comets", "paper making", "owls", "rivers",
          "clocks", "mushrooms", "bridges", "deserts"]
ASKS = ["Explain in a detailed paragraph how {t} work and why people find {t} interesting.",
        "Write a short story of several sentences about a child who learns about {t}.",
        "Describe three surprising facts about {t}, with a sentence of detail for each.",
        "Give a friendly, detailed explanation of {t} for a curious ten-year-old reader."]


def short_prompts(n, round_i):
    """n distinct short chats (~40-55 prompt tokens with the template's default system prompt), new
    for every round"""
    out = []
    for i in range(n):
        t = TOPICS[(i + 7 * round_i) % len(TOPICS)]
        ask = ASKS[(i // len(TOPICS) + round_i) % len(ASKS)].format(t=t)
        out.append([{"role": "user", "content": "Request %d.%d. %s" % (round_i, i, ask)}])
    return out


COMPANIES = [("Harbor Lantern Shipping", "cargo containers", "the northern docks", "customs forms", "tugboat"),
             ("Maple Orchard Bakery", "sourdough loaves", "the village square", "allergen labels", "oven"),
             ("Quartz Peak Observatory", "telescope time", "the mountain ridge", "observing proposals", "dome"),
             ("Silverline Rail Company", "season tickets", "the central station", "delay refunds", "locomotive"),
             ("Copper Kettle Tea House", "loose leaf blends", "the river promenade", "loyalty cards", "teapot"),
             ("Bluefin Aquarium Trust", "annual memberships", "the harbour pier", "school visits", "shark tank"),
             ("Redwood Timber Works", "cedar planks", "the lumber yard", "delivery slots", "sawmill"),
             ("Starling Music School", "piano lessons", "the old concert hall", "exam entries", "rehearsal room")]
RULES = ["Rule {j}: when a customer asks about {a}, first confirm their account number, then explain the options "
         "for {a} available at {b}, and never promise anything the {e} team has not approved.",
         "Rule {j}: questions about {c} must be answered politely and precisely; if the customer is unsure, walk "
         "them through {c} step by step and mention that staff at {b} can help in person.",
         "Rule {j}: if a complaint mentions the {e}, apologise once, record the date and time, and tell the "
         "customer that {n} reviews every report about the {e} within two working days.",
         "Rule {j}: prices for {a} change every season; quote only the price list of {n} for the current "
         "season and say clearly that prices at {b} may differ for special orders."]


def system_prompt(k, sentences):
    n, a, b, c, e = COMPANIES[k % len(COMPANIES)]
    head = ("You are the customer support assistant of %s (assistant number %d). You help customers with %s, "
            "with %s and with everything about %s. Follow these rules exactly.\n" % (n, k, a, c, b))
    return head + "\n".join(RULES[j % len(RULES)].format(j=j + 1, a=a, b=b, c=c, e=e, n=n) for j in range(sentences))


QUESTIONS = ["What are your opening hours on {d}?", "Can I change my order number {x} to a later date?",
             "How do I get a refund for booking {x}?", "Is there a discount for groups of {x} people?",
             "Who should I call about ticket {x} from {d}?", "Why was my invoice {x} higher than last month?"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def routing_prompts(n, nsys, sentences, seed):
    """n chats: each one of nsys long system prompts (chosen at random, seeded) + a distinct short
    question; returns (chats, the system prompt index of each)"""
    rng = random.Random(seed)
    systems = [system_prompt(k, sentences) for k in range(nsys)]
    chats, which = [], []
    for i in range(n):
        k = rng.randrange(nsys)
        q = QUESTIONS[i % len(QUESTIONS)].format(d=DAYS[i % 7], x=1000 + 37 * i)
        chats.append([{"role": "system", "content": systems[k]}, {"role": "user", "content": "User %d: %s" % (i, q)}])
        which.append(k)
    return chats, which


# ------------------------------------------------------------------ phases ----------

def overhead(P, a):
    """part 1: ringlm-http (A) against the Dynamo frontend + ringlm.dynamo (B), rounds alternating"""
    t_setup = time.monotonic()
    url_a = P.http("http", "rdA")
    P.worker("workerB", "rdB")
    P.wait_instances(1, ["workerB"])
    url_b = P.frontend("frontend", a.overhead_router)
    ready_b = wait_serving(url_b, P, ["frontend", "workerB"])
    wait_serving(url_a, P, ["http"])
    fronts = {"ringlm-http": (url_a, ["http"], "rdA"), "dynamo": (url_b, ["frontend", "workerB"], "rdB")}
    # warm-up: the same few requests through both, not measured
    warm = short_prompts(4, 999)
    for url, _, _ in fronts.values():
        load(url, warm, a.max_tokens, 2)
    print("overhead setup %.1f s (the frontend served %.1f s after start)" % (time.monotonic() - t_setup, ready_b),
          flush=True)
    rounds = []
    order = ["ringlm-http", "dynamo"]
    for li, (label, conc, rate) in enumerate(a.loads):
        for r in range(a.rounds):
            prompts = short_prompts(a.requests, 10 * li + r)
            for name in (order if r % 2 == 0 else order[::-1]):       # A B, B A, A B ...
                url, names, rd = fronts[name]
                P.check_alive(*names)
                pids = [P.procs[n].pid for n in names]
                c0 = [cpu_s(p) for p in pids]
                rc0 = cpu_s(P.procs[rd].pid)
                res, wall = load(url, prompts, a.max_tokens, conc, rate, seed=a.seed + r)
                front_cpu = sum(cpu_s(p) - c for p, c in zip(pids, c0))
                s = summarize(res, wall)
                s.update(front=name, load=label, concurrency=conc, rate=rate, round=r,
                         front_cpu_ms_per_req=round(1000 * front_cpu / len(res), 2),
                         ringlmd_cpu_ms_per_req=round(1000 * (cpu_s(P.procs[rd].pid) - rc0) / len(res), 2))
                s["texts_head"] = [x["text"][:40] for x in res[:2]]
                rounds.append(s)
                print("  %s round %d %-11s ttft p50 %.1f ms, tpot p50 %.2f ms, wall %.1f s" % (
                    label, r, name, s["ttft_p50_ms"], s["tpot_p50_ms"], wall), flush=True)
    # both fronts must have given the same greedy answers (the same prompt ids reached both ringlmds)
    same = sum(1 for x, y in zip([r for r in rounds if r["front"] == "ringlm-http"],
                                 [r for r in rounds if r["front"] == "dynamo"]) if x["texts_head"] == y["texts_head"])
    P.stop("http")
    P.stop("frontend")
    return {"rounds": rounds, "router_mode": a.overhead_router, "rounds_with_same_texts": same,
            "frontend_ready_s": round(ready_b, 2)}


def routing(P, a):
    """part 2: two workers behind a fresh frontend per run, kv against round-robin"""
    for w, rd in (("workerA", "rdA"), ("workerB", "rdB")):
        if w not in P.procs:
            P.worker(w, rd)
    P.wait_instances(2, ["workerA", "workerB"])
    chats, which = routing_prompts(a.routing_requests, a.system_prompts, a.system_sentences, a.seed)
    socks = {rd: P.rd[rd]["sock"] for rd in ("rdA", "rdB")}
    runs = []
    plan = []                              # (load label, clients, rate, mode), modes alternating
    loads = ([("%d client%s" % (c, "" if c == 1 else "s"), c, 0.0) for c in a.routing_concurrency]
             if a.routing_rate <= 0 else [("Poisson %g/s" % a.routing_rate, 1, a.routing_rate)])
    for label, conc, rate in loads:
        for r in range(a.routing_rounds):
            plan += [(label, conc, rate, m) for m in (["kv", "round-robin"] if r % 2 == 0 else ["round-robin", "kv"])]
    for i, (label, conc, rate, mode) in enumerate(plan):
        name = "frontend_%d_%s" % (i, mode)
        url = P.frontend(name, mode, a.frontend_args)
        ready = wait_serving(url, P, [name, "workerA", "workerB"])
        time.sleep(0.3)
        for s in socks.values():
            reset_cache(s)
        time.sleep(0.5)                                   # AllBlocksCleared reaches the router
        before = {rd: stats(s) for rd, s in socks.items()}
        res, wall = load(url, chats, a.routing_max_tokens, conc, rate, a.seed)
        # requests_done is counted a moment after the last token: wait (bounded) for all of them
        t0 = time.monotonic()
        while True:
            after = {rd: stats(s) for rd, s in socks.items()}
            done = sum(after[rd]["requests_done"] - before[rd]["requests_done"] for rd in socks)
            if done >= len(chats) or time.monotonic() - t0 > 5:
                break
            time.sleep(0.05)
        d = {rd: {k: after[rd][k] - before[rd][k] for k in ("requests_done", "prefix_hit_tokens",
                                                              "prefix_query_tokens", "tokens_prefill")}
             for rd in socks}
        hit = sum(x["prefix_hit_tokens"] for x in d.values())
        query = sum(x["prefix_query_tokens"] for x in d.values())
        s = summarize(res, wall)
        s.update(mode=mode, run=i, load=label, frontend_ready_s=round(ready, 2), per_worker=d,
                 hit_ratio=round(hit / query, 4) if query else None, hit_tokens=hit, query_tokens=query,
                 prefill_tokens=sum(x["tokens_prefill"] for x in d.values()),
                 requests_per_worker=[d[rd]["requests_done"] for rd in sorted(socks)])
        runs.append(s)
        print("  run %d %s %-11s hit ratio %.3f, ttft p50 %.1f ms p99 %.1f ms, per worker %s, wall %.1f s" % (
            i, label, mode, s["hit_ratio"] or 0, s["ttft_p50_ms"], s["ttft_p99_ms"], s["requests_per_worker"], wall),
            flush=True)
        P.stop(name)
    return {"runs": runs, "prompts_per_system": [which.count(k) for k in range(a.system_prompts)]}


# ------------------------------------------------------------------ report ----------

def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def report_overhead(o, a):
    rows = []
    for r in o["rounds"]:
        rows.append([r["load"], r["round"], r["front"], r["ttft_p50_ms"], r["ttft_p99_ms"], r["gap_p50_ms"],
                     r["gap_p99_ms"], r["tpot_p50_ms"], r["tpot_p99_ms"], r["e2e_p50_ms"], r["req_per_s"],
                     r["chunks_per_request"], r["out_tokens_mean"], r["prompt_tokens_mean"],
                     r["front_cpu_ms_per_req"], r["ringlmd_cpu_ms_per_req"]])
    print("\n### 1. Dynamo frontend + ringlm.dynamo (router %s) vs ringlm-http, each round (%d streamed chats, "
          "max_tokens %d, temperature 0)\n" % (o["router_mode"], a.requests, a.max_tokens))
    print(table(["load", "round", "front", "TTFT p50 ms", "TTFT p99 ms", "chunk gap p50 ms", "chunk gap p99 ms",
                 "TPOT p50 ms", "TPOT p99 ms", "e2e p50 ms", "req/s", "chunks/req", "out tok/req", "prompt tok",
                 "front CPU ms/req", "ringlmd CPU ms/req"], rows))
    keys = ["ttft_p50_ms", "ttft_p99_ms", "gap_p50_ms", "gap_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms",
            "req_per_s", "front_cpu_ms_per_req"]
    summary, rows = [], []
    for label, _, _ in a.loads:
        m = {}
        for f in ("ringlm-http", "dynamo"):
            rr = [r for r in o["rounds"] if r["load"] == label and r["front"] == f]
            m[f] = {k: med([r[k] for r in rr]) for k in keys}
            rows.append([label, f] + [m[f][k] for k in keys])
        diff = {k: (round(m["dynamo"][k] - m["ringlm-http"][k], 2)
                    if m["dynamo"][k] is not None and m["ringlm-http"][k] is not None else None) for k in keys}
        rows.append([label, "**dynamo - http**"] + [diff[k] for k in keys])
        summary.append({"load": label, "median": m, "dynamo_minus_http": diff})
    print("\n### 1. summary: median over %d rounds, and Dynamo's difference\n" % a.rounds)
    print(table(["load", "front", "TTFT p50 ms", "TTFT p99 ms", "chunk gap p50 ms", "chunk gap p99 ms",
                 "TPOT p50 ms", "TPOT p99 ms", "e2e p50 ms", "req/s", "front CPU ms/req"], rows))
    print("\nrounds whose first two answers were the same text through both fronts: %d of %d"
          % (o["rounds_with_same_texts"], len(o["rounds"]) // 2))
    o["summary"] = summary


def report_routing(g, a):
    rows = []
    for r in g["runs"]:
        pw = r["per_worker"]
        rows.append([r["run"], r["load"], r["mode"], r["hit_ratio"], r["hit_tokens"], r["query_tokens"],
                     r["prefill_tokens"], r["ttft_p50_ms"], r["ttft_p99_ms"], r["e2e_p50_ms"], r["req_per_s"],
                     " / ".join(str(x) for x in r["requests_per_worker"]),
                     " / ".join("%.3f" % (pw[w]["prefix_hit_tokens"] / pw[w]["prefix_query_tokens"])
                                if pw[w]["prefix_query_tokens"] else "-" for w in sorted(pw)),
                     r["prompt_tokens_mean"]])
    print("\n### 2. KV routing vs round robin, two workers (%d requests over %d system prompts %s, max_tokens %d, "
          "closed loop or Poisson arrivals; a fresh frontend and emptied caches each run)\n"
          % (a.routing_requests, a.system_prompts, g["prompts_per_system"], a.routing_max_tokens))
    print(table(["run", "load", "router", "prefix-hit ratio", "hit tok", "query tok", "prefilled tok", "TTFT p50 ms",
                 "TTFT p99 ms", "e2e p50 ms", "req/s", "requests A / B", "hit ratio A / B", "prompt tok"], rows))
    rows, summary = [], {}
    keys = ("hit_ratio", "ttft_p50_ms", "ttft_p99_ms", "prefill_tokens")
    for label in dict.fromkeys(r["load"] for r in g["runs"]):
        for mode in ("kv", "round-robin"):
            rr = [r for r in g["runs"] if r["mode"] == mode and r["load"] == label]
            m = summary[label + " " + mode] = {k: med([r[k] for r in rr]) for k in keys}
            rows.append([label, mode, len(rr)] + [m[k] for k in keys])
    print("\n### 2. summary: median over runs\n")
    print(table(["load", "router", "runs", "prefix-hit ratio", "TTFT p50 ms", "TTFT p99 ms", "prefilled tok"], rows))
    g["summary"] = summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=1, help="each ringlmd's --threads (default 1)")
    ap.add_argument("--only", choices=["overhead", "routing"], help="run one part only")
    ap.add_argument("--rounds", type=int, default=3, help="part 1: rounds per front and concurrency (default 3)")
    ap.add_argument("--requests", type=int, default=40, help="part 1: requests per round (default 40)")
    ap.add_argument("--concurrency", default="1,2", help="part 1: closed-loop client counts (default 1,2)")
    ap.add_argument("--poisson", default="2.5",
                    help="part 1: open-loop Poisson arrival rates, req/s, run after the closed loops (default 2.5; "
                         "'' for none): two closed-loop clients can phase-lock, these cannot")
    ap.add_argument("--max-tokens", type=int, default=32, help="part 1: max_tokens (default 32)")
    ap.add_argument("--overhead-router", default="kv", choices=["kv", "round-robin"],
                    help="part 1: the frontend's --router-mode (one worker; default kv)")
    ap.add_argument("--routing-requests", type=int, default=48, help="part 2: requests per run (default 48)")
    ap.add_argument("--system-prompts", type=int, default=4, help="part 2: distinct system prompts (default 4)")
    ap.add_argument("--system-sentences", type=int, default=13,
                    help="part 2: rules in each system prompt (default 13: ~600 tokens)")
    ap.add_argument("--routing-max-tokens", type=int, default=8, help="part 2: max_tokens (default 8)")
    ap.add_argument("--routing-concurrency", default="1,3",
                    help="part 2: closed-loop client counts, each a set of runs (default 1,3)")
    ap.add_argument("--routing-rate", type=float, default=0.0,
                    help="part 2: open-loop arrivals per second instead of the closed loop (default 0: closed)")
    ap.add_argument("--routing-rounds", type=int, default=2,
                    help="part 2: runs of each router mode, alternating (default 2)")
    ap.add_argument("--frontend-args", default="",
                    help="part 2: extra flags for dynamo.frontend, one string (e.g. '--no-router-track-active-blocks')")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "out", "dynamo_serve.json"))
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temporary folder (logs, file store)")
    a = ap.parse_args()
    a.concurrency = [int(x) for x in a.concurrency.split(",") if x.strip()]
    a.poisson = [float(x) for x in a.poisson.split(",") if x.strip()]
    a.loads = ([("%d client%s" % (c, "" if c == 1 else "s"), c, 0.0) for c in a.concurrency]
               + [("Poisson %g/s" % r, 1, r) for r in a.poisson])
    a.frontend_args = shlex.split(a.frontend_args)
    a.routing_concurrency = [int(x) for x in a.routing_concurrency.split(",") if x.strip()]
    if (a.rounds < 1 or a.requests < 1 or not a.loads or min(a.concurrency or [1]) < 1 or a.max_tokens < 1
            or min(a.poisson or [1]) <= 0
            or a.routing_requests < 1 or a.system_prompts < 1 or min(a.routing_concurrency or [0]) < 1 or a.routing_rounds < 1
            or a.system_sentences < 1 or a.routing_max_tokens < 1 or a.routing_rate < 0):
        ap.error("counts must be positive")
    if not os.path.exists(a.model):
        sys.exit("no model at %s" % a.model)
    for f in ("ringlmd", "ringlm", "ringlm-http", "libringlm.so"):
        if not os.path.exists(os.path.join(BUILD, f)):
            sys.exit("build/%s is missing: build ringlm first" % f)
    try:
        import dynamo.frontend  # noqa: F401
    except ImportError:
        sys.exit("run this with the Dynamo venv's python (~/.cache/ringlm/dynamo/bin/python)")

    def on_term(sig, frame):
        raise SystemExit("dynamo_serve: signal %d" % sig)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="rl-dynserve-")
    P = Procs(tmp, sys.executable, a.model)
    out = {"model": os.path.basename(a.model), "threads": a.threads, "cpus": os.cpu_count(),
           "args": {k: v for k, v in vars(a).items() if k != "out"}, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    ok = False
    try:
        P.export_hf()
        P.ringlmd("rdA", a.threads)
        P.ringlmd("rdB", a.threads)
        if a.only in (None, "overhead"):
            print("part 1: overhead", flush=True)
            out["overhead"] = overhead(P, a)
        if a.only in (None, "routing"):
            print("part 2: routing", flush=True)
            out["routing"] = routing(P, a)
        ok = True
    except BaseException as e:
        print("\ndynamo_serve failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        for n in list(P.procs):
            tail = P.log_tail(n, 800)
            if tail.strip():
                print("--- %s.log (tail)\n%s" % (n, tail), file=sys.stderr)
        raise
    finally:
        P.close()
        if a.keep_tmp or not ok:
            print("logs kept in %s" % tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if "overhead" in out:
        report_overhead(out["overhead"], a)
    if "routing" in out:
        report_routing(out["routing"], a)
    out["wall_s"] = round(time.monotonic() - t_start, 1)
    print("\nwall %.1f s" % out["wall_s"])
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
