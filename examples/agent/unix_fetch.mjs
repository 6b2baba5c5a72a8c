// A `fetch` for the openai client that speaks HTTP over a Unix domain socket.
//
//   import OpenAI from 'openai';
//   const client = new OpenAI({ baseURL: 'http://cedar/v1', apiKey: 'unused', fetch: unixSocketFetch(path) });
//
// Node's http.request takes `socketPath`; the host in the URL is then only a name. The body
// streams (Server-Sent Events work), and aborting the request closes the connection, which
// makes `cedar serve` cancel the turn.
import http from 'node:http';
import { Readable } from 'node:stream';

// One keep-alive agent per socket path: connections are reused between turns.
const agents = new Map();

function agentFor(socketPath) {
  if (!agents.has(socketPath)) agents.set(socketPath, new http.Agent({ keepAlive: true, socketPath }));
  return agents.get(socketPath);
}

async function bodyBytes(body) {
  if (body == null) return undefined;
  if (typeof body === 'string' || body instanceof Uint8Array) return body;
  return Buffer.from(await new Response(body).arrayBuffer());
}

export function unixSocketFetch(socketPath) {
  return async function fetchOverUnixSocket(input, init = {}) {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const body = await bodyBytes(init.body);
    const headers = Object.fromEntries(new Headers(init.headers ?? {}));
    const method = init.method ?? 'GET';
    return new Promise((resolve, reject) => {
      const req = http.request(
        { agent: agentFor(socketPath), socketPath, path: url.pathname + url.search, method, headers },
        (res) => {
          const out = new Headers();
          for (const [k, v] of Object.entries(res.headers)) {
            if (Array.isArray(v)) v.forEach((x) => out.append(k, x));
            else if (v !== undefined) out.set(k, v);
          }
          const empty = method === 'HEAD' || res.statusCode === 204 || res.statusCode === 304;
          resolve(new Response(empty ? null : Readable.toWeb(res), {
            status: res.statusCode, statusText: res.statusMessage, headers: out,
          }));
        });
      req.on('error', reject);
      const signal = init.signal;
      if (signal) {
        const abort = () => req.destroy(new DOMException('The operation was aborted.', 'AbortError'));
        if (signal.aborted) abort();
        else signal.addEventListener('abort', abort, { once: true });
      }
      if (body !== undefined) req.write(body);
      req.end();
    });
  };
}

// Closes the idle keep-alive connections (lets the process exit at once).
export function closeUnixSocketAgents() {
  for (const a of agents.values()) a.destroy();
  agents.clear();
}
