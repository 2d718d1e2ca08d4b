"""The Python client on a real instruct model, SmolLM2-135M-Instruct (fetched from PyPI by
.ci/models): its chat template through Client.chat_prompt gives llama.cpp's token ids, and
chat()/chat_stream() answer and stop at the model's end of turn (the smollm fixture, in
conftest.py). Skipped, saying so, when the model could not be fetched."""
import json
import os

import pytest

import ringlm

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# The answer test asks twice, and the repeat finds the prompt in the prefix cache, so its last
# position goes through the one-row decode path (8-bit activations, as llama.cpp's decode)
# instead of the prefill's: QUESTION's first answer token is a near-tie there ("The" -1.910,
# "L" -1.936), which the paths settle differently; this wording has no near-tie.
ASK = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def test_chat_prompt_is_llamacpps(smollm):
    # llama.cpp's ids for the same ChatML text (tests/fixtures/llamacpp, prompt 0)
    fx = json.load(open(os.path.join(REPO, "tests", "fixtures", "llamacpp",
                                     "greedy_" + NAME[:-len(".gguf")] + ".json")))
    want = fx["prompts"][0]["prompt_ids"]
    with ringlm.Client(socket=smollm) as c:
        assert c.info["chat_template"] == "chatml"
        assert c.chat_prompt(QUESTION) == want


def test_chat_answers_and_stops_at_end_of_turn(smollm):
    with ringlm.Client(socket=smollm) as c:
        assert c.chat(ASK, max_tokens=64) == "The capital of France is Paris."
        s = c.chat_stream(ASK, max_tokens=64)
        assert "".join(s) == "The capital of France is Paris." and s.finish_reason == "eos"
        with pytest.raises(ringlm.RinglmError):
            c.chat([{"role": "robot", "content": "hi"}])
        with pytest.raises(ringlm.RinglmError):
            c.chat([])


PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 20},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}


def test_structured_output_holds_to_schema_and_regex(smollm):
    import re
    import jsonschema
    with ringlm.Client(socket=smollm) as c:
        for seed, t in ((0, 0.0), (3, 0.9), (4, 0.9)):
            s = c.chat_stream([{"role": "user", "content": "Describe a person as JSON."}], max_tokens=80,
                              schema=PERSON, temperature=t, seed=seed)
            out = "".join(s)
            assert s.finish_reason == "eos", out
            jsonschema.validate(json.loads(out), PERSON)
            date = c.chat([{"role": "user", "content": "When was the moon landing?"}], max_tokens=20,
                          regex=r"(19|20)\d\d-[01]\d-[0-3]\d", temperature=t, seed=seed)
            assert re.fullmatch(r"(19|20)\d\d-[01]\d-[0-3]\d", date), date
        with pytest.raises(ringlm.RinglmError, match="format"):
            c.chat(QUESTION, schema={"type": "string", "format": "idn-email"})
        with pytest.raises(ringlm.RinglmError, match="give one of schema, regex and grammar"):
            c.chat(QUESTION, schema=PERSON, regex="a")


EXPR = {"$defs": {"expr": {"anyOf": [
    {"type": "integer"},
    {"type": "object", "additionalProperties": False, "required": ["op", "args"],
     "properties": {"op": {"enum": ["+", "-", "*", "/"]},
                    "args": {"type": "array", "items": {"$ref": "#/$defs/expr"}, "minItems": 2, "maxItems": 2}}}]}},
    "$ref": "#/$defs/expr"}


def test_recursive_grammar_and_schema(smollm):
    # llama.cpp's json.gbnf (recursive rules: the grammar matcher) judged by Python's json, and a
    # recursive schema (an expression tree) judged by jsonschema
    import jsonschema
    with open(os.path.join(REPO, "tests", "fixtures", "constrain", "gbnf", "json.gbnf")) as f:
        gbnf = f.read()
    with ringlm.Client(socket=smollm) as c:
        for seed, t in ((0, 0.0), (5, 0.8)):
            s = c.chat_stream([{"role": "user", "content": "Give a JSON object with a cat's name and age."}], max_tokens=400,
                              grammar=gbnf, temperature=t, seed=seed)
            out = "".join(s)
            assert s.finish_reason == "eos", out
            assert isinstance(json.loads(out), dict), out
            s = c.chat_stream([{"role": "user", "content": "Write (1 + 2) * 3 as a JSON expression tree."}],
                              max_tokens=120, schema=EXPR, temperature=t, seed=seed)
            out = "".join(s)
            assert s.finish_reason == "eos", out
            jsonschema.validate(json.loads(out), EXPR)
        with pytest.raises(ringlm.RinglmError, match="left-recursive"):
            c.chat(QUESTION, grammar='root ::= e\ne ::= e "+" "1" | "1"\n')


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "maxLength": 30},
                                  "unit": {"enum": ["celsius", "fahrenheit"]}}}}}


def test_chat_message_with_tools(smollm):
    """chat_message: a required call whose arguments validate against the tool's schema, then
    the call and its result sent back (role tool) and the answer taken with tool_choice none."""
    import jsonschema
    ask = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    with ringlm.Client(socket=smollm) as c:
        m = c.chat_message(ask, 48, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)
        assert m["content"] is None and len(m["tool_calls"]) == 1
        call = m["tool_calls"][0]
        assert call["function"]["name"] == "get_weather" and call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"])
        m2 = c.chat_message(ask + [m, {"role": "tool", "tool_call_id": call["id"], "content": "21 C, sunny"}], 16,
                            tools=[WEATHER], tool_choice="none")
        assert isinstance(m2["content"], str) and m2["content"] and "tool_calls" not in m2
        with pytest.raises(ringlm.RinglmError, match="'tools\\[0\\].function.name'"):
            c.chat_message(ask, 8, tools=[{"type": "function", "function": {}}])
