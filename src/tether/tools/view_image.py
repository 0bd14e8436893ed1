"""The ViewImage tool (`view_image` in codex_snake): look at a local image file.

The file is opened like Read opens files (regular files only, the `ReadBoundary` applied), must
be a PNG, JPEG, GIF or WebP under 5 MiB, and is described by type, size and dimensions.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.protocol.messages import ImagePart
from tether.tools.arguments import paths_from, require_path_text, resolve_path
from tether.tools.boundary import boundary_for
from tether.tools.confined import open_regular, read_fd
from tether.tools.output import error_result

MAX_IMAGE_BYTES = 5 * 1024 * 1024

DESCRIPTION = "Shows you a local image file (PNG, JPEG, GIF, WebP) by path: the image itself and what it is."

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "Image file path"}},
    "required": ["path"],
    "additionalProperties": False,
}


def image_kind(data: bytes) -> tuple[str, int | None, int | None]:
    """(mime type, width, height) from the header, or a ToolFailure for non-images."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp", None, None
    if data.startswith(b"\xff\xd8"):
        index = 2
        while index + 9 < len(data):
            if data[index] != 0xFF:
                break
            marker = data[index + 1]
            length = struct.unpack(">H", data[index + 2 : index + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):
                height, width = struct.unpack(">HH", data[index + 5 : index + 9])
                return "image/jpeg", width, height
            index += 2 + length
        return "image/jpeg", None, None
    raise ToolFailure("The file is not a PNG, JPEG, GIF or WebP image.")


def load_image(path: Path, ctx: ToolRunContext, tool: str) -> tuple[str, bytes]:
    try:
        fd = open_regular(path, tool=tool, boundary=boundary_for(ctx))
    except FileNotFoundError:
        raise ToolFailure(f"File does not exist: {path}") from None
    except IsADirectoryError:
        raise ToolFailure(f"{path} is a directory, not an image file.") from None
    try:
        data = read_fd(fd, MAX_IMAGE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_IMAGE_BYTES:
        raise ToolFailure(f"{path} is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB.")
    mime, width, height = image_kind(data)
    size = f", {width}x{height}" if width and height else ""
    return f"{path}: {mime}{size}, {len(data):,} bytes", data


class ViewImageTool:
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.READ

    def __init__(self, name: str = "ViewImage") -> None:
        self.name = name

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "path", cwd, default_cwd=False)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            path = resolve_path(require_path_text(args, "path"), ctx.cwd)
            summary, data = await asyncio.to_thread(load_image, path, ctx, self.name)
        except ToolFailure as exc:
            return error_result(str(exc))
        mime = image_kind(data)[0]
        return ToolResult(summary, images=(ImagePart(base64.b64encode(data).decode(), mime),))
