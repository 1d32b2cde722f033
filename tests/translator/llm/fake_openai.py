"""A small OpenAI-compatible server on loopback that replays recorded answers and logs every request.

`recordings/*.json` hold `{"responses": [...]}`; each response is either an answer
(`{"content": ..., "finish_reason": "stop"}`) or a failure (`{"status": 429, "headers": {...},
"error": "..."}`), optionally with `"delay": seconds` before the server answers (to provoke client
timeouts). The Nth request gets the Nth response; a request past the end gets HTTP 500, so a test that
asks more than expected fails loudly.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).parent / "recordings"


@dataclass
class LoggedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def last_user(self) -> str:
        return next(m["content"] for m in reversed(self.body["messages"]) if m["role"] == "user")


@dataclass
class FakeOpenAI:
    responses: list[dict[str, Any]] = field(default_factory=list)
    requests: list[LoggedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    base_url: str = ""

    def load(self, name: str) -> FakeOpenAI:
        data = json.loads((RECORDINGS / f"{name}.json").read_text(encoding="utf-8"))
        self.responses = list(data["responses"])
        return self

    def next_response(self, req: LoggedRequest) -> dict[str, Any]:
        with self.lock:
            self.requests.append(req)
            i = len(self.requests) - 1
            if i < len(self.responses):
                return self.responses[i]
            return {"status": 500, "error": f"fake server: no recorded answer for request {i + 1}"}


def handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            req = LoggedRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            resp = fake.next_response(req)
            time.sleep(resp.get("delay", 0))
            status = resp.get("status", 200)
            if status == 200 and self.path.endswith("/chat/completions"):
                payload = {
                    "id": f"chatcmpl-{len(fake.requests)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "?"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": resp["content"]},
                            "finish_reason": resp.get("finish_reason", "stop"),
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            else:
                status = status if status != 200 else 404
                payload = {"error": {"message": resp.get("error", "not found"), "type": "fake"}}
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in resp.get("headers", {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to answer

    return Handler
