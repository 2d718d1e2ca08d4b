"""ringlm-http driven by real clients: curl (plain and server-sent events), the `openai`
Python package when it is installed (.ci/pylibs), and raw sockets for what misbehaving clients do: bad JSON,
oversized bodies, a client that disconnects mid-stream, slow-loris and hundreds of idle
connections, none of which may stall another stream."""
import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest

BUILD = os.path.join(os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")), "build")

GOLDEN = ", there was a little girl named Lily. She loved to play outside in the park."


def curl(*args, data=None):
    cmd = ["curl", "-sS", "-m", "30", "-w", "\n%{http_code}"] + list(args)
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    r = subprocess.run(cmd, input=(data if isinstance(data, bytes) else (data or "").encode()),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    body, _, code = r.stdout.decode().rpartition("\n")
    return int(code), body


def sse_events(body):
    out = []
    for line in body.splitlines():
        if line.startswith("data: "):
            d = line[6:]
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


def metric(url, name, labels=""):
    _, body = curl(url + "/metrics")
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), body, re.M)
    return float(m.group(1)) if m else None


def openai_package():
    """the `openai` package, or a skip that says where it comes from: Debian 12 has none, and
    `make test` fetches pinned wheels of it (.ci/pylibs) into the cache that tests/run.sh puts on
    PYTHONPATH"""
    return pytest.importorskip("openai", reason="the openai package is not installed (make test fetches it "
                               "with .ci/pylibs; offline it cannot)")


def test_completions_and_sse_with_curl(stories):
    code, body = curl(stories.url + "/v1/completions",
                      data=json.dumps({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}))
    assert code == 200, body
    j = json.loads(body)
    text = j["choices"][0]["text"]
    assert GOLDEN.startswith(text[:60]) and j["choices"][0]["finish_reason"] == "length"
    assert j["usage"]["completion_tokens"] == 20 and j["object"] == "text_completion"
    code, body = curl("-N", stories.url + "/v1/completions",
                      data=json.dumps({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "stream": True}))
    ev = sse_events(body)
    assert code == 200 and ev[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == text
    assert ev[-2]["choices"][0]["finish_reason"] == "length" and ev[-2]["usage"]["completion_tokens"] == 20
    # token ids as the prompt, and stop strings (cut before the stop, finish "stop")
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": ["Lily", "zzz"]}))
    j = json.loads(body)
    assert j["choices"][0]["text"] == ", there was a little girl named " and j["choices"][0]["finish_reason"] == "stop"
    code, body = curl("-N", stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": "Lily", "stream": True}))
    ev = sse_events(body)
    assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == ", there was a little girl named "


def test_models_health_metrics(stories):
    code, body = curl(stories.url + "/v1/models")
    assert code == 200 and json.loads(body)["data"][0]["id"] == "stories260K.bin"
    code, body = curl(stories.url + "/health")
    assert code == 200 and json.loads(body)["status"] == "ok"
    curl(stories.url + "/v1/completions", data=json.dumps({"prompt": "Hi", "max_tokens": 5}))
    for name in ("ringlm_http_ttft_seconds_count", "ringlm_http_inter_token_seconds_count", "ringlm_queue_depth",
                 "ringlm_running_sequences", "ringlm_kv_blocks_used", "ringlm_prefix_hit_ratio",
                 "ringlm_tokens_in_total", "ringlm_tokens_out_total"):
        assert metric(stories.url, name) is not None, name
    assert metric(stories.url, "ringlm_http_ttft_seconds_count") >= 1
    assert metric(stories.url, "ringlm_http_requests_total", '{endpoint="completions",status="2xx"}') >= 1


def test_bad_requests_get_clear_errors(stories):
    cases = [
        ("/v1/completions", b"{bad", 400, "not a JSON object"),
        ("/v1/completions", json.dumps({"prompt": "x", "n": 17}).encode(), 400, "'n'"),
        ("/v1/completions", json.dumps({"prompt": "x", "temperature": 7}).encode(), 400, "temperature"),
        ("/v1/completions", json.dumps({"prompt": [1, 99999]}).encode(), 400, "token id"),
        ("/v1/completions", json.dumps({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}).encode(), 400, "stop"),
        ("/v1/completions", b"x" * (2 << 20), 413, "over"),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(), 400,
         "/v1/completions"),
        ("/v2/nothing", b"{}", 404, "no route"),
    ]
    for path, data, want, words in cases:
        code, body = curl(stories.url + path, data=data)
        assert code == want, (path, body)
        assert words in json.loads(body)["error"]["message"], body
    code, body = curl(stories.url + "/v1/completions")           # GET
    assert code == 405
    assert metric(stories.url, "ringlm_http_errors_total", '{kind="bad_json"}') >= 1
    assert metric(stories.url, "ringlm_http_errors_total", '{kind="too_large"}') >= 1
    code, _ = curl(stories.url + "/v1/completions", data=json.dumps({"prompt": "Still", "max_tokens": 3}))
    assert code == 200                                              # nothing broke


def test_chat_with_a_template(mistral):
    req = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell a story."}],
           "max_tokens": 12, "temperature": 0}
    code, body = curl(mistral.url + "/v1/chat/completions", data=json.dumps(req))
    assert code == 200, body
    j = json.loads(body)
    assert j["object"] == "chat.completion" and j["choices"][0]["message"]["role"] == "assistant"
    # the prompt is Mistral's format, tokenized with control tokens parsed and no extra BOS
    ids = subprocess.run([os.path.join(BUILD, "ringlm"), "tokenize", "--model", mistral.model_path, "--special",
                          "--no-bos", "--text", "<s>[INST] Be brief.\n\nTell a story. [/INST]"],
                         stdout=subprocess.PIPE, check=True).stdout.split()
    assert j["usage"]["prompt_tokens"] == len(ids)
    code, body = curl("-N", mistral.url + "/v1/chat/completions", data=json.dumps(dict(req, stream=True)))
    ev = sse_events(body)
    assert ev[0]["object"] == "chat.completion.chunk" and ev[0]["choices"][0]["delta"].get("role") == "assistant"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-1]) == j["choices"][0]["message"]["content"]
    code, body = curl(mistral.url + "/v1/chat/completions", data=json.dumps(
        {"messages": [{"role": "assistant", "content": "x"}]}))
    assert code == 400 and "alternate" in json.loads(body)["error"]["message"]


