"""ringlm — Python client of the ringlm serving runtime (a thin binding of libringlm).

    import ringlm
    with ringlm.Client(socket="default") as c:           # a running ringlmd
        print(c.generate("Once upon a time", max_tokens=64))
    with ringlm.Client(model="stories260K.bin", tokenizer="tok512.bin") as c:   # embedded
        for piece in c.stream("The cat", max_tokens=32):
            print(piece, end="")

One thread of the Client reads every event (ringlm_wait, which releases the GIL) and hands
each to the stream it belongs to, so any number of threads and asyncio tasks can stream from
one Client at once; submits, cancels and tokenizer calls go through one lock (libringlm lets
one thread submit while another waits). Errors raise RinglmError with the runtime's message.
"""
import asyncio
import ctypes
import itertools
import json
import queue
import threading
import time

from . import _capi

__all__ = ["Client", "Stream", "AsyncStream", "RinglmError"]

_lib_handle = None
_lib_lock = threading.Lock()


def _lib():
    global _lib_handle
    with _lib_lock:
        if _lib_handle is None:
            _lib_handle = _capi.load()
        return _lib_handle


class RinglmError(Exception):
    """A libringlm call or the runtime failed. .code is the -errno value, .errno its positive."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.errno = -code


def _error(code, what):
    lib = _lib()
    msg = lib.ringlm_last_error() or b""
    text = msg.decode("utf-8", "replace") if msg else ""
    if not text:
        text = "%s: %s" % (what, lib.ringlm_strerror(code).decode())
    return RinglmError(code, text)


_EAGAIN = -11
_EINVAL = -22


class _Req:
    """Where the reader thread puts one request's events: a thread queue, or an asyncio
    queue fed through its loop."""

    def __init__(self, loop=None, logprobs=False):
        self.loop = loop
        self.logprobs = logprobs
        self.q = asyncio.Queue() if loop else queue.SimpleQueue()

    def put(self, item):
        if self.loop:
            try:
                self.loop.call_soon_threadsafe(self.q.put_nowait, item)
            except RuntimeError:   # the loop is closed: nobody listens any more
                pass
        else:
            self.q.put(item)


class _StreamBase:
    def __init__(self, client, req, rid, tag, text, prev):
        self.client = client
        self.id = rid
        self.tag = tag
        self.tokens = []
        # with logprobs=True, per token: (its log-probability, [(id, log-probability) of the
        # top_logprobs most likely tokens, most likely first])
        self.logprobs = []
        # with prompt_logprobs=True, per prompt token after the first: (position, id, and the
        # same pair), all of them before the first output token
        self.prompt_logprobs = []
        self.finish_reason = None     # "length", "stop", "eos", "context", "cancel"
        self._req = req
        self._text = text
        self._ended = False
        self._ts = _capi.TextStream()
        if text:
            _lib().ringlm_textstream_init(ctypes.byref(self._ts), prev)

    def cancel(self):
        """Asks the runtime to stop; tokens already made still arrive, then the end."""
        self.client._cancel(self.id, self.tag)

    # one event -> (value to yield or None, finished?)
    def _handle(self, item):
        kind = item[0]
        if kind == "plp":
            self.prompt_logprobs.append(item[1:])
            return None, False
        if kind == "tok":
            self.tokens.append(item[1])
            if item[2] is not None:
                self.logprobs.append(item[2])
            if not self._text:
                return item[1], False
            piece = self.client._text_piece(self._ts, item[1])
            return (piece if piece else None), False
        if kind == "done":
            self.finish_reason = item[1]
            if self._text:
                rest = self.client._text_flush(self._ts)
                return (rest if rest else None), True
            return None, True
        raise item[1]


class Stream(_StreamBase):
    """Iterator over one request's output: text pieces (text=True; each ends on a whole UTF-8
    character) or token ids. .tokens has the ids so far, .finish_reason the end."""

    def __iter__(self):
        return self

    def __next__(self):
        while not self._ended:
            value, end = self._handle(self._req.q.get())
            self._ended = end
            if value is not None:
                return value
        raise StopIteration


class AsyncStream(_StreamBase):
    """As Stream, for `async for`: waiting never blocks the event loop."""

    def __aiter__(self):
        return self

    async def __anext__(self):
        while not self._ended:
            value, end = self._handle(await self._req.q.get())
            self._ended = end
            if value is not None:
                return value
        raise StopAsyncIteration


class Client:
    """A connection to a ringlm runtime: socket= names a ringlmd (default "default"); model=
    runs one inside this process (tokenizer=, backend=, runtime_args= as ringlmd's options)."""

    def __init__(self, socket=None, *, model=None, tokenizer=None, backend=None, runtime_args=None,
                 spin_us=None, submit_timeout=10.0):
        lib = _lib()
        p = lib.ringlm_default_params()
        keep = []

        def b(s):
            v = s.encode() if isinstance(s, str) else s
            keep.append(v)
            return v
        if socket is not None:
            p.socket = b(socket)
        if model is not None:
            p.model = b(str(model))
        if tokenizer is not None:
            p.tokenizer = b(str(tokenizer))
        if backend is not None:
            p.backend = b(backend)
        if runtime_args is not None:
            p.runtime_args = b(runtime_args)
        if spin_us is not None:
            p.spin_us = int(spin_us)
        h = ctypes.c_void_p()
        rc = lib.ringlm_connect(ctypes.byref(p), ctypes.byref(h))
        if rc:
            raise _error(rc, "ringlm_connect")
        self._h = h
        self._lock = threading.Lock()       # submit, cancel, tokenizer
        self._reqs = {}                     # tag -> _Req, until its last event
        self._tags = itertools.count(1)
        self._constraints = {}              # (kind, text) -> ringlm_constraint, until close
        self._closing = False
        self._gone = None                   # RinglmError once the runtime is gone
        self._submit_timeout = submit_timeout
        inf = _capi.Info()
        lib.ringlm_get_info(h, ctypes.byref(inf))
        self.info = {f: (getattr(inf, f).decode() if isinstance(getattr(inf, f), bytes) else getattr(inf, f))
                     for f, _ in _capi.Info._fields_}
        self._reader = threading.Thread(target=self._read, name="ringlm-reader", daemon=True)
        self._reader.start()

    # ---- lifetime
    def close(self):
        """Stops the reader, detaches (the runtime cancels what is still running) and, for an
        embedded runtime, stops it."""
        if self._h is None:
            return
        self._closing = True
        self._reader.join()
        _lib().ringlm_close(self._h)
        self._h = None
        self._fail_all(RinglmError(-107, "ringlm: the client was closed"))
        for k in self._constraints.values():
            _lib().ringlm_constraint_destroy(k)
        self._constraints.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---- the reader thread
    def _read(self):
        lib = _lib()
        evs = (_capi.Event * 64)()
        lps = (_capi.Logprobs * 64)()
        while not self._closing:
            n = lib.ringlm_wait_ex(self._h, evs, lps, 64, 50)
            if n < 0:
                self._gone = _error(n, "ringlm_wait")
                self._fail_all(self._gone)
                return
            for i in range(n):
                e = evs[i]
                r = self._reqs.get(e.tag)
                if r is None:
                    continue
                if e.type == _capi.EV_PROMPT:
                    p = lps[i]
                    r.put(("plp", e.index, e.token, (p.logprob, [(p.top_id[j], p.top_logprob[j])
                                                                 for j in range(min(p.n_top, _capi.MAX_TOP_LOGPROBS))])))
                    continue
                if e.type == _capi.EV_TOKEN:
                    lp = None
                    if r.logprobs:
                        p = lps[i]
                        lp = (p.logprob, [(p.top_id[j], p.top_logprob[j])
                                          for j in range(min(p.n_top, _capi.MAX_TOP_LOGPROBS))])
                    r.put(("tok", e.token, lp))
                    continue
                self._reqs.pop(e.tag, None)
                if e.type == _capi.EV_DONE:
                    r.put(("done", _capi.FINISH.get(e.code, str(e.code))))
                else:
                    r.put(("err", RinglmError(e.code, "ringlm: the runtime rejected the request: %s"
                                              % lib.ringlm_strerror(e.code).decode())))

    def _fail_all(self, err):
        for tag in list(self._reqs):
            r = self._reqs.pop(tag, None)
            if r:
                r.put(("err", err))

    # ---- requests
    def _check(self):
        if self._h is None:
            raise RinglmError(-107, "ringlm: the client is closed")
        if self._gone:
            raise self._gone

    def _prompt_ids(self, prompt, add_bos):
        if isinstance(prompt, str):
            return self.tokenize(prompt, add_bos=add_bos)
        ids = [int(t) for t in prompt]
        if not ids:
            raise RinglmError(_EINVAL, "ringlm: the prompt is empty")
        return ids

    _CONS_REGEX, _CONS_SCHEMA, _CONS_GBNF = 1, 2, 3   # RINGLM_CONSTRAINT_REGEX, _JSON_SCHEMA, _GBNF

    def _constraint(self, schema, regex, grammar=None):
        """The compiled constraint for schema (a dict or JSON text), regex or grammar (GBNF
        text), kept per text."""
        given = [k for k, v in (("schema", schema), ("regex", regex), ("grammar", grammar)) if v is not None]
        if len(given) > 1:
            raise RinglmError(_EINVAL, "ringlm: give one of schema, regex and grammar, not %s" % " and ".join(given))
        if not given:
            return None
        if regex is not None:
            kind, text = self._CONS_REGEX, regex
        elif grammar is not None:
            kind, text = self._CONS_GBNF, grammar
        else:
            kind = self._CONS_SCHEMA
            text = schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))
        key = (kind, text)
        k = self._constraints.get(key)
        if k is None:
            b = text.encode()
            h = ctypes.c_void_p()
            rc = _lib().ringlm_constraint_create(kind, b, len(b), ctypes.byref(h))
            if rc:
                raise _error(rc, "ringlm_constraint_create")
            k = self._constraints[key] = h.value
        return k

    def _submit(self, prompt, loop, text, max_tokens, temperature, top_p, top_k, seed, stop,
                priority, add_bos, logprobs=False, top_logprobs=0, prompt_logprobs=False, speculate=True,
                schema=None, regex=None, grammar=None, cons=None, deterministic=False):
        self._check()
        cons = cons or self._constraint(schema, regex, grammar)
        ids = self._prompt_ids(prompt, add_bos)
        stop = list(stop or [])
        if len(stop) > _capi.MAX_STOP:
            raise RinglmError(_EINVAL, "ringlm: at most %d stop ids" % _capi.MAX_STOP)
        lib = _lib()
        r = lib.ringlm_default_request()
        arr = (ctypes.c_uint32 * len(ids))(*ids)
        sarr = (ctypes.c_uint32 * max(1, len(stop)))(*stop)
        r.prompt = arr
        r.n_prompt = len(ids)
        r.max_new = int(max_tokens)
        r.temperature = float(temperature)
        r.top_p = float(top_p)
        r.top_k = int(top_k)
        r.seed = int(seed) & (2 ** 64 - 1)
        r.stop = sarr
        r.n_stop = len(stop)
        r.priority = int(priority)
        if not 0 <= int(top_logprobs) <= _capi.MAX_TOP_LOGPROBS:
            raise RinglmError(_EINVAL, "ringlm: top_logprobs must be 0..%d" % _capi.MAX_TOP_LOGPROBS)
        r.logprobs = 1 if (logprobs or (top_logprobs and not prompt_logprobs)) else 0
        r.top_logprobs = int(top_logprobs)
        r.prompt_logprobs = 1 if prompt_logprobs else 0
        r.no_spec = 0 if speculate else 1
        r.deterministic = 1 if deterministic else 0
        r.constraint = cons
        tag = next(self._tags)
        r.tag = tag
        req = _Req(loop, bool(r.logprobs))
        self._reqs[tag] = req              # before the submit: its first event may come at once
        rid = ctypes.c_uint32()
        deadline = time.monotonic() + self._submit_timeout
        while True:
            with self._lock:
                self._check()
                rc = lib.ringlm_submit(self._h, ctypes.byref(r), ctypes.byref(rid))
                err = _error(rc, "ringlm_submit") if rc and rc != _EAGAIN else None
            if rc == 0:
                break
            if rc != _EAGAIN or time.monotonic() > deadline:
                self._reqs.pop(tag, None)
                raise err or RinglmError(rc, "ringlm_submit: the runtime's rings stayed full for %.0f s"
                                         % self._submit_timeout)
            time.sleep(0.0005)             # back-pressure: the runtime is draining the rings
        cls = AsyncStream if loop else Stream
        return cls(self, req, rid.value, tag, text, ids[-1])

    def stream(self, prompt, max_tokens=16, *, temperature=0.0, top_p=1.0, top_k=0, seed=0, stop=None,
               priority=0, text=True, add_bos=True, logprobs=False, top_logprobs=0, prompt_logprobs=False,
               speculate=True, schema=None, regex=None, grammar=None, deterministic=False):
        """Submits a request and returns its Stream. prompt: text (tokenized with the runtime's
        vocabulary, BOS first where the vocabulary wants one) or token ids; stop: token ids.
        logprobs / top_logprobs (0..20): each token's log-probability, and that many
        alternatives', in Stream.logprobs (the cpu backend has them); prompt_logprobs: the
        prompt's in Stream.prompt_logprobs (max_tokens may then be 0: scoring a text).
        speculate=False: no speculative decoding for this request on a runtime started with
        --spec (the same tokens either way; only their timing differs).
        schema (a JSON Schema, dict or text), regex or grammar (llama.cpp GBNF text, from rule
        'root'): structured output, the answer held to it (compact JSON in the schema's property
        order; a keyword or GBNF feature the engine cannot enforce raises RinglmError naming it);
        log-probabilities are then of the constrained distribution.
        deterministic=True: the answer's logits, hence its tokens and log-probabilities, are the
        same bits whatever other requests share the runtime's steps (a runtime started with
        --deterministic gives every request this; a backend without the mode raises)."""
        return self._submit(prompt, None, text, max_tokens, temperature, top_p, top_k, seed, stop,
                            priority, add_bos, logprobs, top_logprobs, prompt_logprobs, speculate, schema, regex,
                            grammar, deterministic=deterministic)

    def generate(self, prompt, max_tokens=16, *, ids=False, **kw):
        """The whole output: text, or with ids=True the token ids."""
        s = self.stream(prompt, max_tokens, text=not ids, **kw)
        out = list(s)
        return out if ids else "".join(out)

    async def astream(self, prompt, max_tokens=16, *, temperature=0.0, top_p=1.0, top_k=0, seed=0,
                      stop=None, priority=0, text=True, add_bos=True, logprobs=False, top_logprobs=0,
                      prompt_logprobs=False, speculate=True, schema=None, regex=None, grammar=None,
                      deterministic=False):
        """As stream(), returning an AsyncStream bound to the running event loop."""
        return self._submit(prompt, asyncio.get_running_loop(), text, max_tokens, temperature, top_p,
                            top_k, seed, stop, priority, add_bos, logprobs, top_logprobs, prompt_logprobs,
                            speculate, schema, regex, grammar, deterministic=deterministic)

    async def agenerate(self, prompt, max_tokens=16, *, ids=False, **kw):
        s = await self.astream(prompt, max_tokens, text=not ids, **kw)
        out = [x async for x in s]
        return out if ids else "".join(out)

    # ---- chat: the model's own template (ChatML, Llama 3, Gemma ...), answers end at its end of turn
    def chat_prompt(self, messages):
        """The token ids of a conversation in the model's chat template, the assistant's turn
        opened at the end. messages: [{"role": "system"|"user"|"assistant", "content": str}]."""
        msgs = list(messages)
        if not msgs:
            raise RinglmError(_EINVAL, "ringlm: a chat needs at least one message")
        arr = (_capi.ChatMsg * len(msgs))()
        for i, m in enumerate(msgs):
            try:
                arr[i].role = str(m["role"]).encode("utf-8")
                arr[i].content = str(m["content"]).encode("utf-8")
            except (KeyError, TypeError):
                raise RinglmError(_EINVAL, "ringlm: message %d is not {'role': ..., 'content': ...}" % i) from None
        lib = _lib()
        with self._lock:
            self._check()
            n = lib.ringlm_chat_format(self._h, arr, len(msgs), None, 0)
            if n < 0:
                raise _error(n, "ringlm_chat_format")
            buf = ctypes.create_string_buffer(n + 1)
            n = lib.ringlm_chat_format(self._h, arr, len(msgs), buf, n + 1)
            if n < 0:
                raise _error(n, "ringlm_chat_format")
            return self._chat_ids(buf.value)

    def _chat_ids(self, text):
        """a chat template's text (bytes) as ids: its control tokens parsed, no BOS added"""
        cap = len(text) * 3 + 3
        ids = (ctypes.c_uint32 * cap)()
        k = _lib().ringlm_tokenize_ex(self._h, text, _capi.TOKENIZE_SPECIAL, ids, cap)
        if k < 0:
            raise _error(k, "ringlm_tokenize_ex")
        return list(ids[:k])

    def chat_stream(self, messages, max_tokens=256, **kw):
        """As stream(), for a conversation (see chat_prompt): the assistant's answer, streamed."""
        return self.stream(self.chat_prompt(messages), max_tokens, **kw)

    def chat(self, messages, max_tokens=256, **kw):
        """The assistant's whole answer to a conversation (see chat_prompt), as text."""
        return "".join(self.chat_stream(messages, max_tokens, **kw))

    def chat_message(self, messages, max_tokens=256, *, tools=None, tool_choice=None, parallel_tool_calls=None,
                     temperature=0.0, top_p=1.0, top_k=0, seed=0, priority=0, speculate=True,
                     deterministic=False):
        """The assistant's answer as an OpenAI chat message: {"role": "assistant", "content": str
        or None, "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}
        ("tool_calls" only when the answer makes calls). tools, tool_choice ("none", "auto" (the
        default with tools), "required", {"type": "function", "function": {"name": ...}}) and
        parallel_tool_calls are OpenAI's: the tools go into the prompt the way the model's
        template family writes them (ChatML as Hermes/Qwen2.5, Llama 3.1's JSON calls, Gemma's
        documented prompt), and a call's arguments hold to its tool's "parameters" schema.
        messages may carry assistant "tool_calls" and "tool" results. (ringlm_tools_* in C.)"""
        req = {"messages": list(messages)}
        for k, v in (("tools", tools), ("tool_choice", tool_choice), ("parallel_tool_calls", parallel_tool_calls)):
            if v is not None:
                req[k] = v
        b = json.dumps(req).encode()
        lib = _lib()
        h = ctypes.c_void_p()
        with self._lock:
            self._check()
            rc = lib.ringlm_tools_create(self._h, b, len(b), ctypes.byref(h))
            if rc:
                raise _error(rc, "ringlm_tools_create")
            try:
                ids = self._chat_ids(lib.ringlm_tools_prompt(h))
            except RinglmError:
                lib.ringlm_tools_destroy(h)
                raise
        try:
            s = self._submit(ids, None, True, max_tokens, temperature, top_p, top_k, seed, None, priority, False,
                             speculate=speculate, cons=lib.ringlm_tools_constraint(h), deterministic=deterministic)
            text = "".join(s).encode()
            n = lib.ringlm_tools_parse(h, text, len(text), None, 0)
            buf = ctypes.create_string_buffer(max(n, 0) + 1)
            if n < 0 or lib.ringlm_tools_parse(h, text, len(text), buf, n + 1) < 0:
                raise _error(n if n < 0 else _EINVAL, "ringlm_tools_parse")
        finally:
            lib.ringlm_tools_destroy(h)
        return dict({"role": "assistant"}, **json.loads(buf.value.decode()))

    async def achat(self, messages, max_tokens=256, **kw):
        s = await self.astream(self.chat_prompt(messages), max_tokens, **kw)
        return "".join([x async for x in s])

    def _cancel(self, rid, tag):
        lib = _lib()
        deadline = time.monotonic() + self._submit_timeout
        while tag in self._reqs:
            with self._lock:
                if self._h is None:
                    return
                rc = lib.ringlm_cancel(self._h, rid)
            if rc == 0 or rc == _EINVAL:   # sent, or it has ended meanwhile
                return
            if rc != _EAGAIN or time.monotonic() > deadline:
                raise _error(rc, "ringlm_cancel")
            time.sleep(0.0005)

    # ---- vocabulary, info, stats
    def tokenize(self, text, add_bos=True):
        data = text.encode("utf-8")
        cap = 3 * len(data) + 3
        buf = (ctypes.c_uint32 * cap)()
        with self._lock:
            self._check()
            n = _lib().ringlm_tokenize(self._h, data, 1 if add_bos else 0, buf, cap)
            if n < 0:
                raise _error(n, "ringlm_tokenize")
        return list(buf[:n])

    def detokenize(self, ids, prev=None):
        """The text of ids (prev: the id before them, for SentencePiece's leading space)."""
        ts = _capi.TextStream()
        _lib().ringlm_textstream_init(ctypes.byref(ts), 0xFFFFFFFF if prev is None else prev)
        out = [self._text_piece(ts, int(i)) for i in ids]
        out.append(self._text_flush(ts))
        return "".join(out)

    def _text_piece(self, ts, token):
        buf = ctypes.create_string_buffer(520)
        with self._lock:
            if self._h is None:
                return ""
            n = _lib().ringlm_textstream_push(self._h, ctypes.byref(ts), token, buf, 520)
            if n < 0:
                raise _error(n, "ringlm_textstream_push")
        return buf.raw[:n].decode("utf-8", "replace")

    def _text_flush(self, ts):
        buf = ctypes.create_string_buffer(8)
        n = _lib().ringlm_textstream_flush(ctypes.byref(ts), buf, 8)
        return buf.raw[:n].decode("utf-8", "replace")

    def stats(self):
        """The runtime's live stats (a dict; ringlm stats --json prints the same)."""
        buf = ctypes.create_string_buffer(16384)
        with self._lock:
            self._check()
            n = _lib().ringlm_stats_json(self._h, buf, len(buf))
            if n < 0:
                raise _error(n, "ringlm_stats_json")
        return json.loads(buf.raw[:n].decode())
