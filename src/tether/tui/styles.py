"""The app's stylesheet (Textual CSS): transcript blocks, prompt box, status line, dialogs."""

STYLESHEET = """
Screen { layout: vertical; }
#transcript { height: 1fr; padding: 0 1; scrollbar-size-vertical: 1; }
.user { margin: 1 0 0 0; color: $text; background: $boost; padding: 0 1; }
.assistant { margin: 1 0 0 0; padding: 0; }
.assistant > * { margin: 0; }
.reasoning { margin: 1 0 0 0; border: none; padding: 0; background: transparent; }
.reasoning-body { color: $text-muted; }
.tool { margin: 1 0 0 0; height: auto; }
.tool-args { padding-left: 2; }
.tool-more { border: none; padding: 0 0 0 4; background: transparent; }
.notice { margin: 1 0 0 0; }
.notice.error { color: $error; }
.notice.retry { color: $warning; }
.notice.interrupted { color: $warning; }
.notice.dim { color: $text-muted; }
#queue { height: auto; color: $text-muted; padding: 0 1; }
#prompt { height: auto; max-height: 10; min-height: 3; border: round $primary; }
#status { height: auto; padding: 0 1; background: $panel; }
ApprovalScreen, PickerScreen { align: center middle; }
#approval-box, #picker-box {
    width: 90%; max-width: 120; height: auto; max-height: 90%;
    border: thick $warning; background: $surface; padding: 1 2;
}
#picker-box { border: thick $primary; }
#approval-preview { height: auto; max-height: 20; margin: 1 0; background: $boost; }
#approval-options, #picker-list { height: auto; max-height: 12; }
"""
