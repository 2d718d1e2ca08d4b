"""ringlm as a worker of NVIDIA Dynamo: an LLMEngine (dynamo.common.backend, ai-dynamo 1.6.1)
that streams each request through the rings to a running ringlmd, token ids in, token ids out.

    python -m ringlm.dynamo --socket NAME --hf-dir DIR [--kv-events tcp://127.0.0.1:P]
        [--model-name NAME] [--endpoint dyn://NS.COMPONENT.ENDPOINT]
        [--discovery-backend etcd|file|mem|kubernetes] [--request-plane tcp|nats]
        [--response-plane tcp|quic] [--event-plane zmq|nats]

Run it with the Dynamo venv's python (the rest of the package needs no Dynamo: this module is
the only one that imports it), the package on PYTHONPATH and RINGLM_LIB naming libringlm.so.
Dynamo's frontend tokenizes and renders chat from DIR (an HF-style folder: tokenizer.json,
tokenizer_config.json, config.json; `ringlm export-hf MODEL.gguf DIR` writes it).

What Dynamo's Worker (its Rust half) does and this engine does not: discovery registration,
serving the endpoint, watching each request's context (on a stop or kill it calls abort(), here
a cancel inside ringlmd), and on SIGTERM/SIGINT unregistering, waiting for in-flight requests
(its graceful-shutdown tracker; DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS,
DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT), then cleanup() and exit.

What this engine does:
- registers with ringlmd's KV block size, pool size (kv_blocks_total), context length,
  max_inflight (max_num_seqs) and step token budget (max_num_batched_tokens), read from the
  runtime at start();
- maps sampling_options (temperature, top_p, top_k, seed) and stop_conditions (max_tokens,
  stop_token_ids, stop_token_ids_hidden; stop strings are the frontend's) onto ringlm's request
  and refuses by name, as InvalidArgument, every option set to a value ringlm cannot honour
  (penalties, min_p, logit_bias, n/best_of > 1, beam search, ignore_eos, min_tokens, logprobs,
  guided decoding, more than 8 stop ids);
- publishes load (ComponentSnapshot: used/total KV blocks, usage, prefix-hit rate) from
  ringlm's stats every --stats-interval seconds (used = total - free: blocks held by running
  requests; cached blocks nobody holds count as free, as ringlm counts them);
- when ringlmd goes away, sends itself SIGTERM, so that Dynamo unregisters the worker and exits;
- on shutdown (cleanup(), which Dynamo calls after unregistering and a grace period, before it
  waits for its endpoints), lets the requests under way finish (--drain-timeout) before it
  detaches from ringlmd;
- with --kv-events, hands Dynamo a ZmqSource on ringlmd's own --kv-events endpoint (vLLM's ZMQ
  format; Dynamo's relay subscribes to it and feeds its KV router).
"""
import argparse
import asyncio
import errno
import logging
import os
import random
import signal
import sys
import threading

import ringlm

try:
    from dynamo.common.backend.engine import EngineConfig, LLMEngine, LlmRegistration
    from dynamo.common.backend.publisher import ComponentSnapshot, ZmqSource
    from dynamo.common.backend.run import run
    from dynamo.common.backend.worker import WorkerConfig
    from dynamo.llm.exceptions import EngineShutdown, HttpError, InvalidArgument
except ImportError as e:          # a python without ai-dynamo: say what to run it with
    if __name__ == "__main__":
        sys.exit("ringlm.dynamo needs NVIDIA Dynamo (ai-dynamo 1.6.1), e.g. the venv .ci/dynamo makes: %s" % e)
    raise

log = logging.getLogger("ringlm.dynamo")

# ringlmd overloaded, not the request wrong: it waited ringlmd --max-queue-ms unadmitted (ETIME), the
# runtime's request pool was full (ENOSPC), or its rings stayed full while submit retried (EAGAIN)
_OVERLOAD = (errno.ETIME, errno.ENOSPC, errno.EAGAIN)


def _overloaded(e):
    """e (a RinglmError) as an HttpError 503, which Dynamo 1.6.1's frontend answers as a 503 (an
    error chunk with code 503 once it streams). Not WorkerUnavailable: raised by a worker, that one
    reaches the client as a 500; EngineShutdown and Disconnected give 503s but say this worker is
    going away, which it is not."""
    return HttpError(503, "ringlm: the worker is overloaded; retry later (%s)" % e)