def test_chat_families(family):
    """Qwen3 (ChatML), Phi-3 and Gemma 3 models stream through ringlmd and the HTTP front with
    their family's template"""
    req = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
           "max_tokens": 8, "temperature": 0}
    code, body = curl(family.url + "/v1/chat/completions", data=json.dumps(req))
    assert code == 200, body
    j = json.loads(body)
    text = {"chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
            "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n",
            "gemma": "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"}[family.chat]
    ids = subprocess.run([os.path.join(BUILD, "ringlm"), "tokenize", "--model", family.model_path, "--special",
                          "--no-bos", "--text", text], stdout=subprocess.PIPE, check=True).stdout.split()
    assert j["usage"]["prompt_tokens"] == len(ids)
    assert j["usage"]["completion_tokens"] >= 1
    code, body = curl("-N", family.url + "/v1/chat/completions", data=json.dumps(dict(req, stream=True)))
    ev = sse_events(body)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-1]) == j["choices"][0]["message"]["content"]


def test_openai_package(stories, mistral):
    openai = openai_package()
    c = openai.OpenAI(base_url=stories.url + "/v1", api_key="unused")
    r = c.completions.create(model="stories260K.bin", prompt="Once upon a time", max_tokens=20, temperature=0)
    text = r.choices[0].text
    assert GOLDEN.startswith(text[:60])
    parts = [ch.choices[0].text for ch in c.completions.create(model="x", prompt="Once upon a time", max_tokens=20,
                                                                temperature=0, stream=True)]
    assert "".join(parts) == text
    m = openai.OpenAI(base_url=mistral.url + "/v1", api_key="unused")
    r = m.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
    assert r.choices[0].message.role == "assistant"
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}])
    # log-probabilities parse into the package's own types
    r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4 and len(lp.top_logprobs[0]) <= 2
    assert "".join(lp.tokens) == r.choices[0].text and lp.text_offset[0] == 0
    r = m.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                  logprobs=True, top_logprobs=2)
    items = r.choices[0].logprobs.content
    assert items and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in items)
    r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=2, n=2, temperature=1, seed=1)
    assert [ch.index for ch in r.choices] == [0, 1]


def _http_request(port, body):
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def test_disconnect_cancels(stories):
    before = metric(stories.url, "ringlm_http_errors_total", '{kind="client_disconnect"}')
    s = _http_request(stories.port, {"prompt": "Once upon a time", "max_tokens": 500, "stream": True})
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    s.close()
    for _ in range(100):
        if (metric(stories.url, "ringlm_http_errors_total", '{kind="client_disconnect"}') > before and
                metric(stories.url, "ringlm_active_requests") == 0):
            break
        time.sleep(0.05)
    assert metric(stories.url, "ringlm_http_errors_total", '{kind="client_disconnect"}') > before
    assert metric(stories.url, "ringlm_active_requests") == 0
    done = metric(stories.url, "ringlm_tokens_out_total")
    assert done is not None


