"""ringlm as NVIDIA Dynamo's worker, end to end on one machine (issue 61, part 2): the real Dynamo
1.6.1 frontend (KV router, file discovery, TCP request plane, ZMQ event plane) on a free loopback
port, in front of two ringlmd on SmolLM2 (each --threads 1, --kv-events on a port of its own),
each with its `python -m ringlm.dynamo` worker; driven by the `openai` package from the Dynamo
venv (dynamo_openai_driver.py). Every process runs in a session of its own and is killed, with its
group, at the end; every wait is bounded.

- chat and completions, streamed and not, come back through Dynamo with ringlm's greedy tokens
  (the same text as ringlm gives directly for the same prompt ids); an option ringlm cannot
  honour is refused by name (HTTP 400);
- of requests that extend one of two long prompts, >= 90 % land on the worker that served their
  prompt (told apart by each ringlmd's requests_done and prefix_hit_tokens);
- a client that disconnects mid-stream has its request cancelled inside ringlmd;
- kill -9 of one worker (its ringlmd and its Dynamo process) leaves the other serving every new
  request within 30 s.

The frontend reads the HF-style folder `ringlm export-hf` writes from the GGUF. Skipped, saying
why, without the Dynamo venv (.ci/dynamo) or the model (.ci/models)."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import REPO

import ringlm

BUILD = os.path.join(REPO, "build")
RINGLM = os.path.join(BUILD, "ringlm")
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_NAME = "smollm2-ringlm"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def free_port_i16():
    """a free loopback port below 32768: Dynamo 1.6.1 reads DYN_SYSTEM_PORT as an i16"""
    import random
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


def dynamo_python():
    r = subprocess.run(["bash", os.path.join(REPO, ".ci", "dynamo"), "--dir"], capture_output=True, text=True)
    d = r.stdout.strip()
    py = os.path.join(d, "bin", "python")
    return py if d and os.path.exists(os.path.join(d, ".ok")) and os.path.exists(py) else None


def hf_dir(model, tmp):
    """the frontend's folder for the model, as `ringlm export-hf` writes it"""
    out = os.path.join(tmp, "hf")
    r = subprocess.run([RINGLM, "export-hf", model, out], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "ringlm export-hf failed: " + r.stderr
    return out


class Cluster:
    def __init__(self, tmp, py, model, hf):
        self.tmp, self.py, self.model, self.hf = tmp, py, model, hf
        self.procs = []                       # (name, Popen), each the leader of its own session
        self.env = dict(os.environ, DYN_FILE_KV=os.path.join(tmp, "kv"), DYN_LOG="warn", HF_HUB_OFFLINE="1",
                        TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.path.join(REPO, "clients", "python"),
                        RINGLM_LIB=os.path.join(BUILD, "libringlm.so"), DYN_SELF_HOST_METADATA="0",
                        XDG_CACHE_HOME=os.path.join(tmp, "cache"), HOME=tmp,
                        DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS="1")
        self.workers = []                     # {"sock", "ep", "rd", "dyn", "client"}
        self.driver = None

    def spawn(self, name, argv, env=None):
        log = open(os.path.join(self.tmp, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env or self.env, start_new_session=True, cwd=self.tmp)
        self.procs.append((name, p))
        return p

    def log_tail(self, name, n=3000):
        try:
            with open(os.path.join(self.tmp, name + ".log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def add_worker(self, i, extra=()):
        sock = os.path.join(self.tmp, "w%d.sock" % i)
        ep = "tcp://127.0.0.1:%d" % free_port()
        rd = self.spawn("ringlmd%d" % i, [os.path.join(BUILD, "ringlmd"), "--model", self.model, "--threads", "1",
                                          "--kv-events", ep, "--socket", sock, "--quiet"] + list(extra))
        client = None
        t0 = time.monotonic()
        while client is None and time.monotonic() - t0 < 60:
            if rd.poll() is not None:
                raise RuntimeError("ringlmd %d exited: %s" % (i, self.log_tail("ringlmd%d" % i)))
            if os.path.exists(sock):
                try:
                    client = ringlm.Client(socket=sock)
                except ringlm.RinglmError:
                    pass
            time.sleep(0.05)
        assert client, "ringlmd %d did not come up in 60 s" % i
        mport = free_port_i16()
        env = dict(self.env, DYN_SYSTEM_PORT=str(mport), DYN_SYSTEM_HOST="127.0.0.1", DYN_SYSTEM_ENABLED="true")
        dyn = self.spawn("dynamo%d" % i, [self.py, "-m", "ringlm.dynamo", "--socket", sock, "--hf-dir", self.hf,
                                          "--model-name", MODEL_NAME, "--kv-events", ep,
                                          "--discovery-backend", "file", "--request-plane", "tcp",
                                          "--event-plane", "zmq"], env=env)
        self.workers.append({"i": i, "sock": sock, "ep": ep, "rd": rd, "dyn": dyn, "client": client,
                             "metrics": "http://127.0.0.1:%d/metrics" % mport})

    def start_frontend(self):
        self.port = free_port()
        self.fe = self.spawn("frontend", [self.py, "-m", "dynamo.frontend", "--router-mode", "kv",
                                          "--discovery-backend", "file", "--request-plane", "tcp",
                                          "--event-plane", "zmq", "--http-host", "127.0.0.1",
                                          "--http-port", str(self.port)])
        self.driver = subprocess.Popen([self.py, os.path.join(HERE, "dynamo_openai_driver.py"),
                                        "http://127.0.0.1:%d/v1" % self.port, MODEL_NAME, self.hf],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=open(os.path.join(self.tmp, "driver.log"), "wb"),
                                       env=self.env, text=True, start_new_session=True)
        self.procs.append(("driver", self.driver))

    def ask(self, cmd, timeout=90):
        """one driver command; its JSON answer (bounded: the driver's own calls time out first)"""
        self.send(cmd)
        return self.recv(cmd, timeout)

    def send(self, cmd):
        self.driver.stdin.write(json.dumps(cmd) + "\n")
        self.driver.stdin.flush()

    def recv(self, cmd, timeout=90):
        import select
        r, _, _ = select.select([self.driver.stdout], [], [], timeout)
        assert r, "the driver did not answer %s in %d s; frontend log:\n%s" % (cmd["op"], timeout,
                                                                               self.log_tail("frontend"))
        line = self.driver.stdout.readline()
        assert line, "the driver exited: " + self.log_tail("driver")
        return json.loads(line)

    def stats(self, w):
        return w["client"].stats()

    def kill_worker(self, w):
        for p in (w["dyn"], w["rd"]):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in (w["dyn"], w["rd"]):
            p.wait(timeout=10)
        try:
            w["client"].close()
        except Exception:
            pass
        w["dead"] = True

    def close(self):
        if self.driver and self.driver.stdin:
            try:
                self.driver.stdin.close()
            except OSError:
                pass
        for _, p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for _, p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for _, p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)    # the group too: nothing of it lives on
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for w in self.workers:
            if not w.get("dead"):
                try:
                    w["client"].close()
                except Exception:
                    pass


@pytest.fixture(scope="module")
def cluster():
    import sys
    sys.path.insert(0, os.path.join(REPO, "clients"))
    from real_models import REAL_WHY, real_model
    py = dynamo_python()
    if not py:
        pytest.skip("the Dynamo venv is missing: .ci/dynamo could not make it (offline?); make test runs it")
    model = real_model(SMOL)
    if not model:
        pytest.skip(SMOL + " " + REAL_WHY)
    tmp = tempfile.mkdtemp(prefix="rl-dyn-")
    hf = hf_dir(model, tmp)
    c = Cluster(tmp, py, model, hf)
    try:
        t0 = time.monotonic()
        c.add_worker(1)
        c.add_worker(2)
        c.start_frontend()
        # ready: the model listed and both workers registered (the file store holds an instance each)
        ok = False
        while time.monotonic() - t0 < 90:
            for name, p in c.procs:
                assert p.poll() is None, "%s exited:\n%s" % (name, c.log_tail(name))
            if len(instances(c)) >= 2:
                r = c.ask({"op": "completion", "prompt": "Hello", "max_tokens": 1}, timeout=30)
                if r["ok"]:
                    ok = True
                    break
            time.sleep(0.3)
        assert ok, "the frontend did not serve in 90 s:\n" + c.log_tail("frontend") + c.log_tail("dynamo1")
        c.ready_s = time.monotonic() - t0
        print("cluster ready in %.1f s" % c.ready_s)
        yield c
    finally:
        c.close()
        if os.environ.get("RINGLM_TEST_KEEP") is None:
            subprocess.run(["rm", "-rf", tmp])


def instances(c):
    """the generate endpoint's instances the file store lists (v1/instances/NS%2Fbackend%2Fgenerate%2FID)"""
    d = os.path.join(c.tmp, "kv", "v1", "instances")
    try:
        return [f for f in os.listdir(d) if f.startswith("dynamo%2Fbackend%2Fgenerate%2F")]
    except OSError:
        return []


def delta(c, before):
    """per live worker: (requests_done, prefix_hit_tokens, tokens_out) grown since before"""
    out = {}
    for w in c.workers:
        if w.get("dead"):
            continue
        s = c.stats(w)
        b = before[w["i"]]
        out[w["i"]] = (s["requests_done"] - b["requests_done"], s["prefix_hit_tokens"] - b["prefix_hit_tokens"],
                       s["tokens_out"] - b["tokens_out"])
    return out


def snap(c):
    return {w["i"]: c.stats(w) for w in c.workers if not w.get("dead")}


def served_by(c, before, timeout=5.0):
    """the worker whose requests_done grew by one (waiting a moment for the counter)"""
    t0 = time.monotonic()
    while True:
        d = delta(c, before)
        grew = [i for i, v in d.items() if v[0] > 0]
        if grew or time.monotonic() - t0 > timeout:
            return (grew[0] if len(grew) == 1 else None), d
        time.sleep(0.02)


CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
COMPLETION = "The three primary colours are"


def test_chat_and_completions_carry_ringlms_tokens(cluster):
    c = cluster
    chat_ids = c.workers[0]["client"].chat_prompt(CHAT)
    comp_ids = c.ask({"op": "tokenize", "text": COMPLETION})["ids"]
    # ringlm directly, on both workers; the second run of each is what a cached prompt gives (greedy output
    # may differ between a cold prefill and a prefix-cache hit), and every Dynamo request below is a hit
    want = {}
    for name, ids in (("chat", chat_ids), ("completion", comp_ids)):
        outs = set()
        for w in c.workers:
            for _ in range(2):
                toks = w["client"].generate(ids, 24, temperature=0.0, ids=True)
            outs.add(tuple(toks))
        assert len(outs) == 1, "the two workers disagree on %s: %s" % (name, outs)
        toks = list(outs.pop())
        want[name] = (c.workers[0]["client"].detokenize([t for t in toks if t != c.workers[0]["client"].info["eos_id"]]),
                      len(toks))
    for op, prompt in (("chat", {"messages": CHAT}), ("completion", {"prompt": COMPLETION})):
        for stream in (False, True):
            r = c.ask(dict(op=op, max_tokens=24, stream=stream, **prompt))
            assert r["ok"], r
            text, n = want[op]
            assert r["text"].strip() == text.strip(), (op, stream, r["text"], text)
            assert r["usage"] and r["usage"]["completion_tokens"] == n, (op, stream, r["usage"], n)
            plen = len(chat_ids if op == "chat" else comp_ids)
            assert r["usage"]["prompt_tokens"] == plen, (op, stream, r["usage"], plen)
            if stream:
                assert r["chunks"] >= 2, r
    # stop strings are the frontend's: the text ends before the first one, finish_reason "stop"
    words = [w for w in want["completion"][0].split() if w.isalpha() and len(w) > 3]
    if words:
        r = c.ask({"op": "completion", "prompt": COMPLETION, "max_tokens": 24, "extra": {"stop": [words[0]]}})
        assert r["ok"] and r["finish_reason"] == "stop", r
        assert r["text"] == want["completion"][0][:want["completion"][0].index(words[0])], (r, words[0])
        print("greedy completion %r; with stop=[%r]: %r" % (want["completion"][0], words[0], r["text"]))
    # what ringlm cannot honour is refused by name
    for extra, name in (({"presence_penalty": 0.5}, "presence_penalty"), ({"frequency_penalty": 0.3}, "frequency_penalty"),
                        ({"n": 2}, "n"), ({"logprobs": True}, "logprobs")):
        r = c.ask({"op": "chat", "messages": CHAT, "max_tokens": 4, "extra": extra})
        assert not r["ok"] and r["status"] == 400 and name in r["error"], (extra, r)
    # sampling options reach ringlm: the same seed, the same answer
    a = c.ask({"op": "completion", "prompt": COMPLETION, "max_tokens": 12, "temperature": 0.9,
               "extra": {"seed": 7, "top_p": 0.9}})
    b = c.ask({"op": "completion", "prompt": COMPLETION, "max_tokens": 12, "temperature": 0.9,
               "extra": {"seed": 7, "top_p": 0.9}})
    assert a["ok"] and b["ok"] and a["text"] == b["text"], (a, b)


def long_prompt(k):
    topics = [("the lighthouse keeper", "storms", "a small island", "the old brass lamp"),
              ("the clockmaker", "gears", "a mountain village", "the cathedral bell")]
    who, what, where, thing = topics[k]
    s = ("This is the story of %s who lived on %s and cared about %s and %s. " % (who, where, what, thing))
    body = []
    for j in range(21):
        body.append("On day %d, %s thought about %s, walked around %s and wrote a note about %s. "
                    % (j + 1, who, what, where, thing))
    return s + "".join(body)


def test_kv_router_sends_extensions_to_their_prompts_worker(cluster):
    """prompt 0 goes through Dynamo (the router picks its worker), prompt 1 straight into the other
    ringlmd (the router hears of it only through that ringlmd's KV events): their extensions
    must follow"""
    c = cluster
    home = {}
    p0 = long_prompt(0)
    n = len(c.ask({"op": "tokenize", "text": p0})["ids"])
    assert 500 <= n <= 1000, n
    b = snap(c)
    r = c.ask({"op": "completion", "prompt": p0, "max_tokens": 1})
    assert r["ok"], r
    home[0], d = served_by(c, b)
    assert home[0], d
    other = next(w for w in c.workers if w["i"] != home[0])
    ids1 = c.ask({"op": "tokenize", "text": long_prompt(1)})["ids"]
    assert 500 <= len(ids1) <= 1000, len(ids1)
    other["client"].generate(ids1, 1, temperature=0.0, ids=True)
    home[1] = other["i"]
    print("long prompts served by workers %s" % home)
    time.sleep(1.0)                              # the KV events reach the router
    hits, total, log = 0, 0, []
    for j in range(10):
        k = j % 2
        b = snap(c)
        r = c.ask({"op": "completion", "prompt": long_prompt(k) + " Question %d: what happened next?" % j,
                   "max_tokens": 1})
        assert r["ok"], r
        w, d = served_by(c, b)
        total += 1
        hits += (w == home[k])
        log.append((k, w, d.get(w, (0, 0, 0))[1] if w else None))
    print("extensions (prompt, worker, prefix-hit tokens): %s" % log)
    assert hits >= 0.9 * total, "only %d of %d extensions on their prompt's worker: %s" % (hits, total, log)
    for k, w, hit in log:
        if w == home[k]:
            assert hit >= 480, log           # served from the cache
    c.home = home


def test_client_disconnect_cancels_inside_ringlmd(cluster):
    c = cluster
    b = snap(c)
    r = c.ask({"op": "disconnect", "messages": [{"role": "user", "content": "Count from 1 to 1000, separated by commas."}],
               "max_tokens": 600, "chunks": 3})
    assert r["ok"] and r["got"] == 3, r
    t_close = time.monotonic()
    # running back to 0 on every worker, the request counted done, tokens no longer growing
    while True:
        st = snap(c)
        d = delta(c, b)
        if all(s["running"] == 0 for s in st.values()) and sum(v[0] for v in d.values()) >= 1:
            break
        assert time.monotonic() - t_close < 5, "still running 5 s after the client left: %s" % d
        time.sleep(0.02)
    settle = time.monotonic() - t_close
    time.sleep(1.0)
    d2 = delta(c, b)
    out = sum(v[2] for v in d2.values())
    assert d2 == d, "tokens still growing after the cancel: %s then %s" % (d, d2)
    assert out < 200, "%d tokens made for a client that left after 3" % out
    print("cancelled %.0f ms after the disconnect, %d tokens made" % (1000 * settle, out))


def scrape(url):
    """the dynamo_component_* samples of a worker's /metrics: {name: value}"""
    import urllib.request
    out = {}
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("dynamo_component_") and "{" in line:
                name = line[:line.index("{")]
                try:
                    out[name] = float(line.rsplit(" ", 1)[1])
                except ValueError:
                    pass
    return out


def test_worker_registers_ringlms_pool_and_publishes_its_load(cluster):
    """the model card holds ringlmd's block size and pool; the worker's dynamo_component_* gauges
    (ComponentSnapshot) follow ringlm's stats"""
    c = cluster
    cards = []
    d = os.path.join(c.tmp, "kv", "v1", "mdc")
    for f in os.listdir(d):
        with open(os.path.join(d, f)) as fh:
            cards.append(json.load(fh)["card_json"])
    assert len(cards) == 2, cards
    for w in c.workers:
        st = c.stats(w)
        for card in cards:
            assert card["kv_cache_block_size"] == st["block_size"], card
            assert card["runtime_config"]["total_kv_blocks"] == st["kv_blocks_total"], card["runtime_config"]
        t0 = time.monotonic()
        while True:
            m = scrape(w["metrics"])
            st = c.stats(w)
            want_hit = st["prefix_hit_tokens"] / st["prefix_query_tokens"]
            if (m.get("dynamo_component_total_blocks") == st["kv_blocks_total"]
                    and abs(m.get("dynamo_component_kv_cache_hit_rate", -1) - want_hit) < 0.01):
                break
            assert time.monotonic() - t0 < 5, (m, want_hit, st["kv_blocks_total"])
            time.sleep(0.1)
        assert 0 <= m["dynamo_component_gpu_cache_usage_percent"] <= 1, m


def test_worker_leaves_when_its_ringlmd_dies(cluster):
    """a third worker whose ringlmd is killed: its Dynamo process unregisters and exits by itself"""
    c = cluster
    n0 = len(instances(c))
    c.add_worker(3)
    w = c.workers[-1]
    t0 = time.monotonic()
    while len(instances(c)) <= n0:
        assert w["dyn"].poll() is None, c.log_tail("dynamo3")
        assert time.monotonic() - t0 < 60, "worker 3 did not register in 60 s"
        time.sleep(0.1)
    os.killpg(w["rd"].pid, signal.SIGKILL)
    w["rd"].wait(timeout=10)
    t_kill = time.monotonic()
    try:
        w["dyn"].wait(timeout=15)
    except subprocess.TimeoutExpired:
        raise AssertionError("worker 3 still running 15 s after its ringlmd died:\n" + c.log_tail("dynamo3"))
    exited = time.monotonic() - t_kill
    w["dead"] = True
    try:
        w["client"].close()
    except Exception:
        pass
    assert len(instances(c)) == n0, instances(c)
    print("worker 3 left %.1f s after its ringlmd was killed (rc %s)" % (exited, w["dyn"].returncode))


def test_kill_one_worker_the_other_serves(cluster):
    c = cluster
    home = getattr(c, "home", {0: 1, 1: 1})
    victim = next(w for w in c.workers if w["i"] == home[0])
    other = next(w for w in c.workers if w is not victim and not w.get("dead"))
    c.kill_worker(victim)
    t_kill = time.monotonic()
    b = snap(c)
    results = []             # (seconds since the kill, ok, seconds it took, instances listed[, status, error])
    streak = 0
    j = 0
    # until the file store has dropped the dead worker (its lease lapsed) and 5 requests in a row went through
    while streak < 5 or len(instances(c)) > 1:
        assert time.monotonic() - t_kill < 30, "not served reliably 30 s after the kill: %s" % results
        r = c.ask({"op": "completion", "prompt": long_prompt(j % 2) + " After the kill %d:" % j, "max_tokens": 2,
                   "timeout": 10}, timeout=40)
        results.append((round(time.monotonic() - t_kill, 2), r["ok"], round(r.get("s", 0), 2), len(instances(c)))
                       + (() if r["ok"] else (r.get("status"), r.get("error", "")[:60])))
        streak = streak + 1 if r["ok"] else 0
        j += 1
        time.sleep(0.1 if r["ok"] else 0.3)
    recovered = time.monotonic() - t_kill
    # from then on, every request is served, by the survivor
    for k in range(10):
        r = c.ask({"op": "chat", "messages": [{"role": "user", "content": "Say hi number %d." % k}], "max_tokens": 4},
                  timeout=40)
        assert r["ok"], (r, results)
    d = delta(c, b)
    assert d[other["i"]][0] >= 10, d
    print("after kill -9 of worker %d: %s; every request served from %.1f s on" % (victim["i"], results, recovered))


def test_sigterm_unregisters_drains_and_exits(cluster):
    """a rolling update loses no request: SIGTERM to the (last) worker's Dynamo process while it
    streams; it leaves the file store at once, the stream still comes back whole, then it exits"""
    c = cluster
    w = next(w for w in c.workers if not w.get("dead"))
    n0 = len(instances(c))
    b = c.stats(w)
    cmd = {"op": "completion", "prompt": "1, 2, 3, 4, 5,", "max_tokens": 500, "stream": True}
    c.send(cmd)
    t0 = time.monotonic()
    while c.stats(w)["tokens_out"] - b["tokens_out"] < 20:
        assert time.monotonic() - t0 < 20, "the stream did not start"
        time.sleep(0.02)
    w["dyn"].send_signal(signal.SIGTERM)
    t_term = time.monotonic()
    while len(instances(c)) >= n0:
        assert time.monotonic() - t_term < 5, "still registered 5 s after SIGTERM"
        time.sleep(0.05)
    unreg = time.monotonic() - t_term
    r = c.recv(cmd, timeout=120)
    assert r["ok"] and r["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 500, r
    w["dyn"].wait(timeout=30)
    exited = time.monotonic() - t_term
    assert w["dyn"].returncode is not None
    print("SIGTERM: unregistered after %.2f s, the stream finished whole (500 tokens), exited after %.1f s (rc %d)"
          % (unreg, exited, w["dyn"].returncode))


def test_an_overloaded_ringlmd_is_a_503_through_dynamo():
    """A worker whose ringlmd runs one sequence at a time (--max-seqs 1) and ends a request that
    waited 100 ms unadmitted (--max-queue-ms, -ETIME): while one request runs, a second through
    Dynamo's frontend is answered 503 (the worker raises HttpError 503; streamed, the frontend has
    sent its 200 already and gives an error chunk with code 503), and the first completes."""
    import http.client
    import sys
    import threading
    sys.path.insert(0, os.path.join(REPO, "clients"))
    from real_models import REAL_WHY, real_model
    py = dynamo_python()
    if not py:
        pytest.skip("the Dynamo venv is missing: .ci/dynamo could not make it (offline?); make test runs it")
    model = real_model(SMOL)
    if not model:
        pytest.skip(SMOL + " " + REAL_WHY)
    tmp = tempfile.mkdtemp(prefix="rl-dyn-ov-")
    c = Cluster(tmp, py, model, hf_dir(model, tmp))

    def post(body):
        h = http.client.HTTPConnection("127.0.0.1", c.port, timeout=90)
        h.request("POST", "/v1/completions", json.dumps(dict(model=MODEL_NAME, **body)),
                  {"Content-Type": "application/json"})
        return h, h.getresponse()
    try:
        c.add_worker(1, ["--max-seqs", "1", "--max-queue-ms", "100"])
        c.start_frontend()
        t0, ok = time.monotonic(), False
        while not ok and time.monotonic() - t0 < 90:
            for name, p in c.procs:
                assert p.poll() is None, "%s exited:\n%s" % (name, c.log_tail(name))
            ok = bool(instances(c)) and c.ask({"op": "completion", "prompt": "Hello", "max_tokens": 1}, timeout=30)["ok"]
            time.sleep(0.1 if ok else 0.3)
        assert ok, "the frontend did not serve in 90 s:\n" + c.log_tail("frontend") + c.log_tail("dynamo1")
        w = c.workers[0]
        for stream in (False, True):
            first = {}

            def run_first():
                h, r = post({"prompt": "Once upon a time", "max_tokens": 200, "stream": stream})  # ~100 tokens
                first["status"], first["body"] = r.status, r.read().decode()
                h.close()
            t = threading.Thread(target=run_first)
            t.start()
            t1 = time.monotonic()
            while c.stats(w)["running"] < 1 and time.monotonic() - t1 < 30:
                time.sleep(0.01)
            assert c.stats(w)["running"] == 1
            h, r = post({"prompt": "Hello there", "max_tokens": 5, "stream": stream})
            body = r.read().decode()
            h.close()
            if stream:
                assert r.status == 200 and '"code":503' in body, (r.status, body)
            else:
                assert r.status == 503, (r.status, body)
            t.join(120)
            assert first["status"] == 200 and "error" not in first["body"], first
    finally:
        c.close()
        if os.environ.get("RINGLM_TEST_KEEP") is None:
            subprocess.run(["rm", "-rf", tmp])
