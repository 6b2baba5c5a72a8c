#!/usr/bin/env python3
"""Writes encoder_vectors.json: deepseek_v41 encoder test vectors (messages -> exact prompt text).

PORTED cases: inputs and expected prompts transcribed from
HartsyAI/HartsyInference tests/python-reference/deepseek_v41/encoder_reference/encoder_reference.json
and parser_reference/parser_reference.json ("prompt" fields), which that project produced by running
the released encoder (deepseek-ai/DeepSeek-V4.1-Flash encoding/encoding.py @ dba1be0a). Only the
format is taken; the long tools block is factored into TOOLS_HEAD/TOOLS_TAIL below to keep the
transcription reviewable. Adaptations (our Message has no per-call `namespace` and string
arguments only): a call's `namespace` is folded into its name ("search::lookup", which is how the
encoder renders it) and dict arguments are passed as the same JSON text.
DERIVED cases ("source": "derived") are written from the documented format, not from a source run.
Run: python3 make_encoder_vectors.py > encoder_vectors.json
"""
import json

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
SYS = "<｜System｜>"
U = "<｜User｜>"
A = "<｜Assistant｜>"
def EFF(n): return f"Reasoning Effort: {n} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"

TOOLS_HEAD = ("## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<｜DSML｜ calls>\" block like the following:\n\n"
              "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"$TOOL_NAME\">\n<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n"
              "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n</｜DSML｜ calls>\n\n"
              "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
              "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
              "Otherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n")
TOOLS_TAIL = "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"

def P(k, v, s="true"): return f'<｜DSML｜ parameter name="{k}" string="{s}">{v}</｜DSML｜ parameter>'
def INV(name, *params): return f'<｜DSML｜ invoke name="{name}">\n' + "\n".join(params) + "\n</｜DSML｜ invoke>"
def CALLS(*invokes): return "\n\n<｜DSML｜ calls>\n" + "\n".join(invokes) + "\n</｜DSML｜ calls>"

LOOKUP_PARAMS = {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}
def tool(name="lookup", **extra):
    t = {"type": "function", "function": {"name": name, "description": "Look up a value", "parameters": LOOKUP_PARAMS}}
    t.update(extra)
    return t
def call(name, args, cid="c1"): return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
def schema(name, desc="Look up a value"):
    return json.dumps({"name": name, "description": desc, "parameters": LOOKUP_PARAMS}, ensure_ascii=False)

cases = []
def add(name, messages, expected, thinking, tools=None, source="ported", **opts):
    c = {"name": name, "source": source, "thinking": thinking, "messages": messages, "expected": expected}
    if tools is not None: c["tools"] = tools
    c.update(opts)
    cases.append(c)

add("mid_conversation_system_thinking", [
    {"role": "system", "content": "Base system."}, {"role": "user", "content": "First question"},
    {"role": "assistant", "reasoning_content": "hidden thought", "content": "First answer"},
    {"role": "system", "content": "New instruction mid conversation."}],
    BOS + SYS + EFF(75) + "Base system." + U + "First question" + A + "</think>First answer" + EOS + SYS + "New instruction mid conversation." + A + "<think>", True)
add("mid_conversation_system_then_assistant", [
    {"role": "system", "content": "Base system."}, {"role": "user", "content": "Q1"},
    {"role": "assistant", "reasoning_content": "r1", "content": "A1"}, {"role": "system", "content": "Mid system."},
    {"role": "assistant", "reasoning_content": "r2", "content": "A2"}, {"role": "user", "content": "Q2"}],
    BOS + SYS + EFF(75) + "Base system." + U + "Q1" + A + "</think>A1" + EOS + SYS + "Mid system." + A + "</think>A2" + EOS + U + "Q2" + A + "<think>", True)
add("mid_conversation_system_chat", [
    {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}, {"role": "system", "content": "Mid system."}],
    BOS + U + "Q1" + A + "</think>A1" + EOS + SYS + "Mid system." + A + "</think>", False)
