"""What the agent and the chat see of each other: the `MessageChannel` tool the agent replies
with, an inbound message as the agent's user turn, and a tool call as an approval question
names it in the chat."""

from __future__ import annotations

from typing import Any

from tether.channels.plugins import InboundMessage

MESSAGE_CHANNEL = {
    "name": "MessageChannel",
    "description": (
        "Send a message to a chat on a messaging channel (Telegram, Slack, webhook, ...). This "
        "is the only way to reply to a channel message: text you write outside this tool is "
        "not delivered. Use the channel and chat_id of the message you answer."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "channel": {"type": "string", "description": "channel id, e.g. telegram"},
            "chat_id": {"type": "string", "description": "the chat to send to"},
            "text": {"type": "string", "description": "the message"},
            "account": {"type": "string", "description": "channel account (default: default)"},
            "thread_id": {"type": "string", "description": "thread to reply in, if any"},
            "reply_to_message_id": {"type": "string"},
        },
        "required": ["channel", "chat_id", "text"],
    },
}


def agent_text(msg: InboundMessage) -> str:
    """The user turn the agent sees: who wrote from where, and how to answer."""
    who = f"{msg.sender_name} ({msg.sender_id})" if msg.sender_name else msg.sender_id
    thread = f' thread_id="{msg.thread_id}"' if msg.thread_id else ""
    return (
        f'<channel_message channel="{msg.channel}" account="{msg.account_id}" '
        f'chat_id="{msg.chat_id}"{thread} message_id="{msg.message_id}" from="{who}">\n'
        f"{msg.text}\n</channel_message>\n"
        f'Reply with the MessageChannel tool (channel="{msg.channel}", chat_id="{msg.chat_id}"'
        f"{', thread_id=' + repr(msg.thread_id) if msg.thread_id else ''}); "
        "text outside it is not delivered."
    )


def describe_call(tool: Any, args: Any) -> str:
    if isinstance(args, dict) and isinstance(args.get("command"), str):
        return f"{tool}: {args['command'][:300]}"
    if isinstance(args, dict) and isinstance(args.get("file_path"), str):
        return f"{tool} on {args['file_path']}"
    return str(tool)
