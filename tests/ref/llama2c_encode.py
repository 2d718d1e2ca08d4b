#!/usr/bin/env python3
"""Independent reference for rl_tok_encode: a direct, unoptimised Python port of llama2.c's
encode() (run.c), stdlib only. Writes tests/fixtures/tok_expected.txt, one case per line:
    TOKFILE <TAB> BOS(0/1) <TAB> hex(text) <TAB> space-separated ids
Usage: python3 tests/ref/llama2c_encode.py MODELS_DIR > tests/fixtures/tok_expected.txt"""
import struct, sys

def load(path):
    data = open(path, 'rb').read()
    (maxlen,) = struct.unpack_from('<i', data, 0)
    off, vocab, scores = 4, [], []
    while off < len(data):
        score, n = struct.unpack_from('<fi', data, off)
        off += 8
        piece = data[off:off + n]
        off += n
        # llama2.c keeps pieces as C strings: strcmp sees up to the first NUL
        vocab.append(piece.split(b'\0')[0])
        scores.append(score)
    return vocab, scores

def encode(vocab, scores, text, bos):
    index = {}
    for i, p in enumerate(vocab):
        index.setdefault(p, i)        # lowest id wins for duplicate pieces
    look = lambda s: index.get(s, -1)
    toks = [1] if bos else []
    if text:
        toks.append(look(b' '))
    buf = b''
    for i, c in enumerate(text):
        if c & 0xC0 != 0x80:
            buf = b''
        buf += bytes([c])
        nxt = text[i + 1] if i + 1 < len(text) else 0
        if nxt & 0xC0 == 0x80 and len(buf) < 4:
            continue
        tid = look(buf)
        if tid != -1:
            toks.append(tid)
        else:
            toks.extend(b + 3 for b in buf)
        buf = b''
    while True:
        best, bid, bidx = -1e10, -1, -1
        for i in range(len(toks) - 1):
            tid = look(vocab[toks[i]] + vocab[toks[i + 1]])
            if tid != -1 and scores[tid] > best:
                best, bid, bidx = scores[tid], tid, i
        if bidx == -1:
            break
        toks[bidx:bidx + 2] = [bid]
    return toks

TEXTS = [
    "", "a", " ", "  ", "Hello world", "Hello, world!", " leading space", "trailing space ",
    "  two leading and two trailing  ", "Once upon a time, there was a little girl named Lily.",
    "The quick brown fox jumps over the lazy dog 1234567890.",
    "digits 3.14159 and 2,718 and 1e-5", "punctuation!?;:'\"()[]{}<>@#$%^&*-_=+/\\|~`",
    "tabs\tand\nnewlines\r\n", "naïve café über straße", "日本語のテキスト", "Ελληνικά и русский",
    "emoji 🦙🚀 and 👩‍👩‍👧", "mixed 😀x😀", "\x01\x02 control \x7f", "<s> not a token </s>",
    "<0x41> literal", "   ", "ÿ", "lorem ipsum dolor sit amet " * 8,
]

if __name__ == '__main__':
    models = sys.argv[1] if len(sys.argv) > 1 else '../shared/models'
    for tok in ('tokenizer.bin', 'tok512.bin'):
        vocab, scores = load(f'{models}/{tok}')
        for text in TEXTS:
            raw = text.encode('utf-8')
            for bos in (0, 1):
                ids = encode(vocab, scores, raw, bos)
                print(f"{tok}\t{bos}\t{raw.hex()}\t{' '.join(map(str, ids))}")
    # invalid UTF-8 and stray continuation bytes, as raw bytes
    for tok in ('tokenizer.bin', 'tok512.bin'):
        vocab, scores = load(f'{models}/{tok}')
        for raw in (b'\xff\xfe bad', b'\x80\x80\x80\x80\x80 cont', b'a\xe6\x97', b'\xf0\x9f\xa6\x99\x99\x99'):
            print(f"{tok}\t1\t{raw.hex()}\t{' '.join(map(str, encode(vocab, scores, raw, 1)))}")