# ringlm's finish reasons as Dynamo's (OpenAI's) finish reasons
_FINISH = {"length": "length", "context": "length", "stop": "stop", "eos": "stop", "cancel": "cancelled"}

# sampling options ringlm has no knob for: name -> its neutral value(s) (None always passes)
_UNSUPPORTED_SAMPLING = {
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_p": (0, 0.0),
    "n": (1,),
    "best_of": (1,),
    "use_beam_search": (False,),
    "length_penalty": (1, 1.0),
}


def _empty(v):
    return v is None or v == {} or v == [] or v is False


def parse_endpoint(s):
    """dyn://ns.component.endpoint (or without the scheme) -> (ns, component, endpoint)"""
    s = s[len("dyn://"):] if s.startswith("dyn://") else s
    parts = s.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError("--endpoint must be dyn://NAMESPACE.COMPONENT.ENDPOINT, not %r" % s)
    return tuple(parts)


def request_params(request, info, max_stop=8):
    """Dynamo's GenerateRequest -> the keyword arguments of ringlm's Client.astream. Raises
    InvalidArgument naming the first option that ringlm cannot honour."""
    ids = [int(t) for t in request.get("token_ids") or []]
    if not ids:
        raise InvalidArgument("ringlm: the prompt is empty")
    so = request.get("sampling_options") or {}
    sc = request.get("stop_conditions") or {}
    oo = request.get("output_options") or {}
    for k, neutral in _UNSUPPORTED_SAMPLING.items():
        v = so.get(k)
        if v is not None and v not in neutral:
            raise InvalidArgument("ringlm does not support %s=%r" % (k, v))
    for k in ("logit_bias", "guided_decoding", "lora_name"):
        if not _empty(so.get(k)):
            raise InvalidArgument("ringlm's Dynamo worker does not support %s" % k)
    if sc.get("ignore_eos"):
        raise InvalidArgument("ringlm does not support ignore_eos (it always stops at the end of a turn)")
    if sc.get("min_tokens"):
        raise InvalidArgument("ringlm does not support min_tokens=%r" % sc["min_tokens"])
    for k in ("logprobs", "prompt_logprobs"):
        if oo.get(k) is not None:
            raise InvalidArgument("ringlm's Dynamo worker does not support %s yet" % k)

    max_ctx = int(info.get("max_ctx") or 0)
    if max_ctx and len(ids) >= max_ctx:
        raise InvalidArgument("ringlm: the prompt has %d tokens, the context holds %d" % (len(ids), max_ctx))
    room = max_ctx - len(ids) if max_ctx else None
    cap = int(info.get("max_new") or 0) or None
    mt = sc.get("max_tokens")
    if mt is None:
        mt = min(x for x in (room, cap, 1 << 30) if x is not None)
    mt = int(mt)
    if mt < 1:
        raise InvalidArgument("ringlm: max_tokens must be at least 1, not %d" % mt)
    if cap and mt > cap:
        raise InvalidArgument("ringlm: max_tokens=%d is above this runtime's limit of %d" % (mt, cap))

    # the model's own end of turn (info eos_id) ringlm stops at anyway: keep the 8 slots for the rest
    eos = info.get("eos_id")
    stop = []
    for t in list(sc.get("stop_token_ids") or []) + list(sc.get("stop_token_ids_hidden") or []):
        t = int(t)
        if t != eos and t not in stop:
            stop.append(t)
    if len(stop) > max_stop:
        raise InvalidArgument("ringlm supports at most %d stop_token_ids, not %d" % (max_stop, len(stop)))

    kw = {"max_tokens": mt, "stop": stop}
    t = so.get("temperature")
    kw["temperature"] = 1.0 if t is None else float(t)      # OpenAI's default is 1
    if so.get("top_p") is not None:
        kw["top_p"] = float(so["top_p"])
    if so.get("top_k") is not None:
        k = int(so["top_k"])
        kw["top_k"] = 0 if k < 0 else k                      # -1: no top-k, as vLLM
    # no seed: a fresh one per request (ringlm's seed 0 is a seed like any other)
    kw["seed"] = int(so["seed"]) if so.get("seed") is not None else random.getrandbits(63)
    return ids, kw


