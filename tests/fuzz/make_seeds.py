#!/usr/bin/env python3
"""make_seeds.py OUT_DIR — the model-file seeds of the safetensors fuzzer, written at fuzz time
(stdlib only) rather than committed: one F32 and one BF16 safetensors file for the fixed
config.json in fuzz_safetensors.c (hidden 8, intermediate 16, 1 layer, 2 heads, 1 kv head,
vocab 16, tied embeddings). The GGUF seeds come from `ringlm mkmodel` (tests/fuzz/run.sh)."""
import json, os, random, struct, sys

D, H, V, HD = 8, 16, 16, 4          # dim, hidden, vocab, head_dim (2 heads of 4, 1 kv head)
SHAPES = {
    "model.embed_tokens.weight": [V, D],
    "model.norm.weight": [D],
    "model.layers.0.input_layernorm.weight": [D],
    "model.layers.0.post_attention_layernorm.weight": [D],
    "model.layers.0.self_attn.q_proj.weight": [2 * HD, D],
    "model.layers.0.self_attn.k_proj.weight": [HD, D],
    "model.layers.0.self_attn.v_proj.weight": [HD, D],
    "model.layers.0.self_attn.o_proj.weight": [D, 2 * HD],
    "model.layers.0.mlp.gate_proj.weight": [H, D],
    "model.layers.0.mlp.up_proj.weight": [H, D],
    "model.layers.0.mlp.down_proj.weight": [D, H],
}

def write(path, dtype):
    rnd = random.Random(1)
    header, blobs, off = {}, [], 0
    for name, shape in SHAPES.items():
        n = 1
        for s in shape:
            n *= s
        vals = [rnd.uniform(-0.5, 0.5) for _ in range(n)]
        raw = struct.pack("<%df" % n, *vals)
        if dtype == "BF16":        # the high half of each f32 (truncation is fine for a seed)
            raw = b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
write(os.path.join(out, "tiny-f32.safetensors"), "F32")
write(os.path.join(out, "tiny-bf16.safetensors"), "BF16")
