#!/usr/bin/env python3
"""One-off independent check (not part of `make test`): reads a GGUF written by
`ringlm mkmodel` with the gguf package's GGUFReader and prints its keys and tensors, checking
the llama shapes and that the f16/bf16 data decode to finite numbers.
Usage: pip install gguf numpy; python3 tests/ref/check_gguf.py FILE.gguf"""
import sys
import numpy as np
from gguf import GGUFReader

r = GGUFReader(sys.argv[1])
def val(k):
    f = r.fields[k]
    p = f.parts[f.data[0]]
    return bytes(p).decode() if f.types[0].name == 'STRING' else p.tolist()[0]
for k in r.fields:
    if not k.startswith('tokenizer.ggml.tok') and not k.startswith('tokenizer.ggml.sc') and not k.startswith('GGUF.'):
        print(f'{k} = {val(k)}')
toks = r.fields['tokenizer.ggml.tokens']
print('tokens:', len(toks.data), [bytes(toks.parts[i]).decode() for i in toks.data[:3]],
      [bytes(toks.parts[i]).decode() for i in toks.data[259:264]])
d, L = val('llama.embedding_length'), val('llama.block_count')
names = {t.name: t for t in r.tensors}
assert len(r.tensors) == 2 + 9 * L + ('output.weight' in names), len(r.tensors)
for t in r.tensors:
    data = np.asarray(t.data)
    if t.tensor_type.name == 'BF16':   # gguf exposes bf16 as raw uint8 pairs
        data = (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert np.isfinite(data.astype(np.float32)).all(), t.name
print('tensors:', len(r.tensors), 'types', sorted({t.tensor_type.name for t in r.tensors}),
      'token_embd', names['token_embd.weight'].shape.tolist(), 'blk.0.attn_k', names['blk.0.attn_k.weight'].shape.tolist())
print('OK')
