"""`ringlm export-hf` on the real models (SmolLM2-135M-Instruct: byte-level BPE, ChatML; Gemma 3
270M: SentencePiece, Gemma turns), checked by Hugging Face's own code in the Dynamo venv
(.ci/dynamo; hf_export_check.py): tokenizers.Tokenizer over the exported tokenizer.json gives
llama.cpp's ids (tests/fixtures/llamacpp, which ringlm's tokenizer equals) for all 217 strings,
with special tokens parsed and without; transformers' apply_chat_template over the folder
(Jinja2 from .ci/jinja) gives the ids ringlm prefills (`ringlm tokenize --chat`) for several
conversations. Skipped, saying why, when a model, the venv or Jinja2 is missing."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RINGLM = os.path.join(REPO, "build", "ringlm")
FIX = os.path.join(REPO, "tests", "fixtures", "llamacpp")
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m"]
CONVS = [
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hello there! ¿Qué tal? 你好 🙂"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "  Tell me a joke.\n\nPlease.  "}],
    [{"role": "system", "content": "Be nice.\nAlways."}, {"role": "user", "content": "a"},
     {"role": "assistant", "content": "b"}, {"role": "user", "content": "<|im_start|> <start_of_turn> c\t\n"}],
]


def cache_dir(script):
    r = subprocess.run(["bash", os.path.join(REPO, ".ci", script), "--dir"], capture_output=True, text=True)
    d = r.stdout.strip()
    return d if d and os.path.exists(os.path.join(d, ".ok")) else None


def venv_python():
    d = cache_dir("dynamo")
    py = d and os.path.join(d, "bin", "python")
    if not py or not os.path.exists(py):
        pytest.skip("the Dynamo venv (tokenizers, transformers) is missing: .ci/dynamo could not make it (offline?); "
                    "make test runs it")
    return py


def gguf(name):
    sys.path.insert(0, os.path.join(REPO, "clients"))
    from real_models import REAL_WHY, real_model
    m = real_model(name + ".gguf")
    if not m:
        pytest.skip(name + ".gguf " + REAL_WHY)
    return m


@pytest.fixture(scope="module", params=MODELS)
def exported(request, tmp_path_factory):
    m = gguf(request.param)
    d = str(tmp_path_factory.mktemp("hf-" + request.param))
    r = subprocess.run([RINGLM, "export-hf", m, d], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return request.param, m, d


def test_export_hf_files(exported):
    name, m, d = exported
    tc = json.load(open(os.path.join(d, "tokenizer_config.json")))
    cfg = json.load(open(os.path.join(d, "config.json")))
    gc = json.load(open(os.path.join(d, "generation_config.json")))
    gemma = name.startswith("gemma")
    assert tc["add_bos_token"] is gemma     # the fixtures: Gemma's texts begin with BOS, SmolLM2's do not
    assert tc["eos_token"] == ("<eos>" if gemma else "<|im_end|>")
    assert "chat_template" in tc and tc["model_max_length"] == cfg["max_position_embeddings"]
    assert cfg["model_type"] == ("gemma3_text" if gemma else "llama")
    assert cfg["vocab_size"] == (262144 if gemma else 49152)
    assert gc["eos_token_id"][0] == cfg["eos_token_id"]
    assert set(gc["eos_token_id"]) >= ({1, 106} if gemma else {2, 0})   # llama.cpp's end-of-generation ids


def test_export_hf_tokenizer_equals_llamacpp(exported):
    name, m, d = exported
    py = venv_python()
    r = subprocess.run([py, os.path.join(HERE, "hf_export_check.py"), "ids", d, os.path.join(FIX, "tok_" + name + ".json"),
                        os.path.join(FIX, "strings.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    n = len(json.load(open(os.path.join(FIX, "strings.json"))))
    assert not res["ids_special"] and not res["ids"], (
        "%s: %d/%d equal with special tokens parsed, %d/%d without; first: %r"
        % (name, n - len(res["ids_special"]), n, n - len(res["ids"]), n, res["first"]))


def test_export_hf_chat_template_equals_ringlm(exported, tmp_path):
    name, m, d = exported
    py = venv_python()
    jinja = cache_dir("jinja")
    if not jinja:
        pytest.skip("Jinja2 for transformers' apply_chat_template is missing: .ci/jinja could not fetch it "
                    "(offline?); make test runs it")
    convs = tmp_path / "convs.json"
    convs.write_text(json.dumps(CONVS))
    env = dict(os.environ, PYTHONPATH=jinja)
    r = subprocess.run([py, os.path.join(HERE, "hf_export_check.py"), "chat", d, str(convs)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    hf = json.loads(r.stdout)
    for c, got in zip(CONVS, hf):
        t = subprocess.run([RINGLM, "tokenize", "--model", m, "--chat", "-"], input=json.dumps(c),
                           capture_output=True, text=True, timeout=60)
        assert t.returncode == 0, t.stderr
        want = [int(x) for x in t.stdout.split()]
        assert got == want, (name, c, got, want)