def test_idle_connections_and_slowloris_do_not_stall_streams(stories):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2000 + 64
    if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    n = 2000 if resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= want else 300
    idle = []
    for _ in range(n):
        idle.append(socket.create_connection(("127.0.0.1", stories.port)))
    stop = threading.Event()

    def slowloris():
        s = socket.create_connection(("127.0.0.1", stories.port))
        hdr = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
        try:
            for b in hdr:
                if stop.is_set():
                    break
                s.send(bytes([b]))
                time.sleep(0.02)
        except OSError:
            pass                    # closed by the server: what should happen eventually
        s.close()
    t = threading.Thread(target=slowloris)
    t.start()
    t0 = time.time()
    for _ in range(5):
        code, body = curl("-N", stories.url + "/v1/completions", data=json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stream": True}))
        assert code == 200 and sse_events(body)[-1] == "[DONE]"
    elapsed = time.time() - t0
    stop.set()
    t.join()
    for s in idle:
        s.close()
    assert elapsed < 20, elapsed    # generous: a stalled server would hang until curl's 30 s limit


def test_logprobs_completions_and_chat(stories, mistral):
    """Log-probabilities answered as the OpenAI API does: completions' tokens / token_logprobs /
    top_logprobs / text_offset (the tokens spell the text), chat's content items with bytes and
    alternatives, streamed chunk by chunk too; the C side checks the numbers against the
    float64 reference (test_e2e_model)"""
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 3}))
    assert code == 200, body
    c = json.loads(body)["choices"][0]
    lp = c["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 12
    assert "".join(lp["tokens"]) == c["text"]
    assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
    for t, x, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert x <= 0 and 1 <= len(top) <= 3 and abs(max(top.values()) - x) < 1e-6   # greedy: the best
    code, body = curl("-N", stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 0, "stream": True}))
    ev = sse_events(body)
    toks = [t for e in ev[:-1] for t in ((e["choices"][0].get("logprobs") or {}).get("tokens") or [])]
    assert toks == lp["tokens"]
    req = {"messages": [{"role": "user", "content": "Tell a story."}], "max_tokens": 6, "temperature": 0,
           "logprobs": True, "top_logprobs": 2}
    code, body = curl(mistral.url + "/v1/chat/completions", data=json.dumps(req))
    assert code == 200, body
    items = json.loads(body)["choices"][0]["logprobs"]["content"]
    assert len(items) >= 1
    for it in items:
        assert set(it) == {"token", "logprob", "bytes", "top_logprobs"} and len(it["top_logprobs"]) == 2
        assert bytes(it["bytes"]).decode("utf-8", "replace") == it["token"] or it["token"].count("\ufffd")
        assert it["top_logprobs"][0]["logprob"] >= it["top_logprobs"][1]["logprob"]
    code, body = curl(mistral.url + "/v1/chat/completions", data=json.dumps(dict(req, logprobs=False, top_logprobs=0)))
    assert code == 200 and json.loads(body)["choices"][0]["logprobs"] is None


def test_unsupported_parameters_are_refused_by_name(stories):
    cases = [({"prompt": "x", "frobnicate": 1}, "'frobnicate'"),
             ({"prompt": "x", "presence_penalty": 0.5}, "presence_penalty"),
             ({"prompt": "x", "echo": 1}, "'echo'"),
             ({"prompt": "x", "logprobs": 21}, "'logprobs'"),
             ({"prompt": "x", "logit_bias": {"5": 1}}, "logit_bias"),
             ({"prompt": "x", "best_of": 2}, "best_of")]
    for data, words in cases:
        code, body = curl(stories.url + "/v1/completions", data=json.dumps(data))
        assert code == 400 and words in json.loads(body)["error"]["message"], (data, body)
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "x", "max_tokens": 2, "presence_penalty": 0, "frequency_penalty": 0, "echo": False,
         "user": "u", "model": "m", "best_of": 1, "logit_bias": {}}))
    assert code == 200, body


def test_n_choices(stories):
    """n copies of a request (completions and chat alike): one choice each, their own draws,
    the prompt counted once in the usage; streamed, every choice's chunks carry its index and
    one [DONE] ends them all"""
    req = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "seed": 3, "n": 3}
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(req))
    assert code == 200, body
    j = json.loads(body)
    assert [c["index"] for c in j["choices"]] == [0, 1, 2]
    assert len({c["text"] for c in j["choices"]}) > 1                # their own draws
    assert j["usage"]["completion_tokens"] == 24 and j["usage"]["prompt_tokens"] == j["usage"]["total_tokens"] - 24
    one = json.loads(curl(stories.url + "/v1/completions", data=json.dumps(dict(req, n=1)))[1])
    assert one["choices"][0]["text"] == j["choices"][0]["text"]        # choice 0 is the request with n 1
    code, body = curl("-N", stories.url + "/v1/completions", data=json.dumps(dict(req, stream=True)))
    ev = sse_events(body)
    assert body.count(b"[DONE]") == 1 if isinstance(body, bytes) else body.count("[DONE]") == 1
    texts = {0: "", 1: "", 2: ""}
    for e in ev[:-1]:
        for c in e["choices"]:
            texts[c["index"]] += c["text"]
    assert [texts[i] for i in range(3)] == [c["text"] for c in j["choices"]]
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(dict(req, n=17)))
    assert code == 400 and "'n'" in json.loads(body)["error"]["message"]


