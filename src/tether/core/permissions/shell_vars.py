"""What the shell walk knows of a command's variables: values set by the run, names the command
assigns, attributes that make bash evaluate assigned values, and which run-time words are the
command's own doing.

`$TETHER_HOME` (and any variable the run passes in) reads as its value until the command
assigns it; `$PWD` is the directory the walk tracks; a loop over one glob binds its variable to
that glob. A word is *computed* when its run-time part comes from the command itself (a
substitution, arithmetic, a variable it assigned or looped over, a positional parameter) rather
than from the run's environment, which is the user's (`state_paths` asks only for those).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.core.permissions.evaluated import UNKNOWN_VALUE, assigned_problem, attributes_set
from tether.core.permissions.words import Glob, static

Argv = tuple[str | None, ...]


@dataclass
class Variables:
    known: dict[str, str] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)  # known names the command assigns
    attributed: dict[str, str] = field(default_factory=dict)  # `declare -i n`: n -> "i"
    cdpath: bool = False  # the command sets CDPATH: a relative `cd` may go anywhere

    def values(self, cwd: Path | None) -> dict[str, str]:
        """The variables whose values are known here: the run's, less those the command assigned,
        and `$PWD` while the directory is tracked."""
        out = {k: v for k, v in self.known.items() if k not in self.forgotten}
        if cwd is not None and "PWD" not in self.forgotten:
            out["PWD"] = str(cwd)
        return out

    def for_child_shell(self) -> Variables:
        """What `bash -c` started by the command knows: the same, less `$PWD` (its own)."""
        known = {k: v for k, v in self.known.items() if k not in self.forgotten}
        return Variables(known, set(self.forgotten), {}, self.cdpath)

    def forget(self, name: str | None) -> None:
        """The command assigns `name` (None: a name known only at run time)."""
        if name is None:
            self.forgotten.update((*self.known, "PWD"))
            self.cdpath = True
            return
        name = name.split("=", 1)[0].split("[", 1)[0].split("+", 1)[0]
        self.forgotten.add(name)
        self.cdpath = self.cdpath or name == "CDPATH"

    def bind_loop(self, node: Any, name: str, home: Path, cwd: Path | None) -> None:
        """`for f in *.py`: one glob as the only value, so `$f` is one of its matches."""
        values = [c for i, c in enumerate(node.children) if node.field_name_for_child(i) == "value"]
        value = static(values[0], home, self.values(cwd)) if len(values) == 1 else None
        if not isinstance(value, Glob) or (cwd is None and not value.startswith("/")):
            return
        if cwd is not None and not value.startswith("/"):
            # matched where the loop starts, whatever `cd` follows
            value = Glob(os.path.join(cwd, value), os.path.join(glob.escape(str(cwd)), value.pattern))
        self.forgotten.discard(name)
        self.known[name] = value

    def note_attributes(self, argv: Argv) -> None:
        for name, flags in attributes_set(argv).items():
            self.attributed[name] = self.attributed.get(name, "") + flags

    def assigned_problem(self, node: Any, home: Path, cwd: Path | None) -> str | None:
        """`declare -i n; n=$x`: a value given to an integer or nameref variable is evaluated."""
        name = node.child_by_field_name("name")
        attributes = self.attributed.get(name.text.decode(), "") if name is not None else ""
        if not attributes:
            return None
        value = node.child_by_field_name("value")
        known = static(value, home, self.values(cwd)) if value is not None else ""
        return assigned_problem(name.text.decode(), UNKNOWN_VALUE if known is None else known,
                                attributes)

    def computed(self, node: Any) -> bool:
        """Whether a word's run-time part is the command's own doing (see the module docstring)."""
        stack = [node]
        while stack:
            current = stack.pop()
            kind = current.type
            if kind in ("command_substitution", "process_substitution", "arithmetic_expansion"):
                return True
            if kind in ("simple_expansion", "expansion"):
                for child in current.named_children:
                    text = child.text.decode()
                    if child.type == "special_variable_name" or (
                            child.type == "variable_name" and (
                                text in self.forgotten or text.isdigit())):
                        return True
            stack.extend(current.children)
        return False
