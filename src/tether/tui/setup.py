"""The first-run screen: with no provider configured, the interactive `tether` asks for one.

Choose a provider, paste its API key (or, for a local server, its base URL), and it is stored as
`tether connect` stores it (`$TETHER_HOME/credentials`, mode 0600); the session then opens as if
the provider had been configured all along. Escape or Ctrl-C leaves without storing anything,
and the run exits 1 with the message a headless run gives. Bedrock needs AWS fields and is left
to `tether connect bedrock`.
"""

from __future__ import annotations

import os
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

SKIPPED = ("bedrock",)  # needs an access key, a secret and a region: `tether connect bedrock`


def providers() -> list[tuple[str, str, bool]]:
    """(prefix, what to paste, local) in the order tether tries providers."""
    from tether.providers.catalog import DEFAULT_ORDER, PRESETS

    rows = []
    for prefix in DEFAULT_ORDER:
        if prefix in SKIPPED:
            continue
        preset = PRESETS[prefix]
        if preset.local or preset.base_url is None:
            hint = f"base URL (default {preset.base_url})" if preset.base_url else "base URL"
        else:
            hint = f"API key ({preset.key_env})"
        rows.append((prefix, hint, preset.local or preset.base_url is None))
    return rows


class SetupApp(App[str | None]):
    """Returns the provider it stored, or None when the user left."""

    CSS = """
    Screen { padding: 1 2; }
    #title { text-style: bold; }
    #providers { height: auto; max-height: 18; margin: 1 0; }
    Input { margin: 0 0 1 0; }
    #error { color: $error; }
    """
    BINDINGS = [
        Binding("escape", "leave", "leave", priority=True),
        Binding("ctrl+c", "leave", "leave", priority=True),
    ]

    def __init__(self, home: Path) -> None:
        super().__init__()
        self.home = home
        self.rows = providers()
        self.chosen: tuple[str, str, bool] | None = None

    def compose(self) -> ComposeResult:
        yield Static("Welcome to tether: connect a model provider", id="title")
        yield Static("No provider is configured yet. Choose one (↑/↓, Enter); Escape leaves.",
                     id="intro")
        yield OptionList(*(Option(f"{p:<18} {hint}", id=p) for p, hint, _ in self.rows),
                         id="providers")
        yield Input(placeholder="API key", password=True, id="key", disabled=True)
        yield Input(placeholder="base URL (optional for hosted providers)", id="url", disabled=True)
        yield Static("", id="error")

    def on_mount(self) -> None:
        self.query_one("#providers", OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.chosen = next(r for r in self.rows if r[0] == event.option.id)
        prefix, _hint, local = self.chosen
        key, url = self.query_one("#key", Input), self.query_one("#url", Input)
        key.disabled = url.disabled = False
        key.placeholder = "API key (optional)" if local else f"API key for {prefix}"
        from tether.providers.catalog import PRESETS

        url.value = (PRESETS[prefix].base_url or "") if local else ""
        self.query_one("#intro", Static).update(
            f"{prefix}: paste the {'base URL' if local else 'API key'}, then Enter.")
        (url if local else key).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.chosen is None:
            return
        prefix, _hint, local = self.chosen
        key = self.query_one("#key", Input).value.strip() or None
        url = self.query_one("#url", Input).value.strip() or None
        if not local and key is None:
            if event.input.id == "key":
                self._error(f"{prefix} needs an API key")
            else:
                self.query_one("#key", Input).focus()
            return
        if local and url is None:
            self._error(f"{prefix} needs the server's base URL")
            return
        if url is not None and not url.startswith(("http://", "https://")):
            self._error(f"the base URL must start with http:// or https://, not {url!r}")
            return
        from tether.providers.catalog import PRESETS
        from tether.providers.credentials import save_credential

        if url == PRESETS[prefix].base_url and not local:
            url = None  # the preset's own URL: nothing to store
        try:
            save_credential(self.home, prefix, api_key=key, base_url=url, timeout=None)
        except Exception as exc:  # a full disk, an unwritable home: say it here, stay open
            self._error(f"could not store the credentials: {exc}")
            return
        self.exit(prefix)

    def _error(self, text: str) -> None:
        self.query_one("#error", Static).update(text)

    def action_leave(self) -> None:
        self.exit(None)


def run_setup(home: Path | None = None) -> str | None:
    """Show the screen; the provider stored, or None."""
    if home is None:
        from tether.runtime.session.session import tether_home

        home = tether_home(os.environ)
    return SetupApp(home).run()
