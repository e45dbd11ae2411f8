"""Exact layout from a running llama-server: ``/apply-template`` then ``/tokenize``.

The server renders with its own template and tokenizer, so the only thing replayer adds is
the delimiter list (from the template text the server reports in ``/props``) and the scan.
"""

from __future__ import annotations

from typing import Any

import httpx

from replayer.core.builds.catalog import Build
from replayer.core.errors import ReplayerError
from replayer.core.prompt import templates
from replayer.core.prompt.templates import Template


class ServerTokenizer:
    def __init__(self, url: str, client: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        self.name = f"server:{self.url}"
        self._client = client or httpx.Client(timeout=120)
        self._props: dict[str, Any] | None = None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self._client.post(self.url + path, json=body)
        except httpx.HTTPError as exc:
            raise ReplayerError(f"cannot reach llama-server at {self.url}: {exc}") from None
        if r.status_code != 200:
            raise ReplayerError(f"llama-server {path} answered HTTP {r.status_code}: {r.text[:200]}")
        return r.json()

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        data = self._post("/tokenize", {"content": text, "add_special": add_special, "parse_special": True})
        return [t if isinstance(t, int) else t["id"] for t in data.get("tokens", [])]

    def apply_template(self, messages: list[dict], tools: list[dict] | None) -> str:
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        return self._post("/apply-template", body)["prompt"]

    def props(self) -> dict[str, Any]:
        """``GET /props`` once per tokenizer: the chat template and the real context size."""
        if self._props is None:
            try:
                self._props = self._client.get(self.url + "/props").json()
            except (httpx.HTTPError, ValueError) as exc:
                raise ReplayerError(f"cannot read /props of {self.url}: {exc}") from None
        return self._props

    def n_ctx(self) -> int | None:
        try:
            return int(self.props()["default_generation_settings"]["n_ctx"])
        except (KeyError, TypeError, ValueError):
            return None

    def template(self) -> Template:
        props = self.props()
        return Template(name=f"server:{self.url}", source=props.get("chat_template", ""),
                        bos_token=props.get("bos_token", ""), eos_token=props.get("eos_token", ""))


def server_layout(url: str, messages: list[dict], tools: list[dict] | None, build: Build,
                  template: Template | None = None, keep_text: bool = False):
    from replayer.core.prompt.layout import layout_of_text

    st = ServerTokenizer(url)
    text = st.apply_template(messages, tools)
    tpl = template or st.template()
    lay = layout_of_text(text, templates.delimiters_for(tpl, build), st, tpl.name, build)
    if keep_text:
        lay.text = text
    return lay
