#!/usr/bin/env python3
"""What Cedar is for, in one run: an agent's turns on `cedar serve`, each a forced tool call and
its tool result, with the cached tokens and time to first token of every turn next to what the
same prompt costs cold (no cache).

    python3 examples/agent_py/agent_demo.py --socket /tmp/cedar.sock [--turns 5] [--json]

Each turn names the tool the agent wants (`tool_choice: {"type": "function", ...}`): the server
enforces it with grammar-constrained decoding, so even a small model emits a valid call. The
reply goes back verbatim with the tool's result, so each prompt extends the previous prompt and
output and the session's live state serves it. The cold column sends the same messages with a
fresh `cache_salt` (a cache partition of its own, empty) and no session: every token is encoded.
Standard library only (http.client over the Unix socket).
"""
import argparse
import http.client
import json
import socket
import sys
import uuid


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=600):
        super().__init__("cedar", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def post(sock_path, target, body):
    conn = UnixConnection(sock_path)
    conn.request("POST", target, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    if r.status != 200:
        sys.exit(f"{target}: HTTP {r.status}: {data[:400]!r}")
    return json.loads(data)


TOOLS = [
    {"type": "function", "function": {"name": "search_code", "description": "Search the repository for a string.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 24}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 32}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite and report failures.",
     "parameters": {"type": "object", "properties": {"label": {"enum": ["unit", "model", "kernels"]}}, "required": ["label"]}}},
]
SYSTEM = {"role": "system", "content": "You are a coding agent. Use the tools to inspect the repository, then answer."}
# The tool the agent wants each turn, and what the tool answers.
SCRIPT = [
    ("search_code", "session/session_manager.cpp:94: std::future<TurnResult> SessionManager::Submit(TurnRequest request)"),
    ("read_file", "// Sessions and the engine loop. One thread (the engine thread) owns the model's states..."),
    ("run_tests", "100% tests passed, 0 tests failed out of 9"),
    ("search_code", "server/api_error.cpp:31: case ErrorKind::kSessionBusy:"),
    ("read_file", "# `cedar serve`: the HTTP API for agents ..."),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--json", action="store_true", help="one JSON line per turn")
    opt = ap.parse_args()

    session = "demo-" + uuid.uuid4().hex[:8]
    post(opt.socket, "/v1/sessions", {"session_id": session, "messages": [SYSTEM], "tools": TOOLS})
    messages = [SYSTEM, {"role": "user", "content": "Find where turns are submitted and check that the tests pass."}]
    if not opt.json:
        print(f"{'turn':>4}  {'tool':<12} {'prompt':>6} {'cached':>6}  {'TTFT ms':>8}  {'cold TTFT ms':>12}  arguments")
    for turn in range(opt.turns):
        tool, result = SCRIPT[turn % len(SCRIPT)]
        body = {"messages": messages, "tools": TOOLS, "max_tokens": opt.max_tokens, "temperature": 0.7, "seed": turn + 1,
                "tool_choice": {"type": "function", "function": {"name": tool}}}
        warm = post(opt.socket, "/v1/chat/completions", dict(body, session_id=session))
        cold = post(opt.socket, "/v1/chat/completions", dict(body, cache_salt="cold-" + uuid.uuid4().hex))
        msg = warm["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        row = {"turn": turn + 1, "tool": tool, "prompt_tokens": warm["usage"]["prompt_tokens"],
               "cached_tokens": warm["usage"]["prompt_tokens_details"]["cached_tokens"],
               "ttft_ms": warm["cedar"]["ttft_ms"], "cold_cached_tokens": cold["usage"]["prompt_tokens_details"]["cached_tokens"],
               "cold_ttft_ms": cold["cedar"]["ttft_ms"], "finish_reason": warm["choices"][0]["finish_reason"],
               "calls": [c["function"]["name"] + c["function"]["arguments"] for c in calls]}
        if opt.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{row['turn']:>4}  {tool:<12} {row['prompt_tokens']:>6} {row['cached_tokens']:>6}  {row['ttft_ms']:>8.1f}"
                  f"  {row['cold_ttft_ms']:>12.1f}  {'; '.join(row['calls'])[:60]}", flush=True)
        if not calls or calls[0]["function"]["name"] != tool:
            sys.exit(f"turn {turn + 1}: expected a call to {tool}, got {msg}")
        # The reply goes back verbatim, then each call's result.
        messages.append({k: v for k, v in msg.items() if v is not None})
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    conn = UnixConnection(opt.socket)
    conn.request("DELETE", f"/v1/sessions/{session}")
    conn.getresponse().read()


if __name__ == "__main__":
    main()
