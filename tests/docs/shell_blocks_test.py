#!/usr/bin/env python3
"""Runs every shell block of README.md and docs/SERVER.md as a reader would, with the built cedar.

Usage: shell_blocks_test.py SOURCE_DIR BUILD_DIR [DOC.md ...]   (ctest: docs_shell_blocks, unit)

Why: the docs are followed literally by newcomers (issue 19); a block that no longer runs is a bug.

Each document runs in its own working copy under a temporary directory: every top-level entry of
the source tree is symlinked in, `build` points at BUILD_DIR (the docs say ./build/cedar),
`models/` is a real directory of symlinks (so blocks can write models/tiny next to the shipped
models), and `../shared` is the real ../shared. Blocks run in document order in that copy
(a later block may use what an earlier one wrote), each with `bash -e -o pipefail`, a timeout,
XDG_RUNTIME_DIR and TMPDIR inside the temporary directory (so the server's default socket is
private), and `curl` wrapped to fail on an HTTP error (--fail-with-body). The literal socket path
/tmp/cedar.sock in a block is replaced by one inside the temporary directory.

Fenced blocks tagged bash, sh or console run. An HTML comment alone on a line just above the fence
(blank lines between are allowed) changes that:
  <!-- long -->          skipped: setup, full benchmarks, a GPU, the network, a server in the
                         foreground (anything that cannot finish in seconds here).
  <!-- server -->        the block's first line that runs `cedar serve` is started in the
                         background (a trailing `& sleep N` dropped); the rest of the block runs
                         once its socket answers /health; then the server is stopped.
  <!-- server: CMD -->   CMD (a `cedar serve` command line) is started in the background as above
                         before the whole block runs (for a block that talks to a server started
                         as an earlier block showed).
A failing block fails the test with its file, line number, text and output.
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

BLOCK_TIMEOUT_S = 120   # one block; the docs' runnable blocks take seconds on the tiny models
SERVER_READY_S = 60     # a server's socket must answer /health within this
CURL_WRAPPER = 'curl() { command curl --fail-with-body -sS --max-time 60 "$@"; }\n'
FENCE = re.compile(r'^```(\w*)\s*$')
MARKER = re.compile(r'^<!--\s*(long|server)(?::\s*(.*?))?\s*-->\s*$')


def blocks(path):
    """Yields (line number of the fence, language, marker, marker argument, lines) per fenced block."""
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith('```'):
            j += 1
        marker, arg = None, None
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k >= 0:
            mm = MARKER.match(lines[k].strip())
            if mm:
                marker, arg = mm.group(1), mm.group(2)
        yield start + 1, lang, marker, arg, lines[start + 1:j]
        i = j + 1


def working_copy(src, build, root):
    """The reader's checkout: symlinks to the source tree, build -> BUILD_DIR, models/ writable."""
    repo = os.path.join(root, 'repo')
    os.makedirs(os.path.join(repo, 'models'))
    for name in os.listdir(src):
        if name in ('build', 'models', 'out', '.git'):
            continue
        os.symlink(os.path.join(src, name), os.path.join(repo, name))
    for name in os.listdir(os.path.join(src, 'models')):
        os.symlink(os.path.join(src, 'models', name), os.path.join(repo, 'models', name))
    os.symlink(os.path.abspath(build), os.path.join(repo, 'build'))
    shared = os.path.join(os.path.dirname(os.path.abspath(src)), 'shared')
    if os.path.isdir(shared):
        os.symlink(shared, os.path.join(root, 'shared'))
    for d in ('run', 'tmp'):
        os.makedirs(os.path.join(root, d), mode=0o700)
    with open(os.path.join(root, 'curl.sh'), 'w') as f:
        f.write(CURL_WRAPPER)
    env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(root, 'run'), TMPDIR=os.path.join(root, 'tmp'),
               BASH_ENV=os.path.join(root, 'curl.sh'), OPENBLAS_NUM_THREADS='1')
    return repo, env


def socket_of(cmd, env):
    """The Unix socket a `cedar serve` command line listens on (--socket, else the default path)."""
    args = shlex.split(cmd, comments=True)
    if '--socket' in args:
        return args[args.index('--socket') + 1]
    return os.path.join(env['XDG_RUNTIME_DIR'], 'cedar', 'cedar.sock')


