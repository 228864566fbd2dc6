"""Anthropic Messages API for the fake model server (Claude Code).

    handle(req_handler, method, path, body_bytes) -> bool

Routes (with or without the /v1 prefix; the caller strips the query string,
Claude Code sends `?beta=true`):

  POST /v1/messages               streaming (SSE) when body.stream, else JSON
  POST /v1/messages/count_tokens  {"input_tokens": N}
  HEAD /api/hello                 200 (Claude Code's start-up probe of the base URL)
  GET  /v1/models[/ID]            a small model list, only for requests with an
                                  anthropic-version header (else fakemodel.py's)

The script (same as fakemodel.py): the last `RUN: <cmd>` line in the user's
messages. If the request offers a shell tool (Claude Code: `Bash`) and the
conversation holds no tool_result yet -> one tool_use of that tool with
{"command": CMD, "description": ...}. Once a tool_result is present -> text
`DONE: ` + first 200 chars of the last tool result. Anything else (title
generation, quota check with max_tokens 1, haiku summaries, no RUN line) ->
a short plain text answer, so the CLI never errors.

Standard library only.
"""

import json
import re
import uuid

RUN_RE = re.compile(r"^\s*RUN:\s*(.+?)\s*$", re.M)

# Shell-like tools in order of preference (Claude Code calls its tool "Bash").
SHELL_TOOLS = ("Bash", "bash", "shell", "run_shell_command", "execute_command")


def _texts(content):
    if isinstance(content, str):
        return [content]
    out = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" \
                    and isinstance(part.get("text"), str):
                out.append(part["text"])
    return out


def _tool_result_text(block):
    c = block.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n".join(p.get("text", "") for p in c
                         if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _scan(body):
    """(command or None, last tool_result text or None)."""
    cmd, result = None, None
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        for t in _texts(msg.get("content")):
            for m in RUN_RE.finditer(t):
                cmd = m.group(1)
        if isinstance(msg.get("content"), list):
            for block in msg["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    result = _tool_result_text(block)
    return cmd, result


def _pick_tool(tools):
    names = [t.get("name") for t in tools or [] if isinstance(t, dict)]
    for want in SHELL_TOOLS:
        if want in names:
            return want
    return None


def _side_text(body):
    """Plain answer for requests that are not the agent's main loop."""
    sysprompt = body.get("system")
    stext = " ".join(_texts(sysprompt)) if not isinstance(sysprompt, str) else sysprompt
    if "title" in stext.lower() and "json" in stext.lower():
        return json.dumps({"title": "Fake session"})
    if "isNewTopic" in stext:
        return json.dumps({"isNewTopic": False, "title": None})
    return "OK"


def turn(body):
    """The reply as (list of content blocks, stop_reason)."""
    cmd, result = _scan(body)
    tool = _pick_tool(body.get("tools"))
    if result is not None:
        return [{"type": "text", "text": "DONE: " + result[:200]}], "end_turn"
    if cmd and tool:
        return [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24],
                 "name": tool,
                 "input": {"command": cmd, "description": "Run the requested command"}}], \
            "tool_use"
    if body.get("max_tokens") == 1:
        return [{"type": "text", "text": "O"}], "max_tokens"
    return [{"type": "text", "text": _side_text(body)}], "end_turn"


def _usage(out_tokens=5):
    return {"input_tokens": 10, "output_tokens": out_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _request_id():
    return {"request-id": "req_fake_" + uuid.uuid4().hex[:16]}


def _send_json(h, code, obj):
    h.send_json(code, obj, headers=_request_id())


def _send_sse(h, events):
    h.send_sse(events, headers=_request_id())


def _stream_events(msg_id, model, blocks, stop_reason):
    ev = [("message_start", {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": _usage(1)}})]
    ev.append(("ping", {"type": "ping"}))
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {"type": "text", "text": ""}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "text_delta",
                                                         "text": b["text"]}}))
        else:
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {"type": "tool_use",
                                                                 "id": b["id"],
                                                                 "name": b["name"],
                                                                 "input": {}}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "input_json_delta",
                                                         "partial_json":
                                                             json.dumps(b["input"])}}))
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    ev.append(("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                 "usage": {"output_tokens": 5}}))
    ev.append(("message_stop", {"type": "message_stop"}))
    return ev


MODELS = ["claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5", "fake-model"]


def handle(h, method, path, body_bytes):
    route = path.split("?", 1)[0]
    if route.startswith("/v1/"):
        route = route[3:]
    route = route.rstrip("/")
    if route == "/api/hello" and method in ("HEAD", "GET"):
        # Claude Code probes ANTHROPIC_BASE_URL with HEAD /api/hello at start.
        data = b"" if method == "HEAD" else b"{}"
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        return True
    # Only Anthropic clients (anthropic-version header) get our model list:
    # GET /v1/models is also the OpenAI route that fakemodel.py answers.
    anthropic = h.headers.get("anthropic-version") is not None
    if method == "GET" and route == "/models" and anthropic:
        _send_json(h, 200, {"data": [{"type": "model", "id": m, "display_name": m,
                                      "created_at": "2025-01-01T00:00:00Z"} for m in MODELS],
                            "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]})
        return True
    if method == "GET" and route.startswith("/models/") and anthropic:
        m = route[len("/models/"):]
        _send_json(h, 200, {"type": "model", "id": m, "display_name": m,
                            "created_at": "2025-01-01T00:00:00Z"})
        return True
    if method != "POST" or route not in ("/messages", "/messages/count_tokens"):
        return False
    try:
        body = json.loads(body_bytes or b"{}")
        if not isinstance(body, dict):
            raise ValueError("body is not a JSON object")
    except ValueError as e:
        _send_json(h, 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": "bad JSON: %s" % e}})
        return True
    if route == "/messages/count_tokens":
        n = max(1, len(json.dumps(body)) // 4)
        _send_json(h, 200, {"input_tokens": n})
        return True
    model = body.get("model") or "claude-sonnet-4-5"
    blocks, stop = turn(body)
    msg_id = "msg_fake_" + uuid.uuid4().hex[:20]
    if body.get("stream"):
        _send_sse(h, _stream_events(msg_id, model, blocks, stop))
    else:
        _send_json(h, 200, {"id": msg_id, "type": "message", "role": "assistant",
                            "model": model, "content": blocks, "stop_reason": stop,
                            "stop_sequence": None, "usage": _usage()})
    return True
