"""Command-line options read the way GNU getopt reads them, so a vetoed option has no spelling
that slips past: `--outp=F` is `--output=F`, `-Fx` is `-F x`, `-xF` is `-x -F`.

A `Grammar` lists a command's options: which take a value, which take a file the command reads,
and which are vetoed (they write, run a program, or change the system). `parse(args)` returns
the vetoed option (if any spelling of one appears), the file values, and the operands. A long
option abbreviated to a prefix of a vetoed one is vetoed even when GNU would call it ambiguous:
when unsure, the veto wins. An option the grammar does not know takes no value, so the word after
it is still checked as an operand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Parsed:
    veto: str | None = None  # the vetoed option, as spelled
    files: tuple[str, ...] = ()  # values of options that name a file the command reads
    operands: tuple[str | None, ...] = ()
    options: tuple[str, ...] = ()  # canonical names seen (`-l`, `--lines`), for the judges


@dataclass(frozen=True, slots=True)
class Grammar:
    """`shorts`: getopt letters, each followed by `:` (takes a value), `@` (a file it reads),
    `?` (a value only when glued) or `!` (vetoed); `longs`: names, each ending in `=` (value), `=@` (file), `[=]` (optional value,
    only with `=`), or `!` (vetoed); plain names are flags."""

    shorts: str = ""
    longs: str = ""
    permute: bool = True  # GNU: options may follow operands (`+` getopt strings stop instead)
    short_value: dict[str, str] = field(default_factory=dict, init=False)
    long_value: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        i = 0
        while i < len(self.shorts):
            letter, kind = self.shorts[i], "flag"
            if i + 1 < len(self.shorts) and self.shorts[i + 1] in ":@!?":
                kind = {":": "value", "@": "file", "!": "veto", "?": "optional"}[self.shorts[i + 1]]
                i += 1
            self.short_value["-" + letter] = kind
            i += 1
        for token in self.longs.split():
            for suffix, kind in (("=@", "file"), ("[=]", "optional"), ("=", "value"), ("!", "veto")):
                if token.endswith(suffix):
                    self.long_value["--" + token[: -len(suffix)]] = kind
                    break
            else:
                self.long_value["--" + token] = "flag"

    def parse(self, args: Sequence[str | None]) -> Parsed:
        files: list[str] = []
        operands: list[str | None] = []
        seen: list[str] = []
        i = 0
        while i < len(args):
            word = args[i]
            i += 1
            if word is None or word == "-" or not word.startswith("-"):
                operands.append(word)
                if not self.permute:
                    operands.extend(args[i:])
                    break
                continue
            if word == "--":
                operands.extend(args[i:])
                break
            if word.startswith("--"):
                name, eq, value = word.partition("=")
                canonical, kind = self._long(name)
                if kind == "veto":
                    return Parsed(veto=word)
                seen.append(canonical)
                if kind in ("value", "file") and not eq:
                    value = args[i] if i < len(args) else None  # type: ignore[assignment]
                    i += 1
                    if value is None:
                        operands.append(None)  # a value only known at run time: keep it checked
                        continue
                if kind == "file" or (kind == "ambiguous-file" and eq):
                    files.append(value)
                continue
            for k in range(1, len(word)):
                letter = "-" + word[k]
                kind = self.short_value.get(letter, "flag")
                if kind == "veto":
                    return Parsed(veto=word)
                seen.append(letter)
                if kind == "optional":
                    break  # `-w8`: the rest of the word is its value, never the next word
                if kind in ("value", "file"):
                    value = word[k + 1 :]
                    if not value:
                        if i >= len(args) or args[i] is None:
                            operands.append(None)
                            i += 1
                            break
                        value = args[i]  # type: ignore[assignment]
                        i += 1
                    if kind == "file":
                        files.append(value)
                    break
        return Parsed(None, tuple(files), tuple(operands), tuple(seen))

    def _long(self, name: str) -> tuple[str, str]:
        exact = self.long_value.get(name)
        if exact is not None:
            return name, exact
        candidates = [n for n in self.long_value if n.startswith(name)] if len(name) > 2 else []
        vetoed = [n for n in candidates if self.long_value[n] == "veto"]
        if vetoed:
            return vetoed[0], "veto"
        if len(candidates) == 1:
            return candidates[0], self.long_value[candidates[0]]
        if any(self.long_value[n] == "file" for n in candidates):
            return name, "ambiguous-file"
        return name, "flag"
