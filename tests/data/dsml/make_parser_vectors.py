#!/usr/bin/env python3
"""Writes parser_vectors.json: deepseek_v41 model output text -> expected parse.

PORTED ("ported"): texts and results from HartsyAI/HartsyInference
tests/python-reference/deepseek_v41/parser_reference/parser_reference.json, produced by the released
parser (encoding.py parse_message_from_completion_text @ dba1be0a). Adaptation: the released parser
splits "ns::tool" into namespace and name; we keep the whole name (what the client declared).
LENIENT ("lenient"): texts the released parser REJECTS (ported texts, "err_*"); the expected result is
our documented leniency (docs/chat-encoding.md), not a released behaviour.
DERIVED ("derived"): further malformed outputs people report, expected per our documented rules.
Arguments are json.dumps(dict, ensure_ascii=False), as the released parser produces them.
"""
import json

EOS = "<｜end▁of▁sentence｜>"
OPEN = "\n\n<｜DSML｜ calls>\n"
CLOSE = "</｜DSML｜ calls>"
def P(k, v, s="true"): return f'<｜DSML｜ parameter name="{k}" string="{s}">{v}</｜DSML｜ parameter>\n'
def INV(n, *ps): return f'<｜DSML｜ invoke name="{n}">\n' + "".join(ps) + "</｜DSML｜ invoke>\n"
ONE = INV("f", P("a", "x"))
def C(name, args): return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}

cases = []
def add(name, source, thinking, text, content="", reasoning="", calls=(), stopped=True):
    cases.append({"name": name, "source": source, "thinking": thinking, "text": text,
                  "expected": {"reasoning": reasoning, "content": content, "tool_calls": list(calls), "stopped": stopped}})

add("golden_1_turn0", "ported", True, "The user wants the weather in Beijing. I should call get_weather.</think>" + OPEN
    + INV("get_weather", P("location", "Beijing"), P("unit", "celsius")) + CLOSE + EOS,
    reasoning="The user wants the weather in Beijing. I should call get_weather.", calls=[C("get_weather", {"location": "Beijing", "unit": "celsius"})])
add("golden_1_turn1", "ported", True, "Got the weather data. Let me format a nice response.</think>The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity." + EOS,
    reasoning="Got the weather data. Let me format a nice response.", content="The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.")
add("golden_3_turn0", "ported", False, OPEN + INV("search", P("queries", "小柴胡冲剂 布洛芬 相互作用 一起吃")) + CLOSE + EOS,
    calls=[C("search", {"queries": "小柴胡冲剂 布洛芬 相互作用 一起吃"})])
add("chat_lookalike_text", "ported", False, "a\n\n<b>c</b> and <｜not a tag" + EOS, content="a\n\n<b>c</b> and <｜not a tag")
add("chat_unicode", "ported", False, "日本語 😀 café नमस्ते" + EOS, content="日本語 😀 café नमस्ते")
add("chat_empty", "ported", False, EOS)
add("thinking_lookalike_reasoning", "ported", True, "a < b \n\n<｜ maybe </think</think>ok" + EOS, reasoning="a < b \n\n<｜ maybe </think", content="ok")
add("thinking_single_call", "ported", True, "Need data.</think>I will look it up." + OPEN + INV("lookup", P("query", "cats"), P("limit", "3", "false")) + CLOSE + EOS,
    reasoning="Need data.", content="I will look it up.", calls=[C("lookup", {"query": "cats", "limit": 3})])
weird = 'He said "hi"\\path\nline2\ttab\u0001ctl < > & 日本語 😀 café'
add("chat_two_calls", "ported", False, "Checking two things." + OPEN
    + INV("weather::get_forecast", P("city", "Paris"), P("days", "3", "false"), P("metric", "true", "false"))
    + INV("search", P("q", weird), P("filters", '{"a": [1, 2, {"b": null}]}', "false"), P("empty", ""), P("ratio", "0.5", "false")) + CLOSE + EOS,
    content="Checking two things.", calls=[C("weather::get_forecast", {"city": "Paris", "days": 3, "metric": True}),
                                           C("search", {"q": weird, "filters": {"a": [1, 2, {"b": None}]}, "empty": "", "ratio": 0.5})])
