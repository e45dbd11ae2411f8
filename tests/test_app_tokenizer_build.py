"""The app builds a GGUF vocabulary seen for the first time off the UI thread and shows its
stages on the setup screen; the replay starts once it is built (and cached)."""

from __future__ import annotations

from textual.widgets import Static

from replayer.core.prompt import gguf_tokenizer
from replayer.core.replay import ReplayConfig
from replayer.core.tiny_models import make_tiny
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.replay import ReplayScreen
from replayer.ui.screens.setup import SetupScreen

from conftest import FIXTURES
from helpers import wait_for


async def test_first_build_shows_its_stages_then_replays(tmp_path, monkeypatch):
    gguf = make_tiny("llama", tmp_path / "first-use.gguf")
    monkeypatch.setenv("REPLAYER_TOKENIZER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(SetupScreen, "read_config", lambda self: ReplayConfig(model=str(gguf)))
    assert ReplayConfig(model=str(gguf)).tokenizer_eff == f"gguf:{gguf}"
    assert gguf_tokenizer.needs_build(str(gguf))
    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        status = app.screen.query_one("#setup-error", Static)
        shown: list[str] = []
        update = status.update
        monkeypatch.setattr(status, "update", lambda text="": (shown.append(str(text)), update(text))[1])
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen))
    assert shown[0] == "[b]first use of this vocabulary: building its tokenizer…[/]"
    assert any("building the merges" in s and "(1/4)" in s for s in shown)
    assert any("(4/4)" in s for s in shown)
    assert not gguf_tokenizer.needs_build(str(gguf))
    assert list((tmp_path / "cache").glob("*.json"))
