#!/usr/bin/env python3
"""A fake model server for end-to-end tests of agent CLIs inside agent-sandbox.

    python3 fakemodel.py --port N [--bind ADDR] [--log FILE] [--tls-cert C --tls-key K]

Python 3 standard library only, so it runs on any test host without installs.

It speaks just enough of the OpenAI APIs that codex, opencode, pi and aider use:

  POST /v1/responses          Responses API, streaming (SSE) or not   (codex)
  POST /v1/chat/completions   Chat Completions, streaming or not      (opencode, pi, aider)
  GET  /v1/models             model list
  anything else               404 with a JSON error body

Every path is also accepted without the /v1 prefix, since some clients put the
version in the base URL and some don't.

The "model" is a script: the user's prompt holds a line `RUN: <shell command>`.
  * first turn (no tool result yet in the conversation): answer with ONE call of
    the shell-like tool that the request offers, arguments in that tool's schema;
  * once the conversation holds a tool result: answer `DONE: ` + the first 200
    characters of that result, which ends the agent's turn.
  * a request that offers no tools (aider) gets a reply that proposes the command
    as a ```bash block and, for `echo TEXT > FILE` commands, also an edit block
    creating FILE (see aider_reply for why).

Each request is appended to --log as one JSON line: method, path, all headers
(Authorization included: the tests check which credentials reach the model) and
body (parsed JSON when it parses, else text).

Other protocols live in sibling modules fake_anthropic.py and fake_gemini.py; each
exposes handle(req_handler, method, path, body_bytes) -> bool (True if it answered).
They are tried first, when present.
"""

import argparse
import gzip
import json
import os
import re
import ssl
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Sibling protocol modules; no __pycache__ left in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
EXTENSIONS = []
for _name in ("fake_anthropic", "fake_gemini"):
    try:
        EXTENSIONS.append(__import__(_name))
    except ImportError:
        pass

MODEL_IDS = ["fake-model", "gpt-5", "gpt-4o"]
LOG_LOCK = threading.Lock()
LOG_FILE = None
# `opencode run` wraps a prompt that has spaces in double quotes: allow one pair.
RUN_RE = re.compile(r"""^\s*(["']?)RUN:\s*(.+?)\s*\1\s*$""", re.M)


def log_request(method, path, headers, body_bytes):
    if not LOG_FILE:
        return
    try:
        body = json.loads(body_bytes) if body_bytes else None
    except ValueError:
        body = body_bytes.decode("utf-8", "replace")
    rec = {"time": time.time(), "method": method, "path": path,
           "headers": dict(headers.items()), "body": body}
    with LOG_LOCK, open(LOG_FILE, "a") as f:
        f.write(json.dumps(rec) + "\n")


# ---------------------------------------------------------------- conversation

def texts(content):
    """All text in a message content: a string, or a list of parts."""
    if isinstance(content, str):
        return [content]
    out = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return out


def find_command(user_texts):
    """The last `RUN: cmd` line in the user's messages (agents prepend context)."""
    cmd = None
    for t in user_texts:
        for m in RUN_RE.finditer(t):
            cmd = m.group(2)
    return cmd


def done_text(tool_output):
    out = tool_output or ""
    # codex's exec_command wraps the output in a header (Chunk ID, Wall time,
    # exit code...) ending in "Output:\n"; keep what the command printed.
    if "\nOutput:\n" in out:
        out = out.split("\nOutput:\n", 1)[1]
    return "DONE: " + out[:200]


def pick_tool(tools):
    """(name, kind, schema) of the shell-like tool offered, or None.

    Works on both tool shapes: Responses ({type, name, parameters}) and Chat
    ({type: function, function: {name, parameters}}). Preference order: tools
    that run a command line directly come first.
    """
    by_name = {}
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "local_shell":
            by_name["local_shell"] = ("local_shell", "local_shell", {})
            continue
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        name = fn.get("name")
        if isinstance(name, str):
            by_name[name] = (name, t.get("type", "function"), fn.get("parameters") or {})
    for name in ("shell_command", "exec_command", "shell", "local_shell", "bash",
                 "Bash", "run_shell_command", "run_command", "execute_command"):
        if name in by_name:
            return by_name[name]
    for name, v in by_name.items():  # last resort: anything that smells of a shell
        if re.search(r"shell|bash|exec|command", name, re.I):
            return v
    return None


def tool_args(name, schema, cmd):
    """Arguments for the chosen tool, following its JSON schema's property names."""
    props = (schema or {}).get("properties") or {}
    args = {}
    if "cmd" in props:                       # codex exec_command (unified exec)
        args["cmd"] = cmd
    elif "command" in props:
        if props["command"].get("type") == "array":   # codex `shell`: argv
            args["command"] = ["bash", "-lc", cmd]
        else:                                # shell_command, opencode/pi `bash`
            args["command"] = cmd
    else:
        args["command"] = cmd
    if "description" in props:               # opencode's bash requires it
        args["description"] = "Run the requested command"
    if "timeout_ms" in props:
        args["timeout_ms"] = 60000
    return args


# ---------------------------------------------------------------- Responses API