class RinglmEngine(LLMEngine):
    def __init__(self, socket, hf_dir, model_name, kv_events=None, stats_interval=0.1, drain_timeout=300.0):
        self.socket = socket
        self.hf_dir = hf_dir
        self.model_name = model_name
        self.kv_events = kv_events
        self.stats_interval = stats_interval
        self.drain_timeout = drain_timeout
        self.client = None
        self._active = 0                # generate() calls under way
        self.info = {}
        self._streams = {}              # Dynamo request id -> ringlm AsyncStream
        self._publisher = None
        self._stop = threading.Event()
        self._stats_thread = None
        self.last_stats = {}

    @classmethod
    async def from_args(cls, argv=None):
        p = argparse.ArgumentParser(prog="python -m ringlm.dynamo",
                                    description="ringlm as an NVIDIA Dynamo worker (a running ringlmd behind it)")
        p.add_argument("--socket", default="default", help="the ringlmd to serve through (its --socket)")
        p.add_argument("--hf-dir", required=True, help="HF-style folder the frontend tokenizes with (ringlm export-hf)")
        p.add_argument("--model-name", default=None, help="served model name (default: the folder's name)")
        p.add_argument("--kv-events", default=None, metavar="ENDPOINT",
                       help="ringlmd's --kv-events endpoint, relayed to Dynamo's KV router")
        p.add_argument("--endpoint", default="dyn://%s.backend.generate" % os.environ.get("DYN_NAMESPACE", "dynamo"),
                       help="dyn://NAMESPACE.COMPONENT.ENDPOINT (as dynamo.mocker)")
        p.add_argument("--endpoint-types", default="chat,completions")
        p.add_argument("--discovery-backend", choices=["kubernetes", "etcd", "file", "mem"],
                       default=os.environ.get("DYN_DISCOVERY_BACKEND", "etcd"))
        p.add_argument("--request-plane", choices=["nats", "tcp"], default=os.environ.get("DYN_REQUEST_PLANE", "tcp"))
        p.add_argument("--response-plane", choices=["tcp", "quic"], default=os.environ.get("DYN_RESPONSE_PLANE", "tcp"))
        p.add_argument("--event-plane", choices=["nats", "zmq"], default=os.environ.get("DYN_EVENT_PLANE"))
        p.add_argument("--stats-interval", type=float, default=0.1, help="seconds between load snapshots")
        p.add_argument("--drain-timeout", type=float, default=300.0,
                       help="on SIGTERM, seconds cleanup waits for in-flight requests before it detaches")
        a = p.parse_args(argv)
        ns, comp, ep = parse_endpoint(a.endpoint)
        hf_dir = os.path.abspath(a.hf_dir)
        name = a.model_name or os.path.basename(hf_dir.rstrip("/"))
        engine = cls(a.socket, hf_dir, name, a.kv_events, a.stats_interval, a.drain_timeout)
        wc = WorkerConfig(namespace=ns, component=comp, endpoint=ep, model_name=hf_dir, served_model_name=name,
                          endpoint_types=a.endpoint_types, discovery_backend=a.discovery_backend,
                          request_plane=a.request_plane, response_plane=a.response_plane,
                          event_plane=a.event_plane)
        return engine, wc

    async def start(self, worker_id):
        try:
            self.client = ringlm.Client(socket=self.socket)
            st = self.client.stats()
        except ringlm.RinglmError as e:
            raise EngineShutdown("ringlm: cannot reach ringlmd on socket %r: %s" % (self.socket, e)) from e
        self.info = dict(self.client.info)
        self.last_stats = st
        bs = int(st.get("block_size") or 0) or None
        total = int(st.get("kv_blocks_total") or 0) or None
        max_ctx = int(self.info.get("max_ctx") or 0) or None
        seqs = int(self.info.get("max_inflight") or 0) or None
        budget = int(st.get("budget") or 0) or None     # the step's token budget (with auto: as at start)
        log.info("ringlm: serving %s through %s (block %s, %s blocks, ctx %s)", self.model_name, self.socket, bs,
                 total, max_ctx)
        return EngineConfig(model=self.hf_dir, served_model_name=self.model_name,
                            llm=LlmRegistration(context_length=max_ctx, kv_cache_block_size=bs, total_kv_blocks=total,
                                                max_num_seqs=seqs, max_num_batched_tokens=budget))

    # ---- requests
    async def generate(self, request, context):
        if self.client is None:
            raise EngineShutdown("ringlm: the engine is not started")
        self._active += 1
        try:
            async for chunk in self._generate(request, context):
                yield chunk
        finally:
            self._active -= 1

    async def _generate(self, request, context):
        log.debug("ringlm: request %s", {k: v for k, v in request.items() if k != "token_ids"})
        ids, kw = request_params(request, self.info)
        rid = context.id()
        try:
            s = await self.client.astream(ids, text=False, **kw)
        except ringlm.RinglmError as e:
            if e.errno == 22:
                raise InvalidArgument(str(e)) from e
            if e.errno in _OVERLOAD:
                raise _overloaded(e) from e
            raise
        if rid is not None:
            self._streams[rid] = s
        if context.is_stopped():
            s.cancel()
        n = 0
        try:
            q = s._req.q
            while True:
                toks, done = [], False
                item = await q.get()
                while True:
                    try:
                        v, end = s._handle(item)
                    except ringlm.RinglmError as e:   # the request's ERROR event
                        if e.errno in _OVERLOAD:
                            s._ended = True
                            raise _overloaded(e) from e
                        raise
                    if v is not None:
                        toks.append(v)
                    if end:
                        done = True
                        break
                    try:
                        item = q.get_nowait()      # what else has come: one chunk
                    except asyncio.QueueEmpty:
                        break
                n += len(toks)
                if not done:
                    yield {"token_ids": toks, "index": 0}
                    continue
                s._ended = True
                yield {"token_ids": toks, "index": 0, "finish_reason": _FINISH.get(s.finish_reason, "stop"),
                       "completion_usage": {"prompt_tokens": len(ids), "completion_tokens": n,
                                            "total_tokens": len(ids) + n}}
                return
        finally:
            if rid is not None:
                self._streams.pop(rid, None)
            if not s._ended:               # the Worker stopped reading us: the request must not run on
                try:
                    s.cancel()
                except ringlm.RinglmError:
                    pass

    async def abort(self, context):
        s = self._streams.get(context.id())
        if s is not None and not s._ended:
            try:
                s.cancel()
            except ringlm.RinglmError as e:
                log.warning("ringlm: cancel of %s failed: %s", context.id(), e)

    # ---- routing inputs
    async def kv_event_sources(self):
        if not self.kv_events:
            return []
        return [ZmqSource(endpoint=self.kv_events, topic="kv@", dp_rank=0)]

    def component_metrics_dp_ranks(self):
        return [0]

    def attach_snapshot_publisher(self, publisher):
        self._publisher = publisher
        self._stats_thread = threading.Thread(target=self._publish_loop, name="ringlm-dynamo-load", daemon=True)
        self._stats_thread.start()

    def snapshot(self, st):
        total = int(st.get("kv_blocks_total") or 0)
        used = max(0, total - int(st.get("kv_blocks_free") or 0))
        q = int(st.get("prefix_query_tokens") or 0)
        hit = (int(st.get("prefix_hit_tokens") or 0) / q) if q else None
        return ComponentSnapshot(kv_used_blocks=used, kv_total_blocks=total,
                                 gpu_cache_usage=(used / total) if total else 0.0, dp_rank=0, kv_cache_hit_rate=hit)

    def _publish_loop(self):
        while not self._stop.wait(self.stats_interval):
            c, pub = self.client, self._publisher
            if c is None or pub is None:
                continue
            if c._gone is not None:
                # ringlmd is gone: leave the pool (the Worker's own SIGTERM path unregisters and exits)
                # rather than take requests that can only fail
                log.error("ringlm: ringlmd on %r is gone (%s); shutting the worker down", self.socket, c._gone)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            try:
                st = c.stats()
                self.last_stats = st
                pub.publish(0, self.snapshot(st))
            except ringlm.RinglmError as e:
                log.warning("ringlm: stats: %s", e)
            except Exception:
                log.exception("ringlm: publishing load failed")

    async def cleanup(self):
        # Dynamo's Worker calls this after unregistering and its grace period
        # (DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS), before it waits for its endpoints: closing the
        # client now would cancel what is still streaming, so the requests under way finish first
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if self._active:
            log.info("ringlm: draining %d request(s) before detaching", self._active)
        while self._active and loop.time() - t0 < self.drain_timeout:
            await asyncio.sleep(0.05)
        if self._active:
            log.warning("ringlm: %d request(s) still running after %.0f s; detaching cancels them",
                        self._active, self.drain_timeout)
        self._stop.set()
        t, self._stats_thread = self._stats_thread, None
        if t is not None:
            await asyncio.get_running_loop().run_in_executor(None, t.join, 5)
        c, self.client = self.client, None
        if c is not None:
            c.close()


def main(argv=None):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    run(RinglmEngine, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
