"""The Python client against a real ringlmd serving stories260K: text and ids, the embedded
runtime, many streams from threads and from asyncio tasks, cancel, errors with the runtime's
message, stats, and a client process killed in the middle of a stream."""
import asyncio
import errno
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import ringlm

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def model_files():
    d = os.environ.get("RINGLM_MODELS", os.path.join(REPO, "..", "shared", "models"))
    return os.path.join(d, "stories260K.bin"), os.path.join(d, "tok512.bin")

# llama2.c's published greedy output for this model (tests/test_e2e_model.c holds the rest)
GOLDEN = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


def test_generate_text_and_ids(daemon):
    with ringlm.Client(socket=daemon) as c:
        text = c.generate("Once upon a time", max_tokens=40)
        assert ("Once upon a time" + text).startswith(GOLDEN)
        ids = c.generate("Once upon a time", max_tokens=40, ids=True)
        assert len(ids) == 40 and all(isinstance(i, int) for i in ids)
        assert c.detokenize(ids, prev=c.tokenize("Once upon a time")[-1]) == text
        assert c.info["vocab_size"] == 512 and c.info["backend"] == "cpu"


def test_tokenize_roundtrip(daemon):
    with ringlm.Client(socket=daemon) as c:
        ids = c.tokenize("The cat sat.")
        assert ids[0] == c.info["bos_id"]
        assert c.detokenize(ids[1:], prev=ids[0]) == "The cat sat."
        assert c.tokenize("The cat sat.", add_bos=False) == ids[1:]


def test_embedded_equals_daemon(daemon):
    m, t = model_files()
    with ringlm.Client(socket=daemon) as d, ringlm.Client(model=m, tokenizer=t, runtime_args="--threads 1") as e:
        kw = dict(max_tokens=30, temperature=0.8, top_p=0.9, seed=7)
        assert d.generate("The dog", **kw) == e.generate("The dog", **kw)


def test_speculation_keeps_the_tokens(daemon):
    m, t = model_files()
    with ringlm.Client(socket=daemon) as d, \
            ringlm.Client(model=m, tokenizer=t, runtime_args="--threads 1 --spec ngram") as e:
        for kw in (dict(max_tokens=120), dict(max_tokens=80, temperature=0.9, top_p=0.95, seed=3)):
            want = d.generate("Once upon a time", **kw)
            assert e.generate("Once upon a time", **kw) == want
            assert e.generate("Once upon a time", speculate=False, **kw) == want
        st = e.stats()
        assert st["spec_k"] == 8 and st["spec_accepted"] <= st["spec_drafted"], st