def test_echo_scores_the_prompt(stories):
    """echo: the prompt's text opens the answer; with logprobs its tokens' (the first's null, as
    OpenAI's), and with max_tokens 0 only those: scoring a text without generating"""
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "Once upon a time, there was a cat", "max_tokens": 0, "echo": True, "logprobs": 2}))
    assert code == 200, body
    c = json.loads(body)["choices"][0]
    lp = c["logprobs"]
    assert c["text"] == "Once upon a time, there was a cat" and "".join(lp["tokens"]) == c["text"]
    # after the BOS (left out of the text) even the first token has a log-probability
    assert all(x <= 0 for x in lp["token_logprobs"]) and all(len(t) <= 2 for t in lp["top_logprobs"])
    assert json.loads(body)["usage"]["completion_tokens"] == 0
    n_prompt = len(lp["tokens"])
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "Once upon a time, there was a cat", "max_tokens": 5, "echo": True, "logprobs": 1,
         "temperature": 0}))
    c = json.loads(body)["choices"][0]
    assert c["text"].startswith("Once upon a time, there was a cat") and len(c["logprobs"]["tokens"]) == n_prompt + 5
    assert c["logprobs"]["token_logprobs"][:n_prompt] == lp["token_logprobs"]      # the same prompt, scored alike
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 4, "echo": True, "temperature": 0}))
    c = json.loads(body)["choices"][0]
    assert c["text"].startswith("Once upon a time") and c["logprobs"] is None
    ids = [int(x) for x in subprocess.run([os.path.join(BUILD, "ringlm"), "tokenize", "--model", stories.model_path,
                                           "--tokenizer", stories.tokenizer, "--no-bos", "--text", "Once upon a time"],
                                          stdout=subprocess.PIPE, check=True).stdout.split()]
    code, body = curl(stories.url + "/v1/completions", data=json.dumps(
        {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1}))
    lp = json.loads(body)["choices"][0]["logprobs"]       # no BOS: nothing before the first token
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None and len(lp["tokens"]) == len(ids)
    code, body = curl(stories.url + "/v1/completions", data=json.dumps({"prompt": "x", "max_tokens": 0}))
    assert code == 400 and "max_tokens" in json.loads(body)["error"]["message"]


def test_chat_on_a_real_instruct_model(smollm):
    """SmolLM2-135M-Instruct through /v1/chat/completions: its ChatML template, a real answer,
    finish_reason "stop" at its end of turn; streamed the same."""
    # asked twice, the repeat through the prefix cache: a wording without a near-tie first token
    # (clients/python/tests/test_real.py says why)
    req = {"messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
           "max_tokens": 64,
           "temperature": 0}
    code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(req))
    assert code == 200, body
    j = json.loads(body)
    assert j["choices"][0]["message"]["content"] == "The capital of France is Paris."
    assert j["choices"][0]["finish_reason"] == "stop" and j["usage"]["completion_tokens"] < 64
    code, body = curl("-N", smollm.url + "/v1/chat/completions", data=json.dumps(dict(req, stream=True)))
    ev = sse_events(body)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-1]) == "The capital of France is Paris."


def test_response_format_json_schema_on_a_real_instruct_model(smollm):
    """response_format json_schema: every choice's content parses and validates against the
    schema (jsonschema, the oracle), streamed too; json_object gives a JSON object; unenforceable
    keywords are refused by name with a 400."""
    import jsonschema
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    req = {"messages": [{"role": "user", "content": "Name a big city and its population, as JSON."}],
           "max_tokens": 60, "temperature": 0.8, "seed": 5, "n": 3,
           "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema,
                                                                      "strict": True}}}
    code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(req))
    assert code == 200, body
    for ch in json.loads(body)["choices"]:
        jsonschema.validate(json.loads(ch["message"]["content"]), schema)
        assert ch["finish_reason"] == "stop"
    code, body = curl("-N", smollm.url + "/v1/chat/completions", data=json.dumps(dict(req, stream=True, n=1)))
    ev = sse_events(body)
    jsonschema.validate(json.loads("".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-1])), schema)
    code, body = curl(smollm.url + "/v1/chat/completions",
                      data=json.dumps(dict(req, n=1, max_tokens=120, response_format={"type": "json_object"})))
    assert code == 200, body
    ch = json.loads(body)["choices"][0]
    if ch["finish_reason"] == "stop":             # max_tokens can cut an object short
        assert isinstance(json.loads(ch["message"]["content"]), dict), ch
    rf = {"type": "json_schema", "json_schema": {"name": "e", "schema": {"type": "string", "format": "idn-email"}}}
    code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(dict(req, response_format=rf)))
    assert code == 400 and "format" in json.loads(body)["error"]["message"], body


def test_openai_package_on_a_real_instruct_model(smollm):
    openai = openai_package()
    c = openai.OpenAI(base_url=smollm.url + "/v1", api_key="unused")
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "What is the capital of France? "
                                                                       "Answer in one sentence."}],
                                  max_tokens=64, temperature=0)
    assert r.choices[0].message.content == "The capital of France is Paris." and r.choices[0].finish_reason == "stop"