def responses_turn(body):
    """('call', name, kind, args) | ('text', str) for a Responses request."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = items if isinstance(items, list) else []
    user, output = [], None
    for it in items:
        if not isinstance(it, dict):
            continue
        if it.get("type", "message") == "message" and it.get("role") == "user":
            user += texts(it.get("content"))
        if it.get("type") in ("function_call_output", "custom_tool_call_output",
                              "local_shell_call_output"):
            out = it.get("output")
            if isinstance(out, dict):        # older codex: {content, success}
                out = out.get("content")
            if isinstance(out, list):
                out = "".join(texts(out))
            output = out if isinstance(out, str) else json.dumps(out)
    if output is not None:
        return ("text", done_text(output))
    cmd = find_command(user)
    tool = pick_tool(body.get("tools"))
    if cmd is None or tool is None:
        return ("text", "DONE: nothing to run" if cmd is None else "DONE: no shell tool offered")
    name, kind, schema = tool
    return ("call", name, kind, tool_args(name, schema, cmd))


def responses_items(turn):
    if turn[0] == "text":
        return [{"type": "message", "role": "assistant", "id": "msg_" + uuid.uuid4().hex[:12],
                 "status": "completed",
                 "content": [{"type": "output_text", "text": turn[1], "annotations": []}]}]
    _, name, kind, args = turn
    call_id = "call_" + uuid.uuid4().hex[:12]
    if kind == "local_shell":
        return [{"type": "local_shell_call", "id": "lsh_" + call_id[5:], "call_id": call_id,
                 "status": "completed",
                 "action": {"type": "exec", "command": ["bash", "-lc", args["command"]]
                            if isinstance(args["command"], str) else args["command"]}}]
    return [{"type": "function_call", "id": "fc_" + call_id[5:], "call_id": call_id,
             "name": name, "arguments": json.dumps(args), "status": "completed"}]


USAGE_RESP = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
              "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
              "total_tokens": 15}


def handle_responses(h, body):
    items = responses_items(responses_turn(body))
    rid = "resp_" + uuid.uuid4().hex[:12]
    model = body.get("model", "fake-model")
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model}
    if not body.get("stream"):
        return h.send_json(200, dict(base, status="completed", output=items, usage=USAGE_RESP))
    # codex needs: response.created, one response.output_item.done per item, and
    # response.completed (without it: "stream closed before response.completed").
    events = [{"type": "response.created", "response": dict(base, status="in_progress")}]
    for i, it in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": i, "item": it})
        if it["type"] == "message":
            events.append({"type": "response.output_text.delta", "item_id": it["id"],
                           "output_index": i, "content_index": 0,
                           "delta": it["content"][0]["text"]})
        events.append({"type": "response.output_item.done", "output_index": i, "item": it})
    events.append({"type": "response.completed",
                   "response": dict(base, status="completed", output=items, usage=USAGE_RESP)})
    h.send_sse([(e["type"], e) for e in events])


# ---------------------------------------------------------------- Chat Completions

AIDER_ECHO_RE = re.compile(r"""^echo\s+(['"]?)(.*?)\1\s*>\s*(\S+)$""")


def aider_reply(cmd):
    """aider offers no tools. Its reply parser runs ```bash blocks only after an
    explicit "yes" (--yes-always does not count for shell commands), so a shell
    command alone proves nothing in a non-interactive run. What --yes-always does
    approve is file creation, so for `echo TEXT > FILE` we also send a
    SEARCH/REPLACE block (aider's diff edit format) that creates FILE."""
    reply = "Running it.\n\n```bash\n%s\n```\n" % cmd
    m = AIDER_ECHO_RE.match(cmd)
    if m:
        reply += ("\n%s\n```\n<<<<<<< SEARCH\n=======\n%s\n>>>>>>> REPLACE\n```\n"
                  % (m.group(3), m.group(2)))
    return reply


def chat_turn(body):
    msgs = body.get("messages") if isinstance(body.get("messages"), list) else []
    user, output = [], None
    for m in msgs:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "user":
            user += texts(m.get("content"))
        elif m.get("role") == "tool":
            output = "".join(texts(m.get("content")))
    if output is not None:
        return ("text", done_text(output))
    cmd = find_command(user)
    if cmd is None:
        return ("text", "DONE: nothing to run")
    if not body.get("tools"):
        return ("text", aider_reply(cmd))
    tool = pick_tool(body.get("tools"))
    if tool is None:
        return ("text", "DONE: no shell tool offered")
    name, _, schema = tool
    return ("call", name, "function", tool_args(name, schema, cmd))


USAGE_CHAT = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def handle_chat(h, body):
    turn = chat_turn(body)
    cid = "chatcmpl-" + uuid.uuid4().hex[:12]
    model = body.get("model", "fake-model")
    base = {"id": cid, "created": int(time.time()), "model": model}
    if turn[0] == "text":
        msg, finish = {"role": "assistant", "content": turn[1]}, "stop"
        calls = None
    else:
        calls = [{"index": 0, "id": "call_" + uuid.uuid4().hex[:12], "type": "function",
                  "function": {"name": turn[1], "arguments": json.dumps(turn[3])}}]
        msg, finish = {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
    if not body.get("stream"):
        m = dict(msg)
        if calls:
            m["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
        return h.send_json(200, dict(base, object="chat.completion", usage=USAGE_CHAT,
                                     choices=[{"index": 0, "message": m,
                                               "finish_reason": finish}]))
    chunk = dict(base, object="chat.completion.chunk")
    delta = {"role": "assistant"}
    if calls:
        delta["tool_calls"] = calls
    else:
        delta["content"] = msg["content"]
    events = [dict(chunk, choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
              dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]),
              dict(chunk, choices=[], usage=USAGE_CHAT)]  # for stream_options.include_usage
    h.send_sse([(None, e) for e in events] + [(None, "[DONE]")])


# ---------------------------------------------------------------- HTTP plumbing

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def finish(self):
        # Streamed answers end when the connection closes. Over TLS that end must be a
        # close_notify (what real providers send): a bare TCP close is a truncation to a strict
        # client (rustls, the supervisor's credential endpoint), which then fails the answer.
        try:
            super().finish()
        finally:
            if isinstance(self.connection, ssl.SSLSocket):
                try:
                    self.connection.unwrap()
                except (OSError, ValueError):
                    pass
    server_version = "fakemodel/1"

    def log_message(self, fmt, *args):  # quiet: the JSON log is the record
        pass

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "").lower()
        if "chunked" in te:
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        enc = self.headers.get("Content-Encoding", "").lower()
        try:
            if enc == "gzip":
                data = gzip.decompress(data)
            elif enc == "deflate":
                data = zlib.decompress(data)
        except Exception:
            pass  # leave it as sent; it will be logged and answered 400
        return data

    def send_json(self, code, obj, content_type="application/json", headers=None):
        """One JSON answer; `headers` are the provider's own extras (a request id)."""
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events, headers=None, eol="\n"):
        """events: [(event_name or None, obj or str)]. The stream ends by closing
        the connection: no Content-Length, Connection: close. `eol` ends each line
        (Google's API uses CRLF)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True
        for name, obj in events:
            data = obj if isinstance(obj, str) else json.dumps(obj)
            frame = ("event: %s%s" % (name, eol) if name else "") + "data: %s%s%s" % (data, eol, eol)
            self.wfile.write(frame.encode())
            self.wfile.flush()

    def dispatch(self, method):
        try:
            body_bytes = self.read_body() if method not in ("GET", "HEAD") else b""
        except Exception:
            body_bytes = b""
        path = self.path.split("?", 1)[0]
        log_request(method, self.path, self.headers, body_bytes)
        try:
            for ext in EXTENSIONS:
                if ext.handle(self, method, path, body_bytes):
                    return
            route = path[3:] if path.startswith("/v1/") else path
            if method == "GET" and route in ("/models", "/models/"):
                return self.send_json(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                    for m in MODEL_IDS]})
            if method == "POST" and route in ("/responses", "/chat/completions"):
                try:
                    body = json.loads(body_bytes or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("body is not a JSON object")
                except ValueError as e:
                    return self.send_json(400, {"error": {"message": "bad JSON: %s" % e,
                                                          "type": "invalid_request_error"}})
                if route == "/responses":
                    return handle_responses(self, body)
                return handle_chat(self, body)
            self.send_json(404, {"error": {"message": "no route for %s %s" % (method, path),
                                           "type": "not_found"}})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # a bug here must not kill the server mid-test
            try:
                self.send_json(500, {"error": {"message": repr(e), "type": "server_error"}})
            except Exception:
                pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_CONNECT(self):
        # A client pointed at us as its HTTPS proxy (HTTPS_PROXY=http://127.0.0.1:N)
        # logs here every host it tries to reach, then gets a 404.
        self.dispatch("CONNECT")


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        # HTTPServer.server_bind calls getfqdn(), a reverse DNS lookup that can hang for
        # seconds in a network namespace with no resolver for its own addresses.
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def main():
    global LOG_FILE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--log")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--tls-port", type=int,
                    help="also serve TLS on this port (with --tls-cert), plain HTTP staying on --port")
    ap.add_argument("--until-stdin-eof", action="store_true",
                    help='print "ready" once listening and exit when stdin reaches EOF, so a test '
                         "harness holding the pipe takes the server with it however it ends")
    a = ap.parse_args()
    LOG_FILE = a.log

    def server(port, tls):
        srv = Server((a.bind, port), Handler)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(a.tls_cert, a.tls_key or None)
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        return srv

    servers = []
    if a.tls_port:
        servers = [server(a.port, False), server(a.tls_port, True)]
    else:
        servers = [server(a.port, bool(a.tls_cert))]
    for srv in servers[1:]:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("fakemodel listening on %s:%d" % (a.bind, a.port), file=sys.stderr, flush=True)
    if a.until_stdin_eof:
        threading.Thread(target=servers[0].serve_forever, daemon=True).start()
        print("ready", flush=True)
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except KeyboardInterrupt:
            pass
        os._exit(0)
    try:
        servers[0].serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