def test_streams_from_many_threads(daemon):
    with ringlm.Client(socket=daemon) as c:
        solo = {s: c.generate("Lily", max_tokens=24, temperature=1.0, seed=s, ids=True) for s in range(4)}
        out, errs = {}, []

        def run(i):
            try:
                s = c.stream("Lily", max_tokens=24, temperature=1.0, seed=i % 4, text=False)
                out[i] = list(s)
                assert s.finish_reason == "length"
            except Exception as e:      # reported below
                errs.append(e)
        th = [threading.Thread(target=run, args=(i,)) for i in range(24)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert not errs
        assert all(out[i] == solo[i % 4] for i in range(24))


def test_asyncio_streams_do_not_block_the_loop(daemon):
    async def main():
        with ringlm.Client(socket=daemon) as c:
            ticks = 0
            stop = asyncio.Event()

            async def ticker():
                nonlocal ticks
                while not stop.is_set():
                    ticks += 1
                    await asyncio.sleep(0.001)
            t = asyncio.create_task(ticker())
            outs = await asyncio.gather(*[c.agenerate("Once upon a time", max_tokens=40) for _ in range(16)])
            pieces = []
            s = await c.astream("Once upon a time", max_tokens=20)
            async for p in s:
                pieces.append(p)
            stop.set()
            await t
            return outs, pieces, s.finish_reason, ticks
    outs, pieces, fin, ticks = asyncio.run(main())
    assert len(set(outs)) == 1 and ("Once upon a time" + outs[0]).startswith(GOLDEN)
    assert outs[0].startswith("".join(pieces)) and fin == "length"
    assert ticks > 5                    # the loop kept running while tasks waited


def test_cancel(daemon):
    with ringlm.Client(socket=daemon) as c:
        s = c.stream("Once upon a time", max_tokens=500, text=False)
        got = []
        for tok in s:
            got.append(tok)
            if len(got) == 3:
                s.cancel()
        assert s.finish_reason == "cancel" and 3 <= len(got) < 500


def test_errors_carry_the_message(daemon):
    with pytest.raises(ringlm.RinglmError) as e:
        ringlm.Client(socket="/nonexistent-dir/ringlm.sock")
    assert e.value.errno == errno.ENOENT and "cannot connect" in str(e.value) and "ringlmd" in str(e.value)
    with ringlm.Client(socket=daemon) as c:
        with pytest.raises(ringlm.RinglmError) as e:     # token id outside the vocabulary
            list(c.stream([1, 99999], max_tokens=4, text=False))
        assert "rejected" in str(e.value)
        with pytest.raises(ringlm.RinglmError) as e:
            c.stream([1, 2], max_tokens=10 ** 9)
        assert e.value.errno == errno.E2BIG and "max_new" in str(e.value)
        with pytest.raises(ringlm.RinglmError):
            c.stream([], max_tokens=4)
        assert c.generate("Still fine", max_tokens=4)    # the client works after errors


def test_grammar_over_the_state_cap_ends_with_what_to_do(capped_daemon):
    """a ringlmd with a small --cons-max-states: a grammar that outgrows it mid-answer ends that
    stream with an error that names the option (errno EOVERFLOW), after the text it had; a free
    stream beside it finishes"""
    with ringlm.Client(socket=capped_daemon) as c:
        s = c.stream("Once upon a time", max_tokens=60, grammar='root ::= [a-zA-Z ,] root "." | "."\n')
        free = c.stream("Once upon a time", max_tokens=20)
        got = []
        with pytest.raises(ringlm.RinglmError) as e:
            for piece in s:
                got.append(piece)
        assert e.value.errno == errno.EOVERFLOW and "--cons-max-states" in str(e.value), str(e.value)
        assert "simplify" in str(e.value) and "\n" not in str(e.value)
        assert got and "".join(got).startswith(", there was")
        text = "".join(free)
        assert text and GOLDEN[len("Once upon a time"):].startswith(text) and free.finish_reason == "length"


def test_stats(daemon):
    with ringlm.Client(socket=daemon) as c:
        c.generate("Hello", max_tokens=8)
        st = c.stats()
        assert st["model"] and st["requests_done"] >= 1 and st["tokens_out"] >= 8, st


def test_client_killed_mid_stream(daemon):
    code = ("import sys, ringlm\n"
            "c = ringlm.Client(socket=sys.argv[1])\n"
            "s = c.stream('Once upon a time', max_tokens=500, text=False)\n"
            "for i, t in enumerate(s):\n"
            "    if i == 5:\n"
            "        print('streaming', flush=True)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "clients", "python"))
    p = subprocess.Popen([sys.executable, "-c", code, daemon], stdout=subprocess.PIPE, env=env)
    assert p.stdout.readline().strip() == b"streaming"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    # the runtime notices, frees the sequence, and keeps serving others
    with ringlm.Client(socket=daemon) as c:
        text = c.generate("Once upon a time", max_tokens=20)
        assert ("Once upon a time" + text).startswith(GOLDEN[:60])
        for _ in range(100):
            st = c.stats()
            if st["running"] == 0 and st["active_requests"] == 0:
                break
            time.sleep(0.05)
        assert st["running"] == 0 and st["active_requests"] == 0, st
        assert st["detaches"] >= 1


def test_logprobs(daemon):
    """Each token's log-probability and its alternatives (the C side checks them against the
    float64 reference in test_e2e_model): greedy tokens are their own most likely alternative,
    probabilities at most 1 in total, nothing for a stream that did not ask"""
    import math
    with ringlm.Client(socket=daemon) as c:
        s = c.stream("Once upon a time", max_tokens=12, text=False, top_logprobs=3)
        ids = list(s)
        assert len(s.logprobs) == len(ids) == 12
        for tok, (lp, top) in zip(ids, s.logprobs):
            assert lp <= 0 and len(top) == 3 and top[0][0] == tok and abs(top[0][1] - lp) < 1e-6
            assert top[0][1] >= top[1][1] >= top[2][1] and sum(math.exp(x) for _, x in top) <= 1.0 + 1e-5
        plain = c.stream("Once upon a time", max_tokens=4, text=False)
        assert list(plain) == ids[:4] and plain.logprobs == []
        with pytest.raises(ringlm.RinglmError):
            c.stream("Once upon a time", top_logprobs=21)


def test_prompt_logprobs(daemon):
    """Scoring a text: max_tokens 0 with prompt_logprobs gives every prompt token's after the
    first, in order, and no output"""
    with ringlm.Client(socket=daemon) as c:
        ids = c.tokenize("Once upon a time")
        s = c.stream(ids, max_tokens=0, text=False, prompt_logprobs=True, top_logprobs=2)
        assert list(s) == [] and s.finish_reason == "length"
        assert [(p, t) for p, t, _ in s.prompt_logprobs] == [(i, ids[i]) for i in range(1, len(ids))]
        assert all(lp <= 0 and len(top) == 2 for _, _, (lp, top) in s.prompt_logprobs)


def test_deterministic(daemon):
    """deterministic=True: the same tokens and log-probabilities whatever runs beside the
    request (a thread keeps other streams going); the runtime's info says a request may ask
    (1; 2 when ringlmd runs --deterministic)"""
    with ringlm.Client(socket=daemon) as c:
        assert c.info["deterministic"] == 1
        kw = dict(max_tokens=24, text=False, temperature=0.8, seed=7, top_logprobs=2, deterministic=True)
        alone = c.stream("Once upon a time, there was a dog", **kw)
        want = (list(alone), alone.logprobs)
        stop = threading.Event()

        def load():
            k = 0
            while not stop.is_set():
                k += 1
                c.generate("The bird %d" % k, max_tokens=5 + k % 20, temperature=0.7, seed=k)

        th = threading.Thread(target=load)
        th.start()
        try:
            for _ in range(4):
                s = c.stream("Once upon a time, there was a dog", **kw)
                assert (list(s), s.logprobs) == want
        finally:
            stop.set()
            th.join()
