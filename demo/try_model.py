"""A scripted model behind an OpenAI-compatible endpoint, for trying real sessions offline.

Run ``python demo/try_model.py [--port 8765]`` and point pi-agent-cli at it (``[model]`` with
``provider = "openai"`` and ``base_url = "http://127.0.0.1:8765/v1"``; the user guide's "Try it
offline" has the whole set-up). It answers ``POST /v1/chat/completions``, streamed or not, from a
short script; it is no language model and claims to be none. What it does with the last message of
each request:

* a user line ``send TEXT to NAME`` calls ``send_pi_message`` (``target`` NAME, ``message`` TEXT);
* a user line ``list sessions`` (or ``who is live``) calls ``list_pi``;
* a tool result is repeated back as the answer (``send_pi_message answered: …``);
* a message from another session (the extension's framing) is acknowledged, and nothing more: the
  scripted model does what its own user typed, never what a peer wrote;
* anything else gets a line saying what the script understands.

It calls only a tool the request offers (a session without the extension has none of these), binds
to 127.0.0.1 unless told otherwise, needs no key (any ``Authorization`` is ignored) and keeps no
state between requests. Standard library only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: How the extension opens a peer message for the model (plugin/render/peer_text.py).
PEER_HEADER = "Message from another session"
ACKNOWLEDGED = "A message from another session arrived (above). I do nothing with it.\n"
SEND = re.compile(r"^\s*send\s+(?P<message>.+?)\s+to\s+(?P<target>\S.*?)\s*$", re.I | re.S)
LIST = re.compile(r"^\s*(list sessions|who is live)\W*$", re.I)
HELP = (
    "I am a scripted model. I understand 'send TEXT to NAME' and 'list sessions'; "
    "a message from another session I only acknowledge.\n"
)
#: How much of a tool result the answer repeats.
RESULT_CHARS = 2000
_call_ids = itertools.count(1)


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def tool_names(request: dict[str, Any]) -> set[str]:
    return {
        str(tool.get("function", {}).get("name"))
        for tool in request.get("tools") or ()
        if isinstance(tool, dict)
    }


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The script: ``{"content": text}`` or ``{"tool": name, "args": {...}}``.

    Every text ends with a line feed: a client that prints the stream as it comes (the turns a
    peer's message starts have no prompt to end them) then always ends on a whole line.
    """
    messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
    last = messages[-1] if messages else {}
    text = text_of(last.get("content"))
    offered = tool_names(request)
    if last.get("role") == "tool":
        called = {
            call.get("id"): call.get("function", {}).get("name")
            for message in messages
            for call in message.get("tool_calls") or ()
        }
        name = called.get(last.get("tool_call_id"), "the tool")
        return {"content": f"{name} answered:\n{text[:RESULT_CHARS].rstrip()}\n"}
    if last.get("role") != "user":
        return {"content": HELP}
    if text.startswith(PEER_HEADER):
        return {"content": ACKNOWLEDGED}
    wanted: dict[str, Any] | None = None
    if (match := SEND.match(text)) is not None:
        wanted = {"tool": "send_pi_message", "args": match.groupdict()}
    elif LIST.match(text) is not None:
        wanted = {"tool": "list_pi", "args": {}}
    if wanted is None:
        return {"content": HELP}
    if wanted["tool"] not in offered:
        return {"content": f"This session offers no {wanted['tool']} tool: is the extension in?\n"}
    return wanted


def completion(request: dict[str, Any], reply: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The non-streamed response body for ``reply``, and its finish reason."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    finish = "stop"
    if "tool" in reply:
        message["tool_calls"] = [
            {
                "id": f"call_{next(_call_ids)}",
                "type": "function",
                "function": {"name": reply["tool"], "arguments": json.dumps(reply["args"])},
            }
        ]
        finish = "tool_calls"
    body = {
        "id": f"chatcmpl-{next(_call_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.get("model", "scripted")),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
    return body, finish


def chunks(body: dict[str, Any], finish: str) -> list[dict[str, Any]]:
    """The same answer as a stream: one delta, the finish, the usage."""
    message = dict(body["choices"][0]["message"])
    if "tool_calls" in message:
        calls = message["tool_calls"]
        message["tool_calls"] = [dict(call, index=i) for i, call in enumerate(calls)]
    base = {key: body[key] for key in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    return [
        {**base, "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": body["usage"]},
    ]


class Handler(BaseHTTPRequestHandler):
    server_version = "try-model"

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self.send_json({"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        else:
            self.send_json({"error": {"message": "not found"}}, status=404)

    def do_POST(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json({"error": {"message": "not found"}}, status=404)
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            self.send_json({"error": {"message": "the body is not JSON"}}, status=400)
            return
        body, finish = completion(request, answer(request))
        if not request.get("stream"):
            self.send_json(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in chunks(body, finish):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def send_json(self, body: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="try_model.py", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (8765; 0: any free one)")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    host, port = str(server.server_address[0]), int(server.server_address[1])
    print(f"scripted model listening: base_url = http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
