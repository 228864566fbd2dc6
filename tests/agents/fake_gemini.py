"""Gemini API (generativelanguage v1beta) for the fake model server (Gemini CLI).

    handle(req_handler, method, path, body_bytes) -> bool

Routes (any API version prefix: /v1beta, /v1, /v1alpha):

  POST /v1beta/models/MODEL:streamGenerateContent[?alt=sse]
        with alt=sse: `data: {GenerateContentResponse}` frames; else a JSON array
  POST /v1beta/models/MODEL:generateContent      one GenerateContentResponse
  POST /v1beta/models/MODEL:countTokens          {"totalTokens": N}
  POST /v1beta/models/MODEL:embedContent         a tiny embedding
  GET  /v1beta/models[/MODEL]                    a small model list (/v1/models
                                                 only with an x-goog-api-key header)

The script (same as fakemodel.py): the last `RUN: <cmd>` line in the user's
turns. If the request offers a shell tool (Gemini CLI: `run_shell_command`)
and the conversation holds no functionResponse yet -> one functionCall
{"command": CMD}. Once a functionResponse is present -> text `DONE: ` + first
200 chars of its output. Requests asking for JSON (generationConfig
responseMimeType application/json with a responseJsonSchema / responseSchema:
Gemini CLI's next-speaker check, model router, loop detection) get a JSON
object built from the schema (next_speaker -> "user", model_choice -> "flash",
complexity_score -> 10 for the numerical model router, which wants 1..100).
Anything else gets a short plain text.

Standard library only.
"""

import json
import re
import uuid

RUN_RE = re.compile(r"^\s*RUN:\s*(.+?)\s*$", re.M)
SHELL_TOOLS = ("run_shell_command", "shell", "bash", "Bash", "execute_command")
API_PATH = re.compile(r"^/(v1beta|v1alpha|v1)/models(?:/([^:/]+)(?::([A-Za-z]+))?)?/?$")

# Preferred values for fields of Gemini CLI's internal JSON requests.
PREFERRED = {"next_speaker": "user", "model_choice": "flash",
             "reasoning": "fake model: nothing more to do",
             "is_loop": False, "unproductive_state_detected": False,
             "confidence": 0.0, "complexity_score": 10,
             "complexity_reasoning": "fake model: simple task"}


def _parts(body):
    for c in body.get("contents") or []:
        if isinstance(c, dict):
            for p in c.get("parts") or []:
                if isinstance(p, dict):
                    yield c.get("role"), p


def _response_text(resp):
    """Text of a functionResponse.response (Gemini CLI: {"output": "..."})."""
    if isinstance(resp, dict):
        for k in ("output", "llmContent", "content", "result"):
            v = resp.get(k)
            if isinstance(v, str):
                return v
        if "error" in resp:
            return "error: %s" % resp["error"]
    if isinstance(resp, str):
        return resp
    return json.dumps(resp)


def _scan(body):
    cmd, result = None, None
    for role, p in _parts(body):
        if role in (None, "user") and isinstance(p.get("text"), str):
            for m in RUN_RE.finditer(p["text"]):
                cmd = m.group(1)
        if isinstance(p.get("functionResponse"), dict):
            result = _response_text(p["functionResponse"].get("response"))
    return cmd, result


def _tool_names(body):
    names = []
    for t in body.get("tools") or []:
        if isinstance(t, dict):
            for fd in t.get("functionDeclarations") or t.get("function_declarations") or []:
                if isinstance(fd, dict) and fd.get("name"):
                    names.append(fd["name"])
    return names


def _pick_tool(body):
    names = _tool_names(body)
    for want in SHELL_TOOLS:
        if want in names:
            return want
    return None


def _from_schema(schema, key=None, depth=0):
    if key in PREFERRED:
        return PREFERRED[key]
    if not isinstance(schema, dict) or depth > 8:
        return None
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    t = (t or "").lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if t == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _from_schema(v, k, depth + 1) for k, v in props.items()}
    if t == "array":
        return []
    if t == "boolean":
        return False
    if t in ("integer", "number"):
        return schema.get("minimum", 1)
    return "ok"


def turn(body):
    """Content parts of the model's reply and whether it is a function call."""
    gc = body.get("generationConfig") or body.get("config") or {}
    cmd, result = _scan(body)
    tool = _pick_tool(body)
    if gc.get("responseMimeType") == "application/json":
        schema = gc.get("responseJsonSchema") or gc.get("responseSchema") or {}
        return [{"text": json.dumps(_from_schema(schema))}]
    if result is not None:
        return [{"text": "DONE: " + result[:200]}]
    if cmd and tool:
        return [{"functionCall": {"name": tool, "args": {"command": cmd}}}]
    return [{"text": "OK"}]


def _response(model, parts):
    return {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15},
            "modelVersion": model,
            "responseId": "fake-" + uuid.uuid4().hex[:16]}


def _send_json(h, code, obj):
    h.send_json(code, obj, content_type="application/json; charset=UTF-8")


def _send_sse(h, objs):
    h.send_sse([(None, o) for o in objs], eol="\r\n")


def handle(h, method, path, body_bytes):
    m = API_PATH.match(path.split("?", 1)[0])
    if not m:
        return False
    _version, model, action = m.groups()
    if method == "GET" and not action:
        # GET /v1/models is also fakemodel.py's OpenAI route: only Gemini
        # clients (v1beta/v1alpha, or an x-goog-api-key header) get this list.
        if _version == "v1" and h.headers.get("x-goog-api-key") is None:
            return False
        if model:
            _send_json(h, 200, {"name": "models/" + model, "displayName": model,
                                "supportedGenerationMethods": ["generateContent"]})
        else:
            _send_json(h, 200, {"models": [{"name": "models/" + x, "displayName": x,
                                            "supportedGenerationMethods":
                                                ["generateContent", "countTokens"]}
                                           for x in MODELS]})
        return True
    if method != "POST" or not action:
        return False
    try:
        body = json.loads(body_bytes or b"{}")
        if not isinstance(body, dict):
            raise ValueError("body is not a JSON object")
    except ValueError as e:
        _send_json(h, 400, {"error": {"code": 400, "message": "bad JSON: %s" % e,
                                      "status": "INVALID_ARGUMENT"}})
        return True
    if action == "countTokens":
        _send_json(h, 200, {"totalTokens": max(1, len(json.dumps(body)) // 4)})
        return True
    if action in ("embedContent", "batchEmbedContents"):
        emb = {"values": [0.0] * 8}
        if action == "embedContent":
            _send_json(h, 200, {"embedding": emb})
        else:
            _send_json(h, 200, {"embeddings": [emb for _ in body.get("requests") or []]})
        return True
    if action not in ("generateContent", "streamGenerateContent"):
        _send_json(h, 404, {"error": {"code": 404, "message": "no action " + action,
                                      "status": "NOT_FOUND"}})
        return True
    resp = _response(model, turn(body))
    if action == "generateContent":
        _send_json(h, 200, resp)
    elif "alt=sse" in h.path:
        _send_sse(h, [resp])
    else:
        _send_json(h, 200, [resp])
    return True
