#!/usr/bin/env bash
# End to end: Cedar's Responses and Messages APIs with the real clients from npm
# (examples/agent_apis/apis_check.mjs: @anthropic-ai/sdk, openai's responses.create, the Vercel
# AI SDK) against `cedar serve` on the tiny model, over the Unix socket and over TCP with an API
# key (the Anthropic SDK sends it as x-api-key). apis_check.mjs asserts the shapes, the streamed
# sequences, enforced tool_choice / schemas, and cached tokens on later turns; here: a request
# without the key gets 401 in Anthropic's error shape on /v1/messages.
#
# Usage: apis_e2e.sh CEDAR_BINARY SOURCE_DIR
# The clients come from examples/agent_apis/node_modules, installed by scripts/setup.sh
# (`npm ci --prefix examples/agent_apis`); nothing is downloaded here. Exit 77 (skipped) without
# node or those packages. Every process it starts is stopped on exit.
set -uo pipefail
CEDAR=${1:?usage: apis_e2e.sh CEDAR_BINARY SOURCE_DIR}
SRC=${2:?usage: apis_e2e.sh CEDAR_BINARY SOURCE_DIR}
CHECK="$SRC/examples/agent_apis/apis_check.mjs"

. "$SRC/tests/e2e/common.sh"
e2e_setup cedar-apis
for p in @anthropic-ai/sdk openai ai @ai-sdk/openai zod; do
  [ -f "$SRC/examples/agent_apis/node_modules/$p/package.json" ] ||
    skip "$p is not installed (npm ci --prefix examples/agent_apis, as scripts/setup.sh does)"
done

timeout 120 "$CEDAR" init --preset tiny --seed 1 --out "$TMP/tiny" >/dev/null || fail "cedar init"
# The seeds of requests that give none (the AI SDK's Responses provider sends none): fixed, so a
# failure repeats with the same SERVER_SEED.
SERVER_SEED=${SERVER_SEED:-1}

# 1. The Unix socket.
SOCK="$TMP/cedar.sock"
start_server unix --socket "$SOCK" --seed "$SERVER_SEED"
timeout 300 node "$CHECK" --socket "$SOCK" >"$TMP/unix.jsonl" 2>"$TMP/unix.check.err" ||
  { cat "$TMP/unix.check.err"; tail -20 "$TMP/unix.err"; fail "the clients over the Unix socket"; }
cat "$TMP/unix.jsonl"
stop_server unix

# 2. TCP with an API key.
start_server tcp --socket none --host 127.0.0.1 --port 0 --api-key e2e-key --seed "$SERVER_SEED"
PORT=$(node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").split("\n").find(x=>x.includes("listening"));console.log(JSON.parse(l).tcp.split(":").pop())' "$TMP/tcp.out")
DENIED=$(curl -s -w '\n%{http_code}' -H 'content-type: application/json' -d '{}' "http://127.0.0.1:$PORT/v1/messages")
[ "$(tail -1 <<<"$DENIED")" = "401" ] || fail "/v1/messages without a key answered $(tail -1 <<<"$DENIED")"
head -1 <<<"$DENIED" | node -e 'const j=JSON.parse(require("fs").readFileSync(0,"utf8")); if (j.type!=="error"||j.error.type!=="authentication_error") process.exit(1)' ||
  fail "the 401 on /v1/messages is not in Anthropic's shape: $(head -1 <<<"$DENIED")"
timeout 300 node "$CHECK" --base-url "http://127.0.0.1:$PORT" --api-key e2e-key >"$TMP/tcp.jsonl" 2>"$TMP/tcp.check.err" ||
  { cat "$TMP/tcp.check.err"; tail -20 "$TMP/tcp.err"; fail "the clients over TCP"; }
cat "$TMP/tcp.jsonl"
stop_server tcp
echo "PASS"
