"""Exact layout from a running llama-server: ``/apply-template`` then ``/tokenize``.

The server renders with its own template and tokenizer, so the only thing replayer adds is
the delimiter list (from the template text the server reports in ``/props``) and the scan.
Every reply is checked against ``server_protocol``'s models: a server that answers something
else is one clear error, not a ``KeyError``.
"""

from __future__ import annotations

from typing import Any

import httpx

from replayer.core.server_protocol import AppliedTemplate, Props, Tokens, checked
from replayer.core.errors import ReplayerError
from replayer.core.prompt.templates import Template


class ServerTokenizer:
    def __init__(self, url: str, client: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        self.name = f"server:{self.url}"
        self._client = client or httpx.Client(timeout=120)
        self._props: Props | None = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            return self._client.request(method, self.url + path, json=body)
        except httpx.HTTPError as exc:
            raise ReplayerError(f"cannot reach llama-server at {self.url}: {exc}") from None

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        r = self._call("POST", "/tokenize", {"content": text, "add_special": add_special, "parse_special": True})
        return checked(r, Tokens, "/tokenize").ids()

    def apply_template(self, messages: list[dict], tools: list[dict] | None) -> str:
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        return checked(self._call("POST", "/apply-template", body), AppliedTemplate, "/apply-template").prompt

    def props(self) -> Props:
        """``GET /props`` once per tokenizer: the chat template and the real context size."""
        if self._props is None:
            self._props = checked(self._call("GET", "/props"), Props, "/props")
        return self._props

    def n_ctx(self) -> int | None:
        return self.props().default_generation_settings.n_ctx or None

    def template(self) -> Template:
        props = self.props()
        return Template(name=f"server:{self.url}", source=props.chat_template,
                        bos_token=props.bos_token or "", eos_token=props.eos_token or "")