TOOLS = [{"type": "function", "function": {
             "name": "get_weather", "description": "The weather now in a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                             "unit": {"enum": ["celsius", "fahrenheit"]}},
                            "required": ["city"]}}},
         {"type": "function", "function": {
             "name": "get_time", "description": "The time now in a time zone",
             "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 30}},
                            "required": ["tz"]}}}]
WEATHER_Q = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def check_calls(calls, only=None):
    """Each call names a tool and its arguments parse and validate against that tool's parameters
    (jsonschema, the oracle)."""
    import jsonschema
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    assert calls
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_") and c["function"]["name"] in (only or params)
        jsonschema.validate(json.loads(c["function"]["arguments"]), params[c["function"]["name"]])


def test_tool_calls_on_a_real_instruct_model(smollm):
    """tools through /v1/chat/completions on SmolLM2 (ChatML, Hermes calls): required and named
    tool_choice give calls whose arguments validate, with finish_reason tool_calls and content
    null; streamed, the delta.tool_calls pieces reassemble to the same call; none gives text; a
    history with a call and its result (role tool) is taken."""
    req = {"messages": WEATHER_Q, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
           "max_tokens": 48, "temperature": 0}
    code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(req))
    assert code == 200, body
    ch = json.loads(body)["choices"][0]
    assert ch["finish_reason"] == "tool_calls" and ch["message"]["content"] is None
    calls = ch["message"]["tool_calls"]
    check_calls(calls)
    assert len(calls) == 1
    code, body = curl("-N", smollm.url + "/v1/chat/completions", data=json.dumps(dict(req, stream=True)))
    ev = sse_events(body)
    assert ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] == "tool_calls"
    deltas = [d for e in ev[:-1] for d in e["choices"][0]["delta"].get("tool_calls", [])]
    assert deltas[0]["id"].startswith("call_") and deltas[0]["function"]["arguments"] == ""
    assert all(d["index"] == 0 and "id" not in d and "name" not in d["function"] for d in deltas[1:])
    assert deltas[0]["function"]["name"] == calls[0]["function"]["name"]
    assert "".join(d["function"]["arguments"] for d in deltas) == calls[0]["function"]["arguments"]
    named = dict(req, tool_choice={"type": "function", "function": {"name": "get_time"}})
    code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(named))
    assert code == 200, body
    check_calls(json.loads(body)["choices"][0]["message"]["tool_calls"], only=["get_time"])
    code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(dict(req, tool_choice="none",
                                                                                  max_tokens=8)))
    msg = json.loads(body)["choices"][0]["message"]
    assert code == 200 and isinstance(msg["content"], str) and msg["content"] and "tool_calls" not in msg
    history = WEATHER_Q + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 21, "sky": "sunny"}'}]
    code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(
        {"messages": history, "tools": TOOLS, "max_tokens": 8, "temperature": 0}))
    j = json.loads(body)
    assert code == 200 and j["usage"]["prompt_tokens"] > 300, body    # the tools, the call and its result
    msg = j["choices"][0]["message"]
    if msg.get("tool_calls"):                    # auto: a call that holds, or text
        check_calls(msg["tool_calls"])
    else:
        assert isinstance(msg["content"], str)


def test_bad_tools_are_refused_naming_the_field(smollm):
    fn = TOOLS[1]["function"]
    for change, word in (({"tools": [{"type": "function", "function": {"parameters": fn["parameters"]}}]},
                          "'tools[0].function.name'"),
                         ({"tools": [{"type": "function", "function": dict(fn, parameters=[1])}]},
                          "'tools[0].function.parameters'"),
                         ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                          "'tool_choice' names the function 'nope'"),
                         ({"tools": TOOLS, "tool_choice": "sometimes"}, "'tool_choice' must be"),
                         ({"tool_choice": "required"}, "'tool_choice' needs 'tools'"),
                         ({"tools": TOOLS, "response_format": {"type": "json_schema", "json_schema": {
                             "name": "x", "schema": {"type": "object"}}}}, "'response_format' together with 'tools'"),
                         ({"tools": TOOLS, "messages": [{"role": "tool"}]}, "'messages[0].content'")):
        code, body = curl(smollm.url + "/v1/chat/completions", data=json.dumps(dict({"messages": WEATHER_Q}, **change)))
        msg = json.loads(body)["error"]["message"]
        assert code == 400 and word in msg and "\n" not in msg, body