add("chat_zero_param_call", "ported", False, OPEN + '<｜DSML｜ invoke name="ping">\n\n</｜DSML｜ invoke>\n' + CLOSE + EOS, calls=[C("ping", {})])
add("chat_call_value_lookalikes", "ported", False, "x" + OPEN + INV("t", P("v", "</｜DSML｜ nothing> < / >")) + CLOSE + EOS, content="x", calls=[C("t", {"v": "</｜DSML｜ nothing> < / >"})])
add("calls_without_eos", "ported", False, "ok" + OPEN + ONE + CLOSE, content="ok", calls=[C("f", {"a": "x"})], stopped=False)
add("name_extra_space", "ported", False, "x" + OPEN + '<｜DSML｜ invoke  name="f">\n</｜DSML｜ invoke>\n' + CLOSE + EOS, content="x", calls=[C("f", {})])
# The released parser raises on these; expected = our leniency.
add("err_thinking_missing_end", "lenient", True, "just reasoning" + EOS, reasoning="just reasoning")
add("err_thinking_calls_in_reasoning", "lenient", True, "r" + OPEN + ONE + CLOSE + EOS, reasoning="r", calls=[C("f", {"a": "x"})])
add("err_think_start_in_content", "lenient", False, "a<think>b" + EOS, content="a<think>b")
add("err_dsml_in_reasoning", "lenient", True, "a ｜DSML｜ b</think>c" + EOS, reasoning="a ｜DSML｜ b", content="c")
add("err_duplicate_param", "lenient", False, "x" + OPEN + INV("f", P("a", "1"), P("a", "2")) + CLOSE + EOS, content="x", calls=[C("f", {"a": "2"})])
t = "x\n\n<｜DSML｜ calls>junk\n" + ONE + CLOSE
add("err_bad_gap_after_calls_open", "lenient", False, t + EOS, content=t)
add("err_garbage_after_calls_end", "lenient", False, "x" + OPEN + ONE + CLOSE + "tail" + EOS, content="xtail", calls=[C("f", {"a": "x"})])
add("err_param_missing_string_attr", "lenient", False, "x" + OPEN + INV("f", '<｜DSML｜ parameter name="a">1</｜DSML｜ parameter>\n') + CLOSE + EOS, content="x", calls=[C("f", {"a": 1})])
add("err_nested_namespace", "lenient", False, "x" + OPEN + '<｜DSML｜ invoke name="a::b::c">\n</｜DSML｜ invoke>\n' + CLOSE + EOS, content="x", calls=[C("a::b::c", {})])
t = "x" + OPEN + '<｜DSML｜ invoke name="f">\n<｜DSML｜ parameter name="a" string="true">par'
add("err_call_truncated", "lenient", False, t, content=t, stopped=False)
add("err_call_truncated_after_invoke", "lenient", False, "x" + OPEN + ONE, content="x", calls=[C("f", {"a": "x"})], stopped=False)
t = "x" + OPEN + '<｜DSML｜ invoke nom="f">\n</｜DSML｜ invoke>\n' + CLOSE
add("err_bad_name_attr", "lenient", False, t + EOS, content=t)
# Derived malformed cases.
add("non_json_false_value", "derived", False, OPEN + INV("f", P("a", "not json", "false"), P("b", "[1,2", "false")) + CLOSE + EOS,
    calls=[C("f", {"a": "not json", "b": "[1,2"})])
add("nested_quotes_in_name", "derived", False, "x" + OPEN + '<｜DSML｜ invoke name="a"b">\n</｜DSML｜ invoke>\n' + CLOSE + EOS,
    content="x" + OPEN + '<｜DSML｜ invoke name="a"b">\n</｜DSML｜ invoke>\n' + CLOSE)
add("unknown_tag_in_calls", "derived", False, "x" + OPEN + ONE + "<｜DSML｜ foo>\n" + CLOSE + EOS,
    content="x\n<｜DSML｜ foo>\n" + CLOSE, calls=[C("f", {"a": "x"})])
add("v4_spelling", "derived", False, "ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">{\"k\": [true]}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS,
    content="ok", calls=[C("f", {"a": {"k": [True]}})])
add("invoke_closer_inside_string_value", "derived", False, OPEN + INV("f", P("a", "x</｜DSML｜ invoke>y")) + CLOSE + EOS, calls=[C("f", {"a": "x</｜DSML｜ invoke>y"})])
add("eos_inside_value", "derived", False, "x" + OPEN + '<｜DSML｜ invoke name="f">\n<｜DSML｜ parameter name="a" string="true">v' + EOS + "ignored",
    content="x" + OPEN + '<｜DSML｜ invoke name="f">\n<｜DSML｜ parameter name="a" string="true">v')
add("two_blocks", "derived", False, "a" + OPEN + ONE + CLOSE + "b" + OPEN + INV("g", P("n", "2", "false")) + CLOSE + EOS, content="ab",
    calls=[C("f", {"a": "x"}), C("g", {"n": 2})])
add("text_after_eos_ignored", "derived", True, "r</think>c" + EOS + "junk</think>" + OPEN, reasoning="r", content="c")
add("reasoning_cut_off", "derived", True, "still thinking \u4e2d", reasoning="still thinking \u4e2d", stopped=False)
print(json.dumps({"note": "see make_parser_vectors.py", "cases": cases}, ensure_ascii=False, indent=1))
