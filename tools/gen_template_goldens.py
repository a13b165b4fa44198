#!/usr/bin/env python3
"""Regenerates tests/golden/templates/cases.json: reference renders of the chat templates in
tests/golden/templates/*.jinja, made with python3-jinja2 configured as Hugging Face's
apply_chat_template does (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
loopcontrols; tojson = json.dumps(ensure_ascii=False); raise_exception and strftime_now
globals). strftime_now reports a fixed date so the output is reproducible.

Usage: tools/gen_template_goldens.py   (from the repository root; needs python3-jinja2)
"""

import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TEMPLATE_DIR = os.path.join(ROOT, "tests", "golden", "templates")
FIXED_DATE = datetime.datetime(2025, 3, 14, 9, 26, 53)

# Special tokens each model family's tokenizer passes to its template.
TOKENS = {
    "gemma2": ("<bos>", "<eos>"),
    "gemma3": ("<bos>", "<eos>"),
    "qwen2.5": ("", "<|im_end|>"),
    "qwen3": ("", "<|im_end|>"),
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "chatml-tools": ("", "<|im_end|>"),  # ember's own ChatML tool template (text/tool_calls.cc)
}


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_DATE.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def msg(role, content):
    return {"role": role, "content": content}


TRICKY = ("  Quotes ' and \" and a \\backslash\\, a tab\there,\n"
          "braces {{ not_a_var }} {% if %} {# no comment #}, \n\n"
          "unicode: café, 日本語, emoji 🎉, RTL שלום, nbsp\u00a0end\u00a0 \n")

CONVERSATIONS = {
    "single_turn": [msg("user", "Hello!")],
    "system_and_user": [msg("system", "You are a terse assistant."), msg("user", "Hi there.")],
    "multi_turn": [
        msg("user", "What is 2+2?"),
        msg("assistant", "4."),
        msg("user", "And 3+3?"),
    ],
    "system_multi_turn": [
        msg("system", "Answer in French.\nBe brief."),
        msg("user", "Good morning"),
        msg("assistant", "Bonjour !"),
        msg("user", "How are you?"),
    ],
    "special_characters": [msg("system", "  sys with edges  \n"), msg("user", TRICKY)],
    "assistant_last": [msg("user", "Say hi"), msg("assistant", "  hi  ")],
    "thinking_history": [
        msg("user", "Think first."),
        msg("assistant", "<think>\nLet me see.\n</think>\n\nDone."),
        msg("user", "Again?"),
        msg("assistant", "<think>\nHmm\n</think>\nYes."),
    ],
    "roles_not_alternating": [msg("user", "one"), msg("user", "two")],
    "empty_content": [msg("system", ""), msg("user", "")],
}

# Tool requests and replayed tool histories, rendered with `tools`, for the templates that
# render tools. Arguments are objects, as ember passes them (it parses the client's JSON string).
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
TOOL_CONVERSATIONS = {
    "tool_request": [msg("user", "What is the weather in Paris?")],
    "tool_round_trip": [
        msg("system", "Be brief."),
        msg("user", "What is the weather in Paris?"),
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
    ],
}
TOOL_TEMPLATES = {"qwen2.5", "qwen3", "llama3.1", "llama3.2", "chatml-tools"}

# Per-template extra context variables (kwargs to apply_chat_template).
EXTRA = {
    "qwen3": [{}, {"enable_thinking": False}],
}


def main():
    env = make_env()
    names = sorted(f[: -len(".jinja")] for f in os.listdir(TEMPLATE_DIR) if f.endswith(".jinja"))
    cases = []
    for name in names:
        with open(os.path.join(TEMPLATE_DIR, name + ".jinja"), encoding="utf-8") as f:
            template = env.from_string(f.read())
        bos, eos = TOKENS[name]
        convs = [(c, m, None) for c, m in CONVERSATIONS.items()]
        if name in TOOL_TEMPLATES:
            convs += [(c, m, TOOLS) for c, m in TOOL_CONVERSATIONS.items()]
        for conv_name, messages, tools in convs:
            for extra in EXTRA.get(name, [{}]):
                for agp in (False, True):
                    case = {
                        "template": name,
                        "conversation": conv_name,
                        "messages": messages,
                        "add_generation_prompt": agp,
                        "bos_token": bos,
                        "eos_token": eos,
                        "extra_context": extra,
                    }
                    if tools is not None:
                        case["tools"] = tools
                    try:
                        case["expected"] = template.render(
                            messages=messages, tools=tools, documents=None,
                            add_generation_prompt=agp, bos_token=bos, eos_token=eos, **extra)
                    except jinja2.exceptions.TemplateError as e:
                        case["error"] = str(e)
                    cases.append(case)
    out = {
        "generator": "tools/gen_template_goldens.py (jinja2 %s)" % jinja2.__version__,
        "strftime_now_date": FIXED_DATE.strftime("%Y-%m-%d %H:%M:%S"),
        "cases": cases,
    }
    path = os.path.join(TEMPLATE_DIR, "cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), os.path.relpath(path, ROOT)), file=sys.stderr)


if __name__ == "__main__":
    main()
