"""The replay screens' code and widget CSS, loaded while the user is still choosing.

Textual parses a widget class's ``DEFAULT_CSS`` when the first widget of that class is
mounted, and a new stylesheet source makes it rebuild its whole rules map: pushing the first
replay screen of an app spent ~40 ms of a ~90 ms frame parsing the CSS of the panes, the
timeline, the lists and Textual's own ``Log``, on top of importing the screens. The app does
that once, idle, after its first screen has painted; the push then only styles what it mounts.
"""

from __future__ import annotations

from textual.app import App
from textual.widget import Widget


def replay_widget_classes() -> tuple[type[Widget], ...]:
    """Every widget class the resume and session replay screens mount (a test holds this
    list to what they really mount)."""
    from textual.containers import Horizontal, Vertical, VerticalScroll
    from textual.widgets import Header, Log, Sparkline, Static
    from textual.widgets._header import HeaderClock, HeaderClockSpace, HeaderIcon, HeaderTitle

    from replayer.ui.widgets.comparison import ComparisonTable
    from replayer.ui.widgets.key_footer import KeyFooter
    from replayer.ui.widgets.progress_line import ProgressLine
    from replayer.ui.widgets.run_pane import FollowLog, RunPane
    from replayer.ui.widgets.session_pane import SessionPane
    from replayer.ui.widgets.sparkline import RunSparkline
    from replayer.ui.widgets.steady_scroll_bar import SteadyScrollBar
    from replayer.ui.widgets.timeline import Timeline
    from replayer.ui.widgets.turn_strip import TurnStrip

    import replayer.ui.screens.session  # noqa: F401  (the screens themselves, imported now too)

    return (Header, HeaderIcon, HeaderTitle, HeaderClock, HeaderClockSpace, Horizontal, Vertical,
            VerticalScroll, Static, Log, Sparkline, RunPane, SessionPane, Timeline, ProgressLine,
            RunSparkline, FollowLog, SteadyScrollBar, ComparisonTable, KeyFooter, TurnStrip)


def warm_replay_styles(app: App) -> None:
    """Add the replay widgets' default CSS to the app's stylesheet and parse it now, as
    mounting them would (same sources, same tie-breakers: ``DOMNode._get_default_css``)."""
    sheet = app.stylesheet
    for cls in replay_widget_classes():
        # the sources of a class depend on its bases only: an instance that was never
        # initialised is enough to ask for them (constructors want arguments)
        for read_from, css, tie_breaker, scope in cls._get_default_css(object.__new__(cls)):
            sheet.add_source(css, read_from=read_from, is_default_css=True, tie_breaker=tie_breaker, scope=scope)
    sheet.rules_map  # noqa: B018  (parses the new sources and rebuilds the map, once)