def start_server(cmd, repo, env, log):
    """Starts `cmd` in the background and waits until its socket answers /health."""
    cmd = re.sub(r'\s*&\s*(sleep\s+\S+\s*)?$', '', cmd.split(' #')[0]).strip()
    sock = socket_of(cmd, env)
    proc = subprocess.Popen(['bash', '-c', 'exec ' + cmd], cwd=repo, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + SERVER_READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f'server `{cmd}` exited with {proc.returncode} before answering')
        if os.path.exists(sock) and subprocess.run(
                ['curl', '-sf', '--max-time', '2', '--unix-socket', sock, 'http://cedar/health'],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return proc
        time.sleep(0.1)
    stop_server(proc)
    raise RuntimeError(f'server `{cmd}` did not answer /health on {sock} within {SERVER_READY_S} s')


def stop_server(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def run_block(doc, line, marker, arg, body, repo, root, env):
    """Runs one block; returns None on success, else the failure report."""
    text = '\n'.join(body).replace('/tmp/cedar.sock', os.path.join(root, 'cedar.sock'))
    server_cmd = None
    if marker == 'server' and arg:
        server_cmd = arg.replace('/tmp/cedar.sock', os.path.join(root, 'cedar.sock'))
    elif marker == 'server':
        rows = text.split('\n')
        idx = next((n for n, r in enumerate(rows) if re.search(r'\bcedar serve\b', r)), None)
        if idx is None:
            return f'{doc}:{line}: marked <!-- server --> but no line runs `cedar serve`'
        server_cmd = rows[idx]
        text = '\n'.join(rows[:idx] + rows[idx + 1:])
    log_path = os.path.join(root, f'server-{line}.log')
    proc = None
    with open(log_path, 'w') as log:
        try:
            if server_cmd:
                proc = start_server(server_cmd, repo, env, log)
            script = os.path.join(root, f'block-{line}.sh')
            with open(script, 'w') as f:
                f.write(text + '\n')
            # Its own process group, killed afterwards: nothing a block starts outlives it.
            p = subprocess.Popen(['bash', '-e', '-o', 'pipefail', script], cwd=repo, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                raw, _ = p.communicate(timeout=BLOCK_TIMEOUT_S)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                raw, _ = p.communicate()
                rc = f'timeout after {BLOCK_TIMEOUT_S} s'
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out = (raw or b'').decode('utf-8', 'replace')
        except RuntimeError as e:
            rc, out = str(e), ''
        finally:
            if proc:
                stop_server(proc)
    if rc == 0:
        return None
    server_log = open(log_path, encoding='utf-8', errors='replace').read() if server_cmd else ''
    report = f'{doc}:{line}: block failed ({"exit " + str(rc) if isinstance(rc, int) else rc})\n'
    report += '--- block ---\n' + '\n'.join(body) + '\n--- output ---\n' + out[-6000:]
    if server_log:
        report += '\n--- server log (tail) ---\n' + server_log[-3000:]
    return report


def main():
    if len(sys.argv) < 3:
        sys.exit('usage: shell_blocks_test.py SOURCE_DIR BUILD_DIR [DOC.md ...]')
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    docs = sys.argv[3:] or ['README.md', 'docs/SERVER.md']
    if not os.access(os.path.join(build, 'cedar'), os.X_OK):
        sys.exit(f'expected the built cedar at {build}/cedar, found none')
    failures, ran, skipped = [], 0, 0
    for doc in docs:
        with tempfile.TemporaryDirectory(prefix='cedar-docs-') as root:
            repo, env = working_copy(src, build, root)
            for line, lang, marker, arg, body in blocks(os.path.join(src, doc)):
                if lang not in ('bash', 'sh', 'console'):
                    continue
                if marker == 'long':
                    print(f'{doc}:{line}: skipped (long)')
                    skipped += 1
                    continue
                t0 = time.monotonic()
                failure = run_block(doc, line, marker, arg, body, repo, root, env)
                ran += 1
                status = 'FAILED' if failure else 'ok'
                print(f'{doc}:{line}: {status} ({time.monotonic() - t0:.1f} s){" [server]" if marker else ""}',
                      flush=True)
                if failure:
                    failures.append(failure)
    print(f'{ran} blocks run, {skipped} skipped (long), {len(failures)} failed')
    for f in failures:
        print('\n' + f)
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
