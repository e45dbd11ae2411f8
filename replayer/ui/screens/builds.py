"""Builds: the catalog by generation, what is installed, and installing any build from inside.

An install runs ``manager.install`` (a release) or ``manager.install_source`` (a llama.cpp
folder, a git ref, or a release with a patch: the fix to demo) in a thread; its progress
callback feeds one bar over the stages (index, download, extract, configure, compile with the build's own ``[ x%]``, link)
and is also the cancel point: it raises when the user cancels, and the manager kills the
compiler's process group. The toolchain check for the chosen backend is shown before anything
starts, so a Vulkan build that cannot work never begins compiling.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Header, Input, Label, Log, Select, Static

from replayer.core.builds.catalog import GENERATIONS
from replayer.core.errors import ReplayerError
from replayer.ui.widgets.key_footer import KeyFooter
from replayer.ui.widgets.progress_line import ProgressLine

#: share of the whole install each stage takes (a cold CPU compile: most of it is compile)
STAGES = [("index", 0.02), ("download", 0.08), ("extract", 0.03), ("configure", 0.07), ("compile", 0.75),
          ("link", 0.05)]
BACKEND_CHOICES = ["cpu", "vulkan", "cuda", "rocm"]
#: the configure stage's bar after n output lines is 1 − DECAY**n: a bar that moves while cmake
#: works (it stood still at the stage's start for the whole configure), and never claims the end
CONFIGURE_LINE_DECAY = 0.98
SOURCES_SHOWN = 3  # source builds named under the catalog (the last by number); the rest are counted


def overall(stage: str, frac: float) -> float:
    """One fraction for the whole install from (stage, fraction of that stage)."""
    if stage in ("done", "cached"):
        return 1.0
    done = 0.0
    for name, share in STAGES:
        if name == stage:
            return done + share * max(0.0, min(1.0, frac))
        done += share
    return done


@dataclass
class InstallJob:
    """One install the screen runs: what it is called, its backend, its compile log, and the
    manager call that does it (given the progress callback, which is also the cancel point)."""

    label: str
    backend: str
    log: Path
    run: Callable[..., object]


def release_job(number: int, backend: str) -> InstallJob:
    from replayer.core.builds import manager

    return InstallJob(f"b{number}", backend, manager.log_path(number, backend),
                      lambda progress: manager.install(number, backend, progress))


def source_job(where: str, ref: str, patch: str, number: str, backend: str) -> InstallJob:
    """The fields of the source row as an install: a folder or a git URL (+ ref), or the build
    number of the release row with a patch. Raises ``ReplayerError`` with one line."""
    from replayer.core.builds import manager, source

    url = where if where and source.looks_like_url(where) else None
    spec = source.spec_from(tree=None if url else where or None, url=url, ref=ref or None,
                            release=[number] if not where else None, patches=[patch] if patch else None)
    return InstallJob(spec.describe(), backend, manager.source_log_path(spec, backend),
                      lambda progress: manager.install_source(spec, backend, progress))


class ConfirmInstall(ModalScreen[bool]):
    """Before a live run: the builds it needs are missing; install them now?"""

    BINDINGS = [Binding("escape", "no", "cancel")]
    DEFAULT_CSS = """
    ConfirmInstall { align: center middle; }
    ConfirmInstall > Vertical { width: 64; max-width: 95%; height: auto; border: round $warning;
                                background: $surface; padding: 1 2; }
    ConfirmInstall Horizontal { height: auto; margin-top: 1; }
    ConfirmInstall Button { margin-right: 2; }
    """

    def __init__(self, missing: list[int], backend: str) -> None:
        super().__init__()
        self.missing, self.backend = missing, backend

    def compose(self) -> ComposeResult:
        names = ", ".join(f"b{n}" for n in self.missing)
        with Vertical():
            yield Static(f"[b]{names}[/b] {'is' if len(self.missing) == 1 else 'are'} not installed for "
                         f"[b]{self.backend}[/b].\nA live replay starts real servers: install "
                         f"{'it' if len(self.missing) == 1 else 'them'} now (a few minutes per build)?")
            with Horizontal():
                yield Button("Install", variant="primary", id="yes")
                yield Button("Not now", id="no")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_no(self) -> None:
        self.dismiss(False)


class BuildsScreen(Screen):
    BINDINGS = [
        Binding("i", "install", "install"),
        Binding("s", "install_source", "build source"),
        Binding("c", "cancel_install", "cancel"),
        Binding("l", "toggle_log", "log"),
        Binding("escape", "back", "back"),
    ]
    DEFAULT_CSS = """
    BuildsScreen #builds-body { padding: 0 1; }
    BuildsScreen #catalog { height: auto; max-height: 12; }
    BuildsScreen #install-row, BuildsScreen #source-row { height: auto; margin-top: 1; }
    BuildsScreen #install-row Input { width: 16; }
    BuildsScreen #install-row Select { width: 18; }
    BuildsScreen #install-row Button, BuildsScreen #source-row Button { margin-left: 1; }
    BuildsScreen #source-where { width: 2fr; min-width: 12; }
    BuildsScreen #source-ref { width: 1fr; min-width: 9; max-width: 16; }
    BuildsScreen #source-patch { width: 2fr; min-width: 12; }
    BuildsScreen #install-row Button, BuildsScreen #source-row Button { min-width: 9; width: auto; }
    BuildsScreen #source-builds { height: auto; color: $text-muted; }
    BuildsScreen #toolchain { height: auto; color: $text-muted; }
    BuildsScreen #stage { height: 1; }
    BuildsScreen #build-log { height: 1fr; min-height: 4; display: none; border: round $panel; }
    BuildsScreen.-show-log #build-log { display: block; }
    """

    def __init__(self, install: list[tuple[int, str]] | None = None) -> None:
        super().__init__()
        self.queue = [release_job(n, backend) for n, backend in install or []]
        self.first = list(install or [])
        self.cancel_event = threading.Event()
        self.installing: InstallJob | None = None
        self.stage = ("", 0.0)
        self.log_read = 0
        self.last_install: InstallJob | None = None  # what `l` shows once it finished

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="builds-body"):
            yield Label("Generations of the prefill scheduler · ✓ = installed for that backend")
            yield DataTable(id="catalog", cursor_type="row", zebra_stripes=True)
            yield Static("", id="source-builds")
            with Horizontal(id="install-row"):
                yield Label("install build ")
                yield Input(placeholder="e.g. 9763", id="install-number", type="integer")
                yield Select([(b, b) for b in BACKEND_CHOICES], value="cpu", allow_blank=False, id="install-backend")
                yield Button("Install i", variant="primary", id="install")
                yield Button("Cancel c", id="cancel", disabled=True)
                yield Button("Log l", id="log")
            with Horizontal(id="source-row"):
                yield Label("or source ")
                yield Input(placeholder="llama.cpp folder or git URL", id="source-where")
                yield Input(placeholder="git ref", id="source-ref")
                yield Input(placeholder="patch (over build above)", id="source-patch")
                yield Button("Build s", id="install-source")
            yield Static("", id="toolchain")
            yield Static("", id="stage")
            yield ProgressLine(show_eta=True, id="install-progress")
            yield Log(id="build-log", max_lines=2000)
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "replayer — builds"
        t = self.query_one("#catalog", DataTable)
        for key, label in (("gen", "gen"), ("builds", "builds"), ("rep", "e.g."), ("installed", "installed"),
                           ("changed", "what changed")):
            t.add_column(label, key=key)
        self.fill_catalog()
        self.show_toolchain()
        t.focus()
        if self.first:
            n, backend = self.first[0]
            self.query_one("#install-number", Input).value = str(n)
            self.query_one("#install-backend", Select).value = backend
            self.start_next()

    # -- catalog ----------------------------------------------------------------------------
    def fill_catalog(self) -> None:
        from replayer.core.builds import manager

        installed = manager.installed_backends()
        t = self.query_one("#catalog", DataTable)
        t.clear()
        for gen in GENERATIONS:
            first, last = gen.first_build, gen.last_build
            rng = f"b{first}–b{last}" if last is not None else f"b{first}–"
            if first == 0:
                rng = f"≤ b{last}"
            inside = sorted(n for n in installed if first <= n and (last is None or n <= last))
            marks = " ".join(f"b{n} ✓ {','.join(installed[n])}" for n in inside) or "—"
            t.add_row(gen.value, rng, f"b{gen.representative_build}", marks, gen.label, key=gen.value)
        built = [f"{r.label} ✓ {r.backend} ({r.generation or 'live only'})" for r in manager.installed_sources()]
        more = f" · +{len(built) - SOURCES_SHOWN} more (replayer builds list)" if len(built) > SOURCES_SHOWN else ""
        self.query_one("#source-builds", Static).update(
            "from source: " + " · ".join(built[-SOURCES_SHOWN:]) + more if built else "")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        gen = next(g for g in GENERATIONS if g.value == str(event.row_key.value))
        field = self.query_one("#install-number", Input)
        field.value = str(gen.representative_build)
        # the Install button, not the number field: a field takes every letter, so `c`, `l`
        # and `i` stopped working (and Enter here installs, as in the field)
        self.query_one("#install", Button).focus()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "install-backend":
            self.show_toolchain()

    def show_toolchain(self) -> None:
        from replayer.core.builds import toolchain

        backend = str(self.query_one("#install-backend", Select).value)
        c = toolchain.check(backend)
        style = "green" if c.ok else "bold red"
        self.query_one("#toolchain", Static).update(Text(c.line(), style=style))

    # -- install ----------------------------------------------------------------------------
    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"install": self.action_install, "install-source": self.action_install_source,
         "cancel": self.action_cancel_install, "log": self.action_toggle_log}[str(event.button.id)]()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if str(event.input.id).startswith("source-"):
            self.action_install_source()
        else:
            self.action_install()

    def action_install(self) -> None:
        if self.installing is not None:
            self.notify("an install is running; cancel it first (c)", severity="warning")
            return
        text = self.query_one("#install-number", Input).value.strip()
        try:
            number = int(text.lstrip("bB"))
        except ValueError:
            self.notify("type a build number to install (e.g. 9763)", severity="error")
            return
        self.queue = [release_job(number, str(self.query_one("#install-backend", Select).value))]
        self.start_next()

    def action_install_source(self) -> None:
        """The source row: a folder, a git URL and ref, or the release row's build with a patch."""
        if self.installing is not None:
            self.notify("an install is running; cancel it first (c)", severity="warning")
            return
        field = {k: self.query_one(f"#{k}", Input).value.strip()
                 for k in ("source-where", "source-ref", "source-patch", "install-number")}
        try:
            job = source_job(field["source-where"], field["source-ref"], field["source-patch"],
                             field["install-number"], str(self.query_one("#install-backend", Select).value))
        except ReplayerError as exc:
            self.notify(str(exc), severity="error")
            return
        self.queue = [job]
        self.start_next()

    def start_next(self) -> None:
        if not self.queue:
            return
        self.installing = self.queue.pop(0)
        self.cancel_event.clear()
        self.log_read = 0
        self.query_one("#build-log", Log).clear()
        self.query_one("#install-progress", ProgressLine).reset()
        self.query_one("#cancel", Button).disabled = False
        self.query_one("#install", Button).disabled = True
        self.query_one("#install-source", Button).disabled = True
        self.last_install = self.installing
        if self.focused is None or isinstance(self.focused, (Input, Button)):
            self.query_one("#cancel", Button).focus()  # `c` or Enter cancels
        self.set_stage("starting", 0.0)
        self._install(self.installing)

    @work(thread=True, exit_on_error=False, group="install", exclusive=True)
    def _install(self, job: InstallJob) -> None:
        from replayer.core.builds import manager

        lines: dict[str, int] = {}

        def progress(stage: str, frac: float) -> None:
            if self.cancel_event.is_set():
                raise manager.InstallCancelled("install cancelled")
            lines[stage] = n = lines.get(stage, 0) + 1
            if stage == "configure":  # cmake prints no percentage: each line moves the bar, never to its end
                frac = max(frac, 1 - CONFIGURE_LINE_DECAY ** n)
            if (stage, round(frac, 2)) != self.stage:
                self.stage = (stage, round(frac, 2))
                self.app.call_from_thread(self.set_stage, stage, frac)

        name = f"{job.label} {job.backend}"
        try:
            rec = job.run(progress)
        except manager.InstallCancelled:
            self.app.call_from_thread(self.finished, f"{name}: cancelled (nothing kept)", "warning", True)
        except ReplayerError as exc:  # the manager's messages already name the build
            text = str(exc) if f"{job.label} " in str(exc) else f"{name}: {exc}"
            self.app.call_from_thread(self.finished, text, "error")
        except Exception as exc:  # shown, never a traceback
            self.app.call_from_thread(self.finished, f"{name}: {type(exc).__name__}: {exc}", "error")
        else:
            what = (f"{rec.label} {rec.backend} installed (rules: {rec.generation or 'no known generation: live only'})"
                    if rec.source == "source" else f"b{rec.build} {rec.backend} installed")
            self.app.call_from_thread(self.finished, f"{what}: {rec.binary}", "information")

    def set_stage(self, stage: str, frac: float) -> None:
        name = f"{self.installing.label} {self.installing.backend}" if self.installing else ""
        step = f"{stage} {frac * 100:.0f}%" if stage in ("download", "compile", "link") else stage
        self.query_one("#stage", Static).update(f"{name}: {step}")
        self.query_one("#install-progress", ProgressLine).update(int(overall(stage, frac) * 1000), 1000)
        self.tail_log()

    def tail_log(self) -> None:
        shown = self.installing or self.last_install
        if shown is None or not self.has_class("-show-log"):
            return
        try:
            with shown.log.open("rb") as fh:
                fh.seek(self.log_read)
                chunk = fh.read()
        except OSError:
            return
        cut = chunk.rfind(b"\n") + 1
        if cut:
            self.log_read += cut
            self.query_one("#build-log", Log).write_lines(chunk[:cut].decode(errors="replace").splitlines())

    def finished(self, message: str, severity: str, cancelled: bool = False) -> None:
        self.installing_done = message
        if cancelled:  # the manager removed what the install made: the bar starts from nothing again
            self.query_one("#install-progress", ProgressLine).reset()
        self.query_one("#stage", Static).update(message)
        self.tail_log()
        self.installing = None
        self.query_one("#cancel", Button).disabled = True
        self.query_one("#install", Button).disabled = False
        self.query_one("#install-source", Button).disabled = False
        if self.focused is self.query_one("#cancel", Button) or self.focused is None:
            self.query_one("#catalog", DataTable).focus()  # the disabled button lost it
        self.notify(message, severity=severity, timeout=10)  # type: ignore[arg-type]
        self.fill_catalog()
        if severity == "information":
            self.start_next()
        else:
            self.queue.clear()

    def action_cancel_install(self) -> None:
        if self.installing is not None:
            self.cancel_event.set()
            self.query_one("#stage", Static).update("cancelling…")

    def action_toggle_log(self) -> None:
        self.toggle_class("-show-log")
        if self.has_class("-show-log"):
            self.log_read = 0
            self.query_one("#build-log", Log).clear()
            self.tail_log()

    def action_back(self) -> None:
        if self.installing is not None:
            self.cancel_event.set()
        self.app.pop_screen()
