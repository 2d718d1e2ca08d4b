#!/usr/bin/env python3
"""Exact float64 numpy reference forward pass for GGUF llama-family and gemma3 models.

This is the reference that ringlm's and llama.cpp's prompt log-probabilities are
compared with (see tests/fixtures/real/gen_ref_logprobs.py, which writes the
tests/fixtures/real/logprobs_<model>.json fixtures from it).

Every tensor is dequantized with gguf-py into float64 (the block scales and
quants are widened to float64 before they are multiplied, so Q4_1/Q4_K/Q6_K
weights are the exact d*q(+m) values, not float32-rounded ones) and all of the
math - embeddings, RMSNorm, RoPE, attention, FFN, logits, log-softmax - is done in
float64. There is no activation quantization and no f16 KV cache: it is the
exact function the quantized weights define, with llama.cpp's graph semantics
(src/models/llama.cpp, src/models/gemma3.cpp at llama.cpp 0c1e570).

Checked against llama.cpp 0c1e570 run on an all-F32 copy of the same GGUF (the same
weights; F32 KV cache, flash attention off, so no activation quantization): mean
|d log p| 1.1e-6 for SmolLM2-135M (llama), 6.3e-4 for gemma-3-270m (ggml's CPU GELU
reads an fp16 table; with that emulated the per-op match is ~1e-7). Against llama.cpp
on the quantized file itself the gap is ~0.04-0.06 mean: its CPU matmuls quantize the
activations to 8 bits (see gen_ref_logprobs.py).

It is NOT run by `make test` (it needs numpy, gguf-py and the real model files,
and takes a while to dequantize the weights). Run it by hand:

    python3 tests/ref/ref_forward.py MODEL.gguf --ids 1,2,3

prints {"model", "ids", "logprobs": [log p(ids[i+1] | ids[:i+1]) for i in 0..n-2],
"argmax": [...]} as JSON. From Python: `logprobs(path, ids)`.

Supported architectures:
  llama  : RMSNorm -> GQA attention with RoPE NORM (adjacent pairs (2i, 2i+1);
           the GGUF converter permuted q/k so this matches HF's rotate_half),
           scale 1/sqrt(head_dim) -> residual -> RMSNorm -> SiLU-gated FFN ->
           residual; tied output = token_embd when output.weight is absent;
           rope_freqs.weight (Llama 3) divides the RoPE frequencies.
           Optional q/k/v/o biases are added when the file has them.
  gemma3 : embedding * sqrt(n_embd); per-layer: attn_norm, q/k per-head
           RMSNorm (weights already have Gemma's +1 folded in by the converter,
           so every norm is x*w), RoPE NEOX (halves (i, i+d/2)), local layers
           (il % 6 < 5) use freq_base_swa (default 10000) and a sliding window
           (key masked when q_pos - k_pos >= n_swa), global layers the model's
           freq_base; q scaled by 1/sqrt(head_dim) after RoPE (27B:
           1/sqrt(n_embd/n_head));
           post_attention_norm before the residual add; ffn_norm; GELU(tanh)
           gated FFN; post_ffw_norm before the residual add; output_norm;
           optional final logit softcapping.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import gguf
import gguf.quants as _gq


# ---------------------------------------------------------------------------
# float64 dequantization via gguf-py
# ---------------------------------------------------------------------------

class _NumpyF64:
    """Stand-in for the numpy module inside gguf.quants: np.float32 -> np.float64.

    gguf-py's block dequantizers widen fp16 scales / integer quants with
    .astype(np.float32) and allocate their output as float32; with this proxy the
    same code computes d*q(+m) in float64, so the weights are exact."""

    def __getattr__(self, name):
        if name == "float32":
            return np.float64
        return getattr(np, name)


def dequantize_f64(t):
    """GGUF tensor -> float64 ndarray of shape reversed(ne) (row-major, ne0 innermost)."""
    qt = t.tensor_type
    shape = tuple(int(x) for x in reversed(t.shape.tolist()))
    if qt == gguf.GGMLQuantizationType.F32:
        return np.asarray(t.data, dtype=np.float32).astype(np.float64).reshape(shape)
    if qt == gguf.GGMLQuantizationType.F16:
        return np.asarray(t.data, dtype=np.float16).astype(np.float64).reshape(shape)
    if qt == gguf.GGMLQuantizationType.BF16:
        u = np.asarray(t.data).view(np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64).reshape(shape)
    saved = _gq.np
    _gq.np = _NumpyF64()
    try:
        w = _gq.dequantize(np.asarray(t.data), qt)
    finally:
        _gq.np = saved
    assert w.dtype == np.float64, (t.name, w.dtype)
    return w.reshape(shape)


# ---------------------------------------------------------------------------
# model loading
# ---------------------------------------------------------------------------

class Model:
    def __init__(self, path):
        self.path = path
        r = gguf.GGUFReader(path)
        self.kv = {}
        for k, f in r.fields.items():
            if k.startswith("tokenizer.ggml.") and k.endswith(("tokens", "scores", "token_type", "merges")):
                continue
            try:
                self.kv[k] = f.contents()
            except Exception:
                pass
        self.arch = self.kv["general.architecture"]
        a = self.arch
        g = lambda k, d=None: self.kv.get(f"{a}.{k}", d)
        self.n_embd = int(g("embedding_length"))
        self.n_layer = int(g("block_count"))
        self.n_head = int(g("attention.head_count"))
        self.n_head_kv = int(g("attention.head_count_kv", self.n_head))
        self.head_dim = int(g("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(g("attention.value_length", self.head_dim))
        self.n_rot = int(g("rope.dimension_count", self.head_dim))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.freq_base = float(g("rope.freq_base", 10000.0))
        self.freq_scale = 1.0
        st = g("rope.scaling.type")
        if st not in (None, "none"):
            if st == "linear":
                self.freq_scale = 1.0 / float(g("rope.scaling.factor"))
            else:
                raise NotImplementedError(f"rope scaling {st}")
        self.n_swa = int(g("attention.sliding_window", 0) or 0)
        self.freq_base_swa = float(g("rope.freq_base_swa", 10000.0))
        self.softcap = float(g("final_logit_softcapping", 0.0) or 0.0)
        if a == "gemma3":
            pat = g("attention.sliding_window_pattern", 6)
            if isinstance(pat, list):
                self.is_swa = [bool(x) for x in pat]
            else:
                pat = int(pat)
                self.is_swa = [self.n_swa > 0 and (pat == 0 or il % pat < pat - 1)
                               for il in range(self.n_layer)]
            self.rope_neox = True
        elif a == "llama":
            self.is_swa = [False] * self.n_layer
            self.rope_neox = False
        else:
            raise NotImplementedError(f"architecture {a}")

        t0 = time.time()
        self.w = {t.name: dequantize_f64(t) for t in r.tensors}
        self.load_s = time.time() - t0
        # gemma3 27B (62 layers) scales queries by 1/sqrt(n_embd/n_head), the others 1/sqrt(head_dim)
        if a == "gemma3" and self.n_layer == 62:
            self.attn_scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
        else:
            self.attn_scale = 1.0 / math.sqrt(self.head_dim)
        # tok_embd: [n_vocab, n_embd]; output: [n_vocab, n_embd] (tied if absent)
        self.tok_embd = self.w["token_embd.weight"]
        self.output = self.w.get("output.weight", self.tok_embd)
        self.n_vocab = self.tok_embd.shape[0]

    def L(self, il, name):
        return self.w.get(f"blk.{il}.{name}")


# ---------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------

def rms_norm(x, w, eps):
    # x: [..., d]; w: [d]  (ggml_rms_norm then ggml_mul)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def linear(x, w, b=None):
    # x: [n, in]; w: [out, in] (GGUF ne = (in, out)); -> [n, out]
    y = x @ w.T
    return y if b is None else y + b


def rope(x, pos, n_rot, base, freq_scale, neox, freq_factors=None):
    """x: [n_tok, n_heads, head_dim]; pos: [n_tok]. ggml_rope_ext, ext_factor 0, attn_factor 1.
    freq_factors: [n_rot/2] or None (Llama 3's rope_freqs.weight: theta_i / factor_i)."""
    x = x.copy()
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)       # [half]
    if freq_factors is not None:
        inv = inv / freq_factors
    theta = (pos.astype(np.float64)[:, None] * freq_scale) * inv[None, :]  # [n_tok, half]
    c = np.cos(theta)[:, None, :]                                          # [n_tok, 1, half]
    s = np.sin(theta)[:, None, :]
    if neox:   # pairs (i, i + n_rot/2)
        x0 = x[..., :half].copy()
        x1 = x[..., half:n_rot].copy()
        x[..., :half] = x0 * c - x1 * s
        x[..., half:n_rot] = x0 * s + x1 * c
    else:      # NORM: adjacent pairs (2i, 2i+1)
        x0 = x[..., 0:n_rot:2].copy()
        x1 = x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2] = x0 * c - x1 * s
        x[..., 1:n_rot:2] = x0 * s + x1 * c
    return x


