"""Run by test_dynamo_worker.py with the Dynamo venv's python: the `openai` package (3.x) driving a
Dynamo frontend, one JSON command a line on stdin, one JSON answer a line on stdout.

    python dynamo_openai_driver.py BASE_URL MODEL HF_DIR

Commands ({"op": ...}):
  chat        messages, max_tokens, stream, [extra]      -> text, finish_reason, usage
  completion  prompt, max_tokens, stream, [extra]        -> the same
  disconnect  messages, max_tokens, chunks               -> reads that many chunks, then closes the
                                                            connection: {"got": chunks read}
  chat_ids    messages                                   -> ids: the prompt the frontend renders
                                                            (HF_DIR's chat template, with tokenizers)
  tokenize    text                                       -> ids (HF_DIR's tokenizer, no specials)
Every answer has "ok"; a failed call answers ok=false with "status" (the HTTP status, when there
is one) and "error" (the message)."""
import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
import openai  # noqa: E402

BASE, MODEL, HF = sys.argv[1:4]
cli = openai.OpenAI(base_url=BASE, api_key="none", timeout=60.0, max_retries=0)
_tok = None


def tok():
    global _tok
    if _tok is None:
        from transformers import AutoTokenizer
        _tok = AutoTokenizer.from_pretrained(HF, local_files_only=True)
    return _tok


def collect(resp, stream, chat):
    if not stream:
        c = resp.choices[0]
        text = c.message.content if chat else c.text
        return {"text": text or "", "finish_reason": c.finish_reason,
                "usage": resp.usage.model_dump() if resp.usage else None}
    parts, fr, usage, n = [], None, None, 0
    for ch in resp:
        if ch.usage:
            usage = ch.usage.model_dump()
        for c in ch.choices:
            piece = (c.delta.content if chat else c.text) or ""
            if piece:
                n += 1
            parts.append(piece)
            fr = c.finish_reason or fr
    return {"text": "".join(parts), "finish_reason": fr, "usage": usage, "chunks": n}


def do(cmd):
    op = cmd["op"]
    extra = cmd.get("extra") or {}
    t0 = time.monotonic()
    cl = cli.with_options(timeout=cmd["timeout"]) if cmd.get("timeout") else cli
    if op in ("chat", "completion"):
        stream = bool(cmd.get("stream"))
        kw = dict(model=MODEL, max_tokens=cmd.get("max_tokens", 16), temperature=cmd.get("temperature", 0.0),
                  stream=stream, **extra)
        if stream:
            kw["stream_options"] = {"include_usage": True}
        if op == "chat":
            out = collect(cl.chat.completions.create(messages=cmd["messages"], **kw), stream, True)
        else:
            out = collect(cl.completions.create(prompt=cmd["prompt"], **kw), stream, False)
    elif op == "disconnect":
        resp = cli.chat.completions.create(model=MODEL, messages=cmd["messages"], max_tokens=cmd["max_tokens"],
                                           temperature=0.0, stream=True, **extra)
        got = 0
        for ch in resp:
            if any(c.delta.content for c in ch.choices):
                got += 1
            if got >= cmd["chunks"]:
                break
        resp.close()                       # the client goes away mid-stream
        out = {"got": got}
    elif op == "chat_ids":
        ids = tok().apply_chat_template(cmd["messages"], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out = {"ids": [int(i) for i in ids]}
    elif op == "tokenize":
        out = {"ids": tok().encode(cmd["text"], add_special_tokens=False)}
    else:
        raise ValueError("unknown op " + op)
    out["ok"] = True
    out["s"] = time.monotonic() - t0
    return out


for line in sys.stdin:
    if not line.strip():
        continue
    try:
        ans = do(json.loads(line))
    except openai.APIStatusError as e:
        ans = {"ok": False, "status": e.status_code, "error": str(e)}
    except Exception as e:  # a timeout, a refused connection, a bad command: say so, keep serving
        ans = {"ok": False, "status": None, "error": "%s: %s" % (type(e).__name__, e)}
    sys.stdout.write(json.dumps(ans) + "\n")
    sys.stdout.flush()
