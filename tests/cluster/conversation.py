#!/usr/bin/env python3
"""A session through HAProxy (run by examples/cluster/run.sh, see tests/cluster/cluster_test.sh).

Turns of one session must land on one server (its X-Cedar-Server header) and answer what a
single server answers (argv[1], a `cedar serve` of the same model outside the cluster). Then the
session's server is killed: the next turn must land on the other server, which does not know the
session (404), so the client creates it there and retries, as the README says; the answer must
still equal the single server's, and with the shared tier (CEDAR_CLUSTER_REMOTE=1) the new
server must take the earlier context from it (cached_tokens, by tier).
"""
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

LB = os.environ["CEDAR_CLUSTER_URL"]
DIR = os.environ["CEDAR_CLUSTER_DIR"]
REMOTE = os.environ.get("CEDAR_CLUSTER_REMOTE") == "1"
REF = sys.argv[1]
SID = "cluster-test-session"


def post(base, path, body, session=None):
    headers = {"Content-Type": "application/json"}
    if session:
        headers["X-Session-Id"] = session
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, e.headers, json.loads(raw or b"{}")
        except ValueError:  # HAProxy's own error pages are HTML
            return e.code, e.headers, {"text": raw.decode(errors="replace")[:200]}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def turn(base, prompt, session=None):
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    if session:
        body["session_id"] = session
    return post(base, "/v1/completions", body, session)


# Prompts as token ids (the tiny model's byte tokenizer): every turn extends the last one, so a
# server that saw the earlier turns, or the shared tier, holds its prefix.
prompts = [[3 + (7 * i) % 250 for i in range(100)]]
for k in range(1, 4):
    prompts.append(prompts[-1] + [3 + (11 * i + k) % 250 for i in range(40)])

status, headers, body = post(LB, "/v1/sessions", {"session_id": SID}, SID)
if status != 200:
    fail(f"creating the session through HAProxy: HTTP {status} {body}")
home = headers.get("X-Cedar-Server")
if not home:
    fail("no X-Cedar-Server header on the answer (is --server-id passed?)")
print(f"session {SID} created on {home}")

for k in range(3):
    status, headers, body = turn(LB, prompts[k], SID)
    if status != 200:
        fail(f"turn {k}: HTTP {status} {body}")
    if headers.get("X-Cedar-Server") != home:
        fail(f"turn {k} landed on {headers.get('X-Cedar-Server')}, the session lives on {home}")
    rs, _, ref = turn(REF, prompts[k])
    if rs != 200:
        fail(f"reference turn {k}: HTTP {rs} {ref}")
    text, ref_text = body["choices"][0]["text"], ref["choices"][0]["text"]
    if text != ref_text:
        fail(f"turn {k}: the cluster answered {text!r}, a single server {ref_text!r}")
    print(f"turn {k}: {home}, {body['usage']['prompt_tokens']} prompt tokens, cached {body['cedar']['cached_tokens']}, "
          f"output equals the single server's")

# Other sessions spread over the servers (the hash is not constant).
seen = set()
for i in range(16):
    status, headers, _ = post(LB, "/v1/sessions", {"session_id": f"spread-{i}"}, f"spread-{i}")
    if status != 200:
        fail(f"creating spread-{i}: HTTP {status}")
    seen.add(headers.get("X-Cedar-Server"))
if len(seen) < 2:
    fail(f"16 sessions all landed on {seen}")
print(f"16 other sessions landed on {sorted(seen)}")

# Failover: kill the session's server (as a crash would: SIGKILL), after its asynchronous
# writes to the shared tier had time to land.
time.sleep(1.0)
index = home.split("-")[-1]
with open(os.path.join(DIR, f"server-{index}.pid")) as f:
    pid = int(f.read())
os.kill(pid, signal.SIGKILL)
print(f"killed {home} (pid {pid})")

# Until HAProxy's health check marks the dead server down, a request for it may get 502/503:
# a client retries those (the turn was never admitted).
for _ in range(40):
    status, headers, body = turn(LB, prompts[3], SID)
    if status not in (502, 503):
        break
    print(f"turn 3: HTTP {status} from HAProxy, retrying")
    time.sleep(0.25)
if status == 404:
    # The session does not exist on the new server: create it there (the same header routes the
    # create to the same place) and send the turn again.
    cs, ch, cb = post(LB, "/v1/sessions", {"session_id": SID}, SID)
    if cs != 200:
        fail(f"re-creating the session after failover: HTTP {cs} {cb}")
    status, headers, body = turn(LB, prompts[3], SID)
if status != 200:
    fail(f"turn 3 after failover: HTTP {status} {body}")
other = headers.get("X-Cedar-Server")
if other == home or not other:
    fail(f"turn 3 after failover answered by {other!r}")
rs, _, ref = turn(REF, prompts[3])
if body["choices"][0]["text"] != ref["choices"][0]["text"]:
    fail(f"turn 3 on {other}: {body['choices'][0]['text']!r}, a single server {ref['choices'][0]['text']!r}")
cedar = body["cedar"]
by_tier = cedar.get("cached_tokens_by_tier", {})
print(f"turn 3: {other} after failover, cached {cedar['cached_tokens']} by tier {by_tier}, output equals the single server's")
if REMOTE:
    # The earlier context (turn 2's prompt) is on no tier of the new server but the shared one.
    with urllib.request.urlopen(REF + "/v1/cache", timeout=30) as r:
        page = json.loads(r.read())["page_tokens"]
    expect = len(prompts[2]) // page * page - page
    shared = sum(v for k, v in by_tier.items() if k not in ("live", "ram", "disk"))
    if cedar["cached_tokens"] < expect or shared < expect:
        fail(f"turn 3 after failover: cached {cedar['cached_tokens']} (shared tier {shared}), expected at least {expect} "
             "from the shared tier")
else:
    print("no shared tier in this build (cedar serve has no --cache-remote): the turn was recomputed")
print("ok")
