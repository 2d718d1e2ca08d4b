"""hf_export_check.py — the Hugging Face side of test_export_hf.py, run by the Dynamo venv's
python (tokenizers 0.23, transformers 5.25), which Debian's python3 does not have.

  hf_export_check.py ids DIR FIXTURE.json STRINGS.json
      encodes every string with DIR/tokenizer.json, add_special_tokens=True, twice: as is
      (special added tokens matched: llama.cpp's parse_special=true, fixture "ids_special") and
      with encode_special_tokens set (parse_special=false, fixture "ids"); prints a JSON object
      {"ids_special": [indices that differ], "ids": [...], "first": [string, got, want] or null}.
  hf_export_check.py chat DIR CONVERSATIONS.json
      prints, as JSON, apply_chat_template(conversation, tokenize=True,
      add_generation_prompt=True) over the folder for each conversation.
"""
import json
import sys


def ids_mode(d, fixture, strings):
    from tokenizers import Tokenizer
    fx = json.load(open(fixture))
    ss = json.load(open(strings))
    tok = Tokenizer.from_file(d + "/tokenizer.json")
    out = {"first": None}
    for plain, key in ((False, "ids_special"), (True, "ids")):
        tok.encode_special_tokens = plain
        out[key] = []
        for i, s in enumerate(ss):
            got = tok.encode(s, add_special_tokens=True).ids
            if got != fx[key][i]:
                out[key].append(i)
                if out["first"] is None:
                    out["first"] = [key, s, got, fx[key][i]]
    print(json.dumps(out))


def chat_mode(d, convs):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    res = []
    for c in json.load(open(convs)):
        ids = tok.apply_chat_template(c, tokenize=True, add_generation_prompt=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        res.append(list(ids))
    print(json.dumps(res))


if __name__ == "__main__":
    if sys.argv[1] == "ids":
        ids_mode(*sys.argv[2:5])
    else:
        chat_mode(*sys.argv[2:4])
