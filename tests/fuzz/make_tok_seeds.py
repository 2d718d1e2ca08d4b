#!/usr/bin/env python3
"""make_tok_seeds.py DIR — tokenizer seeds for fuzz_tok (u16 blob length, the blob, then text),
written at run time like the model-file seeds: a SentencePiece blob with the GGUF trailer
(token types with user-defined and control pieces, flags, BOS/EOS: tokenizer/rl_tok.h) and
byte-level BPE blobs whose pre-tokenizer spec has each of rl_pretok.h's modes (U, C, W, D)."""
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
TEXT = 'Hi  there <s>  12345 \u00e9t\u00e9\n\n\u2581x "code": [1, 2]\t\U0001F642'.encode()


def seed(name, blob):
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<H", len(blob)) + blob + TEXT)


# SentencePiece: llama2.c layout + "RLS2" trailer
pieces = [("<unk>", 0, 2), ("\n<s>\n", 0, 3), ("\n</s>\n", 0, 3), ("  ", 0, 4), ("\n\n", 0, 4), ("<end_of_turn>", 0, 1)]
pieces += [("<0x%02X>" % b, 0, 6) for b in range(256)]
for i, w in enumerate([" ", "H", "i", "t", "h", "e", "r", " t", "th", "he", "er", "re", " the", "the", "1", "2", "12", "x"]):
    pieces.append((w, -float(i), 1))
body = struct.pack("<i", 16)
for text, score, _ in pieces:
    t = text.encode()
    body += struct.pack("<fi", score, len(t)) + t
types = bytes(ty for _, _, ty in pieces)
seed("spm-trailer", body + types + struct.pack("<IIII", len(pieces), 0, 1, 2) + b"RLS2")
seed("spm-trailer-noprefix", body + types + struct.pack("<IIII", len(pieces), 7, 1, 2) + b"RLS2")

# byte-level BPE: the GPT-2 byte map's printable bytes as tokens, a few merges
toks = [chr(c) for c in range(33, 127)] + ["\u0120", "\u0120t", "th", "the", "<|im_end|>", "  "]
merges = ["\u0120 t", "t h", "th e"]


def bpe(spec, flags):
    b = b"RLB1" + struct.pack("<IIIIII", len(toks), len(merges), 0, len(toks) - 2, flags, len(spec)) + spec
    for i, t in enumerate(toks):
        ty = 3 if t == "<|im_end|>" else 4 if t == "  " else 1
        e = t.encode()
        b += struct.pack("<BI", ty, len(e)) + e
    for m in merges:
        e = m.encode()
        b += struct.pack("<I", len(e)) + e
    return b


seed("bpe-modes", bpe(b"D\0W[\r\n]\0C\\p{N}\0U's|'t| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+\0", 0))
seed("bpe-raw", bpe(b"U[^\\n]+|[\\n]+\0", 4 | 8 | 16))