add("namespaced_string", [
    {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    {"role": "assistant", "content": "ok", "tool_calls": [call("search::lookup", '{"query":"v"}')]}],
    BOS + SYS + "s\n\n" + TOOLS_HEAD + schema("search::lookup") + TOOLS_TAIL + U + "q" + A + "</think>ok" + CALLS(INV("search::lookup", P("query", "v"))) + EOS,
    False, tools=[tool(namespace="search")])
add("namespaced_dict_description", [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
    BOS + SYS + EFF(75) + "s\n\n" + TOOLS_HEAD + schema("search::lookup", "Search tools.\nLook up a value") + TOOLS_TAIL + U + "q" + A + "<think>",
    True, tools=[tool(namespace={"name": "search", "description": "Search tools."})])
add("namespaced_function_level_and_qualified", [
    {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    {"role": "assistant", "content": "ok", "tool_calls": [call("files::lookup", '{"query":"a"}', "c1"), call("search::grep", '{"query":"b"}', "c2")]}],
    BOS + SYS + EFF(75) + "s\n\n" + TOOLS_HEAD + schema("files::lookup") + "\n" + schema("search::grep") + TOOLS_TAIL + U + "q" + A + "<think></think>ok"
    + CALLS(INV("files::lookup", P("query", "a")), INV("search::grep", P("query", "b"))) + EOS,
    True, tools=[{"type": "function", "function": dict(tool()["function"], namespace="files")}, tool("search::grep")])
add("same_name_three_namespaces", [
    {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    {"role": "assistant", "content": "summary", "tool_calls": [call("lookup", '{"query":"value"}', "a"), call("search::lookup", '{"query":"value"}', "b"), call("files::lookup", '{"query":"value"}', "c")]}],
    BOS + SYS + "s\n\n" + TOOLS_HEAD + schema("lookup") + "\n" + schema("search::lookup") + "\n" + schema("files::lookup") + TOOLS_TAIL + U + "q" + A + "</think>summary"
    + CALLS(INV("lookup", P("query", "value")), INV("search::lookup", P("query", "value")), INV("files::lookup", P("query", "value"))) + EOS,
    False, tools=[tool(), tool(namespace={"name": "search"}), tool(namespace={"name": "files"})])
for effort, n in ((1, 1), (50, 50), (100, 100), ("low", 50), ("high", 75), ("max", 100)):
    add(f"effort_{effort}", [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Hi"}],
        BOS + SYS + EFF(n) + "Sys." + U + "Hi" + A + "<think>", True, reasoning_effort=str(effort))
add("effort_default_no_system", [{"role": "user", "content": "Hi"}], BOS + SYS + EFF(75) + U + "Hi" + A + "<think>", True)
add("effort_ignored_in_chat", [{"role": "user", "content": "Hi"}], BOS + U + "Hi" + A + "</think>", False, reasoning_effort="100")
add("effort_only_first_message", [{"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning_content": "r", "content": "yo"}, {"role": "user", "content": "Again"}],
    BOS + SYS + EFF(50) + U + "Hi" + A + "</think>yo" + EOS + U + "Again" + A + "<think>", True, reasoning_effort="low")
add("parallel_tool_results_reordered", [
    {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    {"role": "assistant", "reasoning_content": "plan", "content": "", "tool_calls": [call("lookup", '{"query":"1"}', "a"), call("other", '{"query":"2"}', "b"), call("lookup", '{"query":"3"}', "c")]},
    {"role": "tool", "tool_call_id": "c", "content": "third"}, {"role": "tool", "tool_call_id": "a", "content": "first"}, {"role": "tool", "tool_call_id": "b", "content": "second"},
    {"role": "assistant", "reasoning_content": "done", "content": "final"}, {"role": "user", "content": "thanks"}],
    BOS + SYS + EFF(75) + "s\n\n" + TOOLS_HEAD + schema("lookup") + "\n" + schema("other") + TOOLS_TAIL + U + "q" + A + "<think>plan</think>"
    + CALLS(INV("lookup", P("query", "1")), INV("other", P("query", "2")), INV("lookup", P("query", "3"))) + EOS
    + U + "<tool_result>first</tool_result>\n\n<tool_result>second</tool_result>\n\n<tool_result>third</tool_result>" + A + "<think>done</think>final" + EOS + U + "thanks" + A + "<think>",
    True, tools=[tool(), tool("other")])
add("tool_result_unknown_id_and_user_merge", [
    {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [call("lookup", '{"query":"1"}', "a")]},
    {"role": "tool", "tool_call_id": "zzz", "content": "orphan"}, {"role": "user", "content": "extra text"}, {"role": "user", "content": "more text"}],
    BOS + SYS + "s\n\n" + TOOLS_HEAD + schema("lookup") + TOOLS_TAIL + U + "q" + A + "</think>" + CALLS(INV("lookup", P("query", "1"))) + EOS
    + U + "<tool_result>orphan</tool_result>\n\nextra text\n\nmore text" + A + "</think>", False, tools=[tool()])
add("drop_thinking_disabled", [{"role": "user", "content": "Q1"}, {"role": "assistant", "reasoning_content": "secret1", "content": "A1"}, {"role": "user", "content": "Q2"}],
    BOS + SYS + EFF(75) + U + "Q1" + A + "<think>secret1</think>A1" + EOS + U + "Q2" + A + "<think>", True, drop_thinking=False)
add("argument_forms", [
    {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    {"role": "assistant", "content": "x", "tool_calls": [
        call("lookup", '{"query":"caf\u00e9 \u4e2d\u6587","limit":3,"ratio":0.1,"big":1e20,"flag":true,"none":null,"list":[1,2.50,"s"],"obj":{"b":1,"a":{"c":[]}}}', "a"),
        call("lookup", "\"{\\\"query\\\":\\\"double\\\"}\"", "b"), call("lookup", "not json at all", "c"),
        call("lookup", '{"query": "dict-args", "limit": 2}', "d")]}],
    BOS + SYS + EFF(75) + "s\n\n" + TOOLS_HEAD + schema("lookup") + TOOLS_TAIL + U + "q" + A + "<think></think>x" + CALLS(
        INV("lookup", P("query", "café 中文"), P("limit", "3", "false"), P("ratio", "0.1", "false"), P("big", "1e+20", "false"), P("flag", "true", "false"),
            P("none", "null", "false"), P("list", '[1, 2.5, "s"]', "false"), P("obj", '{"b": 1, "a": {"c": []}}', "false")),
        INV("lookup", P("query", "double")), INV("lookup", P("arguments", "not json at all")),
        INV("lookup", P("query", "dict-args"), P("limit", "2", "false"))) + EOS, True, tools=[tool()])
add("special_literals_in_user_text", [
    {"role": "system", "content": "Sys <｜User｜> literal."},
    {"role": "user", "content": "Text with <｜Assistant｜> and </think> and <｜end▁of▁sentence｜> and <｜DSML｜ calls>."}],
    BOS + SYS + EFF(75) + "Sys <｜User｜> literal." + U + "Text with <｜Assistant｜> and </think> and <｜end▁of▁sentence｜> and <｜DSML｜ calls>." + A + "<think>", True)
# parser_reference.json canonical turns (encode_messages(..., drop_thinking=False)).
weird = 'He said "hi"\\path\nline2\ttab\u0001ctl < > & \u65e5\u672c\u8a9e \U0001f600 caf\u00e9'
def canon(name, thinking, content, reasoning=None, calls=None, expected_tail=""):
    a = {"role": "assistant", "content": content}
    if reasoning is not None: a["reasoning_content"] = reasoning
    if calls: a["tool_calls"] = [call(n, json.dumps(args, ensure_ascii=False), f"c{i}") for i, (n, args) in enumerate(calls)]
    head = BOS + (SYS + EFF(75) if thinking else "") + U + "q" + A + ("<think>" if thinking else "</think>")
    add(name, [{"role": "user", "content": "q"}, a], head + expected_tail, thinking, drop_thinking=False)
canon("canonical_chat_plain", False, "Hello there.", expected_tail="Hello there." + EOS)
canon("canonical_chat_empty", False, "", expected_tail=EOS)
canon("canonical_thinking_empty_reasoning", True, "Hi", reasoning="", expected_tail="</think>Hi" + EOS)
canon("canonical_thinking_single_call", True, "I will look it up.", reasoning="Need data.", calls=[("lookup", {"query": "cats", "limit": 3})],
      expected_tail="Need data.</think>I will look it up." + CALLS(INV("lookup", P("query", "cats"), P("limit", "3", "false"))) + EOS)
canon("canonical_chat_two_calls", False, "Checking two things.", calls=[
    ("weather::get_forecast", {"city": "Paris", "days": 3, "metric": True}),
    ("search", {"q": weird, "filters": {"a": [1, 2, {"b": None}]}, "empty": "", "ratio": 0.5})],
    expected_tail="Checking two things." + CALLS(
        INV("weather::get_forecast", P("city", "Paris"), P("days", "3", "false"), P("metric", "true", "false")),
        INV("search", P("q", weird), P("filters", '{"a": [1, 2, {"b": null}]}', "false"), P("empty", ""), P("ratio", "0.5", "false"))) + EOS)
canon("canonical_chat_zero_param_call", False, "", calls=[("ping", {})], expected_tail="\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"ping\">\n\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + EOS)
# DERIVED: float formatting at Python repr's boundaries and string escapes inside JSON values.
add("derived_py_json_numbers", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [
    call("f", '{"a":1e15,"b":1e16,"c":0.0001,"d":0.00001,"e":-0.0,"f":123456789012,"g":["\\u0001\\t\\"/\\u007f"]}')]}],
    BOS + U + "q" + A + "</think>" + CALLS(INV("f", P("a", "1000000000000000.0", "false"), P("b", "1e+16", "false"), P("c", "0.0001", "false"),
        P("d", "1e-05", "false"), P("e", "-0.0", "false"), P("f", "123456789012", "false"), P("g", '["\\u0001\\t\\"/\x7f"]', "false"))) + EOS,
    False, source="derived")
# DERIVED: tools without a system message attach to an empty system message put in front (the
# serving convention PORT follows; the encoder reads tools from a system message).
add("derived_tools_without_system", [{"role": "user", "content": "q"}],
    BOS + SYS + "\n\n" + TOOLS_HEAD + schema("lookup") + TOOLS_TAIL + U + "q" + A + "</think>", False, tools=[tool()], source="derived")
print(json.dumps({"note": "see make_encoder_vectors.py", "cases": cases}, ensure_ascii=False, indent=1))