def gelu_tanh(x):
    # ggml_gelu's formula (tanh approximation). ggml's CPU backend evaluates it through
    # an fp16 lookup table (GGML_GELU_FP16); the reference uses the exact formula.
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * x * (1.0 + 0.044715 * x * x)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def attention(q, k, v, mask, scale):
    """q: [n, H, d]; k: [n, Hkv, d]; v: [n, Hkv, dv]; mask: [n, n] bool (True = keep).
    Head h uses kv head h // (H/Hkv) (ggml mul_mat broadcast). -> [n, H*dv]"""
    n, H, _ = q.shape
    Hkv = k.shape[1]
    g = H // Hkv
    kk = np.repeat(k, g, axis=1)                                   # [n, H, d]
    vv = np.repeat(v, g, axis=1)                                   # [n, H, dv]
    s = np.einsum("qhd,khd->hqk", q, kk) * scale                    # [H, n_q, n_k]
    s = np.where(mask[None, :, :], s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("hqk,khd->qhd", p, vv)                            # [n, H, dv]
    return o.reshape(n, H * vv.shape[-1])


def forward_logits(m, ids, trace=None):
    """ids: n token ids -> logits [n, n_vocab] (float64).

    trace: optional dict; filled with intermediates named like llama.cpp's graph
    callbacks ("attn_norm-IL", "Qcur_normed-IL", "kqv_out-IL", "ffn_out-IL",
    "l_out-IL", "result_norm"), each [n, ...] float64, for layer-by-layer checks."""
    tr = (lambda k, v: trace.__setitem__(k, v)) if trace is not None else (lambda k, v: None)
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    pos = np.arange(n)
    causal = pos[None, :] <= pos[:, None]                          # [n_q, n_k]
    swa_mask = causal & ((pos[:, None] - pos[None, :]) < m.n_swa) if m.n_swa > 0 else causal
    x = m.tok_embd[ids]                                            # [n, n_embd]
    gemma = m.arch == "gemma3"
    if gemma:
        x = x * math.sqrt(m.n_embd)
    H, Hkv, d, dv = m.n_head, m.n_head_kv, m.head_dim, m.head_dim_v
    for il in range(m.n_layer):
        W = lambda name: m.L(il, name)
        h = rms_norm(x, W("attn_norm.weight"), m.eps)              # [n, n_embd]
        tr(f"attn_norm-{il}", h)
        q = linear(h, W("attn_q.weight"), W("attn_q.bias")).reshape(n, H, d)
        k = linear(h, W("attn_k.weight"), W("attn_k.bias")).reshape(n, Hkv, d)
        v = linear(h, W("attn_v.weight"), W("attn_v.bias")).reshape(n, Hkv, dv)
        if W("attn_q_norm.weight") is not None:                    # per-head, over d
            q = rms_norm(q, W("attn_q_norm.weight"), m.eps)
            k = rms_norm(k, W("attn_k_norm.weight"), m.eps)
            tr(f"Qcur_normed-{il}", q)
        swa = m.is_swa[il]
        base = m.freq_base_swa if swa else m.freq_base
        fs = 1.0 if swa else m.freq_scale
        ff = m.w.get("rope_freqs.weight")                          # [n_rot/2] or None
        q = rope(q, pos, m.n_rot, base, fs, m.rope_neox, ff)
        k = rope(k, pos, m.n_rot, base, fs, m.rope_neox, ff)
        a = attention(q, k, v, swa_mask if swa else causal, m.attn_scale)  # [n, H*dv]
        tr(f"kqv_out-{il}", a)
        a = linear(a, W("attn_output.weight"), W("attn_output.bias"))            # [n, n_embd]
        if gemma:
            a = rms_norm(a, W("post_attention_norm.weight"), m.eps)
        x = x + a
        h = rms_norm(x, W("ffn_norm.weight"), m.eps)
        gt = linear(h, W("ffn_gate.weight"))                       # [n, n_ff]
        up = linear(h, W("ffn_up.weight"))                         # [n, n_ff]
        act = gelu_tanh(gt) if gemma else silu(gt)
        f = linear(act * up, W("ffn_down.weight"))                 # [n, n_embd]
        tr(f"ffn_out-{il}", f)
        if gemma:
            f = rms_norm(f, W("post_ffw_norm.weight"), m.eps)
        x = x + f
        tr(f"l_out-{il}", x)
    x = rms_norm(x, m.w["output_norm.weight"], m.eps)
    tr("result_norm", x)
    logits = x @ m.output.T                                        # [n, n_vocab]
    if m.softcap:
        logits = np.tanh(logits / m.softcap) * m.softcap
    return logits


def log_softmax(logits):
    # logits: [n, V] -> [n, V]
    mx = logits.max(axis=-1, keepdims=True)
    return logits - mx - np.log(np.exp(logits - mx).sum(axis=-1, keepdims=True))


_cache = {}


def load(path):
    if path not in _cache:
        _cache.clear()
        _cache[path] = Model(path)
    return _cache[path]


def logprobs_and_argmax(path, ids):
    m = load(path)
    lp = log_softmax(forward_logits(m, ids))                       # [n, V]
    out = [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)]
    am = [int(a) for a in lp.argmax(axis=-1)[: len(ids) - 1]]
    return out, am


def logprobs(path, ids):
    """log p(ids[i+1] | ids[:i+1]) for i in 0..n-2 (float64, as Python floats)."""
    return logprobs_and_argmax(path, ids)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    a = ap.parse_args()
    ids = [int(s) for s in a.ids.split(",") if s.strip()]
    lp, am = logprobs_and_argmax(a.model, ids)
    json.dump({"model": os.path.basename(a.model), "ids": ids, "logprobs": lp, "argmax": am},
              sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