def test_tool_calls_on_gemma(gemma):
    """Gemma 3 (no tool format of its own: Google's documented prompt, Llama 3.1's JSON calls): a
    named call whose arguments validate."""
    req = {"messages": WEATHER_Q, "tools": TOOLS, "max_tokens": 40, "temperature": 0,
           "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    code, body = curl(gemma.url + "/v1/chat/completions", data=json.dumps(req))
    assert code == 200, body
    ch = json.loads(body)["choices"][0]
    assert ch["finish_reason"] == "tool_calls" and ch["message"]["content"] is None
    check_calls(ch["message"]["tool_calls"], only=["get_weather"])


def test_openai_package_tools(smollm):
    openai = openai_package()
    c = openai.OpenAI(base_url=smollm.url + "/v1", api_key="unused")
    r = c.chat.completions.create(model="x", messages=WEATHER_Q, tools=TOOLS, tool_choice="required",
                                  parallel_tool_calls=False, max_tokens=48, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    check_calls([c.model_dump() for c in calls])
    # streamed: the package's own pieces, put together
    args, name = "", None
    for chunk in c.chat.completions.create(model="x", messages=WEATHER_Q, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=48, temperature=0, stream=True):
        for d in chunk.choices[0].delta.tool_calls or []:
            name = name or d.function.name
            args += d.function.arguments or ""
    assert name == calls[0].function.name and args == calls[0].function.arguments


# --- the fleet contract: vLLM's metric names and render endpoints (what llm-d reads) -------

VLLM_METRICS = {"vllm:num_requests_waiting": "gauge", "vllm:num_requests_running": "gauge",
                "vllm:kv_cache_usage_perc": "gauge", "vllm:cache_config_info": "gauge",
                "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter",
                "vllm:num_preemptions": "counter", "vllm:request_success": "counter",
                "vllm:prefix_cache_queries": "counter", "vllm:prefix_cache_hits": "counter",
                "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
                "vllm:e2e_request_latency_seconds": "histogram"}


def prom(url):
    """/metrics parsed by prometheus_client's own parser (Debian's python3-prometheus-client):
    {family name: family}; the parser refuses text that is not format 0.0.4"""
    parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is not installed "
                                 "(apt-get install python3-prometheus-client)")
    code, body = curl(url + "/metrics")
    assert code == 200
    return {f.name: f for f in parser.text_string_to_metric_families(body)}


def sample(fams, name, suffix="", **labels):
    """the value of family name's sample name+suffix whose labels include labels"""
    for s in fams[name].samples:
        if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((name, suffix, labels))


def post(url, body):
    code, text = curl(url, data=json.dumps(body))
    assert code == 200, text
    return json.loads(text)


def test_vllm_metrics_under_load(smollm):
    """/metrics carries vLLM's names (what llm-d's endpoint picker and vLLM dashboards read), each
    labelled with the model's name: mid-load the running/waiting gauges show the requests, after
    it they are 0 again, and the counters rose by what the requests did."""
    model = json.loads(curl(smollm.url + "/v1/models")[1])["data"][0]["id"]
    f0 = prom(smollm.url)
    for name, typ in VLLM_METRICS.items():
        assert name in f0 and f0[name].type == typ, name
        assert f0[name].samples and all(s.labels.get("model_name") == model for s in f0[name].samples), name
    assert 0 <= sample(f0, "vllm:kv_cache_usage_perc") <= 1
    info = f0["vllm:cache_config_info"].samples[0]
    assert info.value == 1 and int(info.labels["block_size"]) > 0 and int(info.labels["num_gpu_blocks"]) > 0
    assert int(info.labels["num_gpu_blocks"]) == metric(smollm.url, "ringlm_kv_blocks_total")

    finishes, gen_tokens = [], []

    def stream(i):
        code, body = curl("-N", smollm.url + "/v1/completions", data=json.dumps(
            {"prompt": "Request %d: a long story about the sea begins" % i, "max_tokens": 60, "temperature": 0,
             "stream": True}))
        ev = sse_events(body)
        finishes.append(ev[-2]["choices"][0]["finish_reason"])
        gen_tokens.append(ev[-2]["usage"]["completion_tokens"])

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    busy = 0
    while any(t.is_alive() for t in threads):
        f = prom(smollm.url)
        busy = max(busy, sample(f, "vllm:num_requests_running") + sample(f, "vllm:num_requests_waiting"))
        assert 0 <= sample(f, "vllm:kv_cache_usage_perc") <= 1
    for t in threads:
        t.join()
    assert busy > 0, "no scrape during the load saw a running or waiting request"
    # a request a stop string ends: finish "stop"
    j = post(smollm.url + "/v1/completions", {"prompt": "1, 2, 3, 4,", "max_tokens": 20, "temperature": 0,
                                              "stop": [" ", ",", "\n"]})
    finishes.append(j["choices"][0]["finish_reason"])
    gen_tokens.append(j["usage"]["completion_tokens"])
    assert "stop" in finishes and len(finishes) == 5
    for _ in range(100):
        f1 = prom(smollm.url)
        if sample(f1, "vllm:num_requests_running") == 0 and sample(f1, "vllm:num_requests_waiting") == 0:
            break
        time.sleep(0.1)
    assert sample(f1, "vllm:num_requests_running") == 0 and sample(f1, "vllm:num_requests_waiting") == 0
    assert sample(f1, "vllm:prompt_tokens", "_total") > sample(f0, "vllm:prompt_tokens", "_total")
    assert (sample(f1, "vllm:generation_tokens", "_total") - sample(f0, "vllm:generation_tokens", "_total")
            >= sum(gen_tokens))
    for why in ("stop", "length"):
        rose = (sample(f1, "vllm:request_success", "_total", finished_reason=why) -
                sample(f0, "vllm:request_success", "_total", finished_reason=why))
        assert rose == finishes.count(why), (why, finishes)
    for h in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        assert sample(f1, h, "_count") - sample(f0, h, "_count") == 5
        assert sample(f1, h, "_bucket", le="+Inf") == sample(f1, h, "_count")
    assert sample(f1, "vllm:prefix_cache_queries", "_total") >= sample(f1, "vllm:prefix_cache_hits", "_total")
    q = "vllm:request_queue_time_seconds"       # from the runtime's stats, when they have it
    if q in f1:
        assert sample(f1, q, "_count") - sample(f0, q, "_count") >= 5
        assert sample(f1, q, "_bucket", le="+Inf") == sample(f1, q, "_count")


def test_a_scrape_is_cheap(smollm):
    """200 scrapes over one keep-alive connection: the median stays far below the 50 ms at which
    llm-d's endpoint picker scrapes (the bound is loose: a loaded CI machine)"""
    import http.client
    import statistics
    c = http.client.HTTPConnection("127.0.0.1", smollm.port, timeout=10)
    ts = []
    for _ in range(200):
        t = time.perf_counter()
        c.request("GET", "/metrics")
        r = c.getresponse()
        assert r.status == 200 and b"vllm:num_requests_running" in r.read()
        ts.append(time.perf_counter() - t)
    c.close()
    assert statistics.median(ts) < 0.005, statistics.median(ts)


@pytest.mark.parametrize("model", ["smollm", "gemma"])
def test_render_is_what_is_prefilled(model, request):
    """/v1/completions/render and /v1/chat/completions/render answer the prompt ids the body's
    generation would prefill: as many as its usage.prompt_tokens; a completion's echo scores the
    same tokens from the text and from the rendered ids; a chat's rendered ids sent as a
    completions prompt give the chat's greedy answer; nothing is submitted to the runtime."""
    s = request.getfixturevalue(model)
    comp = {"prompt": "The capital of France is", "temperature": 0}
    done = metric(s.url, "ringlm_requests_done_total")
    r = post(s.url + "/v1/completions/render", dict(comp, max_tokens=8))
    assert isinstance(r, list) and len(r) == 1 and list(r[0]) == ["token_ids"]
    ids = r[0]["token_ids"]
    assert ids and all(isinstance(i, int) for i in ids)
    assert post(s.url + "/v1/completions/render", {"prompt": ids}) == [{"token_ids": ids}]
    assert metric(s.url, "ringlm_requests_done_total") == done
    assert post(s.url + "/v1/completions", dict(comp, max_tokens=1))["usage"]["prompt_tokens"] == len(ids)
    # echo with logprobs and no new tokens: the prompt's tokens, from the text and from the ids
    e_text = post(s.url + "/v1/completions", dict(comp, echo=True, logprobs=0, max_tokens=0))
    e_ids = post(s.url + "/v1/completions", {"prompt": ids, "echo": True, "logprobs": 0, "max_tokens": 0})
    assert e_text["usage"]["prompt_tokens"] == e_ids["usage"]["prompt_tokens"] == len(ids)
    lt, li = e_text["choices"][0]["logprobs"], e_ids["choices"][0]["logprobs"]
    assert lt["tokens"] and lt["tokens"] == li["tokens"] and lt["text_offset"] == li["text_offset"]
    assert len(lt["tokens"]) in (len(ids), len(ids) - 1)     # BOS is not echoed
    assert e_text["choices"][0]["text"] == comp["prompt"]

    chat = {"messages": [{"role": "user", "content": "Name three colors."}], "temperature": 0, "max_tokens": 8}
    cids = post(s.url + "/v1/chat/completions/render", chat)[0]["token_ids"]
    assert post(s.url + "/v1/chat/completions", dict(chat, max_tokens=1))["usage"]["prompt_tokens"] == len(cids)
    cj = post(s.url + "/v1/chat/completions", chat)
    pj = post(s.url + "/v1/completions", {"prompt": cids, "temperature": 0, "max_tokens": 8})
    assert pj["usage"]["prompt_tokens"] == cj["usage"]["prompt_tokens"] == len(cids)
    content, text = cj["choices"][0]["message"]["content"], pj["choices"][0]["text"]
    assert content and text.startswith(content), (content, text)
    if cj["choices"][0]["finish_reason"] == "length":
        assert text == content
    # tools: their formatter's prompt
    tools = {"messages": WEATHER_Q, "tools": TOOLS, "max_tokens": 1}
    tids = post(s.url + "/v1/chat/completions/render", tools)[0]["token_ids"]
    assert len(tids) > len(cids)
    assert post(s.url + "/v1/chat/completions", tools)["usage"]["prompt_tokens"] == len(tids)


def test_render_refuses_as_generation_does(smollm):
    """a body the generation endpoint refuses gets the same status and error from its render"""
    for ep, body in (("/v1/completions", b"{not json"), ("/v1/completions", {"prompt": "x", "temperature": 5}),
                     ("/v1/completions", {"prompt": []}), ("/v1/completions", {"prompt": "x", "nope": 1}),
                     ("/v1/completions", {"prompt": [1, 10 ** 9]}), ("/v1/chat/completions", {"messages": []}),
                     ("/v1/chat/completions", {"messages": [{"role": "user"}]}),
                     ("/v1/chat/completions", {"messages": WEATHER_Q, "tool_choice": "required"}),
                     ("/v1/chat/completions", {"messages": WEATHER_Q, "response_format": {"type": "xml"}})):
        data = body if isinstance(body, bytes) else json.dumps(body)
        code, want = curl(smollm.url + ep, data=data)
        got_code, got = curl(smollm.url + ep + "/render", data=data)
        assert code == 400 and (got_code, json.loads(got)) == (code, json.loads(want)), (ep, body, got)
    code, body = curl(smollm.url + "/v1/chat/completions/render")
    assert code == 405 and "takes POST" in body


def _open(port, body, timeout=30):
    """POST /v1/completions with http.client: (connection, response) once the status line is in"""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return c, c.getresponse()


def _overload_refused(r):
    """r (an http.client response) is an overload: 503, Retry-After in whole seconds, an
    OpenAI-style error saying to retry, with ringlm_strerror(-ETIME)'s text"""
    body = r.read().decode()
    assert r.status == 503, body
    assert r.getheader("Retry-After", "").isdigit() and int(r.getheader("Retry-After")) >= 1, r.getheaders()
    assert r.getheader("Content-Type") == "application/json"
    err = json.loads(body)["error"]
    assert err["type"] == "server_error"
    assert "overloaded" in err["message"] and "retry later" in err["message"], err
    assert "--max-queue-ms" in err["message"], err          # the runtime's own words are kept


@pytest.mark.parametrize("stream", [False, True])
def test_overload_is_a_503_with_retry_after(overloaded, stream):
    """One running sequence (--max-seqs 1) and 100 ms of queueing allowed (--max-queue-ms): while
    one request runs, a second waits, is ended with -ETIME and gets 503 + Retry-After, streamed
    or not (a stream's status waits for its first event, so it is no error inside a 200); the
    first completes normally, and /metrics counts the refusals."""
    prompt = [1, 2, 3]
    before = metric(overloaded.url, "ringlm_http_overloaded_total")
    kind_before = metric(overloaded.url, "ringlm_http_errors_total", '{kind="overloaded"}')
    first = {}

    def run_first():
        c, r = _open(overloaded.port, {"prompt": prompt, "max_tokens": 40, "stream": stream})
        first["status"], first["type"], first["body"] = r.status, r.getheader("Content-Type"), r.read().decode()
        c.close()
    t = threading.Thread(target=run_first)
    t.start()
    for _ in range(200):                # the first is running: the next one has to queue
        if metric(overloaded.url, "ringlm_running_sequences") == 1:
            break
        time.sleep(0.01)
    assert metric(overloaded.url, "ringlm_running_sequences") == 1
    t0 = time.time()
    c, r = _open(overloaded.port, {"prompt": prompt, "max_tokens": 5, "stream": stream})
    _overload_refused(r)
    c.close()
    assert time.time() - t0 < 5
    # n > 1: choice 0 refused before its copies went is the whole answer (it used to hang)
    c, r = _open(overloaded.port, {"prompt": prompt, "max_tokens": 5, "n": 2, "stream": stream}, timeout=10)
    _overload_refused(r)
    c.close()
    t.join(30)
    assert first["status"] == 200, first
    if stream:
        assert first["type"] == "text/event-stream"
        ev = sse_events(first["body"])
        assert ev[-1] == "[DONE]" and ev[-2]["usage"]["completion_tokens"] == 40, ev
    else:
        j = json.loads(first["body"])
        assert j["usage"]["completion_tokens"] == 40 and j["choices"][0]["finish_reason"] == "length"
    assert metric(overloaded.url, "ringlm_http_overloaded_total") == before + 2
    assert metric(overloaded.url, "ringlm_http_errors_total", '{kind="overloaded"}') == kind_before + 2


def test_a_stream_is_200_event_stream_once_it_starts(overloaded, stories):
    """Holding a stream's status until its first event changes nothing for one that succeeds:
    200, text/event-stream, its tokens (the sim's, counted; stories260K's, as text), [DONE]."""
    c, r = _open(overloaded.port, {"prompt": [1, 2, 3], "max_tokens": 8, "stream": True})
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    ev = sse_events(r.read().decode())
    c.close()
    assert ev[-1] == "[DONE]" and ev[-2]["usage"]["completion_tokens"] == 8, ev
    c, r = _open(stories.port, {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "stream": True})
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert r.getheader("Retry-After") is None
    ev = sse_events(r.read().decode())
    c.close()
    assert ev[-1] == "[DONE]"
    text = "".join(e["choices"][0]["text"] for e in ev[:-1])
    assert len(ev) > 3 and GOLDEN.startswith(text[:60]), ev
