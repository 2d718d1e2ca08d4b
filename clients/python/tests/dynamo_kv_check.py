"""Run by test_kv_events.py with the Dynamo venv's python (.ci/dynamo): Dynamo 1.6.1's own KV
router relays a running ringlmd's --kv-events endpoint and scores prompts served through it.

    python dynamo_kv_check.py SOCKET ENDPOINT RINGLM_CLI

Dynamo's side, in this process, with no etcd and no NATS: DistributedRuntime("mem", "tcp",
event plane zmq); the endpoint's instance and a model registered with KV events on (without
either the router lists no worker); KvEventPublisher relaying ENDPOINT (vLLM's ZMQ format); a
KvRouter (use_kv_events) whose indexer the events feed. The wheel's stub lists KvIndexer, but
1.6.1's binary does not export it: KvRouter wraps the same Rust indexer and reports its matches
per worker (get_overlap_scores: device_blocks). The router hashes the blocks' token ids itself,
so a match also checks that ringlmd's events carry the prompt's exact tokens.
Prints one line per check; exits 0 when all hold."""
import asyncio
import os
import subprocess
import sys
import time

os.environ.setdefault("DYN_LOG", "off")
from dynamo._core import (DistributedRuntime, KvEventPublisher, KvRouter, KvRouterConfig,  # noqa: E402
                          ModelInput, ModelRuntimeConfig, ModelType, WorkerType, register_model)

B = 16
SOCK, EP, RINGLM = sys.argv[1:4]
failed = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failed.append(what)


def prompt(seed, n):
    return [100 + (seed * 7919 + i * 37) % 40000 for i in range(n)]


def run(*args):
    r = subprocess.run([RINGLM, *args, "--socket", SOCK], capture_output=True, text=True, timeout=60)
    if r.returncode:
        raise RuntimeError("ringlm %s: %s" % (args[0], r.stderr.strip()))


def serve(ids):
    run("generate", "--prompt-ids", ",".join(map(str, ids)), "-n", "1")


async def main():
    rt = DistributedRuntime(asyncio.get_running_loop(), "mem", "tcp", event_plane="zmq")
    ep = rt.endpoint("ringlm.worker.generate")
    worker = ep.connection_id()
    await ep.register_endpoint_instance()
    rc = ModelRuntimeConfig()
    rc.kv_event_publishing_enabled = True
    # a tensor model: Dynamo reads no tokenizer or card for it (a chat model's name would be looked
    # up on the Hugging Face hub)
    await register_model(ModelInput.Tensor, ModelType.TensorBased, ep, "ringlm-kv-check",
                         worker_type=WorkerType.Aggregated, kv_cache_block_size=B, runtime_config=rc)
    pub = KvEventPublisher(ep, kv_block_size=B, zmq_endpoint=EP, zmq_topic="kv@")
    router = KvRouter(ep, B, KvRouterConfig(use_kv_events=True))

    async def blocks(ids):
        r = await router.get_overlap_scores(ids, include_shared=False)
        return sum(w["device_blocks"] for w in r["workers"] if w["worker_id"] == worker and w["dp_rank"] == 0)

    async def wait_for(ids, ok, timeout=10.0):
        t0, n = time.monotonic(), None
        while time.monotonic() - t0 < timeout:
            n = await blocks(ids)
            if ok(n):
                return n
            await asyncio.sleep(0.02)
        return n

    # both hops (ringlmd -> relay, relay -> router) join a moment after they connect and drop
    # what came before: serve fresh one-block prompts until the router hears one
    ready = False
    for k in range(60):
        ids = prompt(5000 + k, B)
        serve(ids)
        if await wait_for(ids, lambda n: n == 1, 0.3) == 1:
            ready = True
            break
    check(ready, "the router hears ringlmd's events (after %d probe prompts)" % (k + 1))
    run("reset-cache")
    check(await wait_for(ids, lambda n: n == 0) == 0, "AllBlocksCleared after a reset: the probe's block is gone")

    ids = prompt(11, 100)
    t0 = time.monotonic()
    serve(ids)
    n = await wait_for(ids, lambda n: n == 100 // B)
    check(n == 100 // B, "a served 100-token prompt: %s of %d blocks on this worker (%.0f ms after the request)"
          % (n, 100 // B, 1000 * (time.monotonic() - t0)))
    check(await blocks(ids[:3 * B]) == 3, "its first 3 blocks match a 48-token prefix")
    check(await blocks(prompt(12, 100)) == 0, "another prompt matches nothing")
    for s in (21, 22, 23):                 # 36 more cached blocks in a 40-block pool
        serve(prompt(s, 12 * B + 1))
    n = await wait_for(ids, lambda n: n < 100 // B)
    check(n is not None and n < 100 // B, "after eviction: %s blocks of the first prompt left" % n)
    run("reset-cache")
    check(await wait_for(prompt(23, 12 * B), lambda n: n == 0) == 0 and await blocks(ids) == 0,
          "after a reset: none")
    pub.shutdown()
    rt.shutdown()


asyncio.run(main())
print("%d failed" % len(failed))
sys.exit(1 if failed else 0)
