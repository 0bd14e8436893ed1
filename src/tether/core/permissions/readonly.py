"""Shell commands that only inspect: the built-in auto-allow of the reference's step 6.

`inspect(argv, splits)` says whether a command line is read-only, and how the checker must treat
its words. Each command's options are read with its real grammar (`options.Grammar`: GNU
abbreviations, clustered and glued short options), so a flag that writes a file (`sort -o`,
`git log --output`), runs a program (`find -exec`, `rg --pre`, `sort --compress-program`) or
changes state (`date -s`, `hostname -F`) disqualifies the command in every spelling. Options that
make a command read a named file (`date -f F`, `grep -f F`, `wc --files0-from=F`) hand that file
to the checker like an operand. Words only known at run time (`None`) are accepted only by
commands none of whose options are dangerous (`WILD_SAFE`); an unquoted one (`splits`) may be any
number of words. What is admitted here runs kernel-confined (see `modes.Decision.confine`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.core.permissions.options import Grammar, Parsed


@dataclass(frozen=True, slots=True)
class ReadOnly:
    paths: bool = True  # its operands are files it reads (checked against roots and deny rules)
    recursive: bool = False  # it may read whole trees, or print files it does not name
    files: tuple[str, ...] = ()  # files named by its options (`date -f F`): checked like operands


_Judge = Callable[[Parsed, Sequence[str | None]], "ReadOnly | None"]

_PLAIN = ReadOnly()
_STRINGS = ReadOnly(paths=False)
_TREE = ReadOnly(recursive=True)

ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
NAME_TESTS = frozenset({"-v", "-R"})  # their operand is a variable name, subscript included
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBER = re.compile(r"^\s*[+-]?\d+\s*$")
_BINARY_TESTS = frozenset({"=", "==", "!=", "<", ">", "-a", "-o", "-nt", "-ot", "-ef", "=~"})


def is_plain_name(word: str | None) -> bool:
    return word is not None and _NAME.match(word) is not None


def test_problem(args: Sequence[str | None], splits: bool) -> str | None:
    """Why `test`/`[` with these words could evaluate data as code, or None. Bash evaluates the
    operands of `-eq` … as arithmetic and the operand of `-v` as a (subscripted) name; a word only
    known at run time is safe only where bash's by-position rules make it an operand."""
    words = list(args[:-1]) if args and args[-1] == "]" else list(args)
    for i, word in enumerate(words):
        if word in NAME_TESTS and i + 1 < len(words) and not is_plain_name(words[i + 1]):
            return "tests a variable whose name is not a plain word: bash evaluates its subscript"
        if word in ARITHMETIC_TESTS:
            for j in (i - 1, i + 1):
                if 0 <= j < len(words) and (words[j] is None or not _NUMBER.match(words[j] or "")):
                    return (f"compares with `{word}` a word that is not a literal number, which "
                            "bash evaluates as arithmetic (names and subscripts run code)")
    if None not in words:
        return None
    if splits:
        return "bash splits an unquoted expansion inside a test, which could turn data into operators"
    static = [w is not None for w in words]
    if len(words) == 1:
        return None
    if len(words) == 2 and static[0] and words[0] not in NAME_TESTS:
        return None
    if len(words) == 3 and static[1] and (words[1] in _BINARY_TESTS or words[1] in ARITHMETIC_TESTS):
        return None
    if len(words) == 3 and words[0] == "!" and static[1] and words[1] not in NAME_TESTS:
        return None
    return "uses a word only known at run time where the test builtin could read it as an operator"


def _test(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    return None if test_problem(args, False) else _PLAIN


def _simple(result: ReadOnly) -> _Judge:
    def judge(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
        # `--files0-from=F` reads the files F lists: ones no word names (`sort` prints them)
        recursive = result.recursive or "--files0-from" in parsed.options
        if parsed.files or recursive != result.recursive:
            return ReadOnly(result.paths, recursive, parsed.files)
        return result

    return judge


def _recursive_if(*flags: str) -> _Judge:
    def judge(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
        recursive = any(o in flags for o in parsed.options)
        return ReadOnly(True, recursive, parsed.files)

    return judge


def _grep(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    recursive = any(o in ("-r", "-R", "--recursive", "--dereference-recursive") for o in parsed.options)
    # `-d recurse` / `--directories=recurse` recurses too
    recursive = recursive or any(a is not None and "recurse" in a for a in args)
    return ReadOnly(True, recursive, parsed.files)


def _at_most_operands(count: int) -> _Judge:
    """`uniq IN OUT`, `xxd IN OUT`: a second operand is a file it writes."""

    def judge(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
        return ReadOnly(True, False, parsed.files) if len(parsed.operands) <= count else None

    return judge


def _date(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    # An operand other than +FORMAT sets the clock.
    if any(o is None or not o.startswith("+") for o in parsed.operands):
        return None
    return ReadOnly(False, False, parsed.files)


def _no_operands(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    return None if parsed.operands else _STRINGS


def _printf(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    # Only the first word can be `-v NAME` (assign, subscript evaluated): it must be known.
    return _STRINGS if args and args[0] is not None else None


def _find(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    banned = {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0",
              "-fprintf", "-fls"}
    if any(a in banned for a in args):
        return None
    files = tuple(args[i + 1] or "" for i, a in enumerate(args[:-1]) if a == "-files0-from")
    return ReadOnly(True, True, files)


def _xxd(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    # xxd compares prefixes: any word starting `-r` is `-revert` (it writes the binary).
    valued = {"-c", "-cols", "-g", "-groupsize", "-l", "-len", "-o", "-offset", "-s", "-seek",
              "-n", "-name", "-R"}
    operands = 0
    skip = False
    for word in args:
        if skip:
            skip = False
            continue
        if word is None:
            return None
        if word.startswith("-r") or word.startswith("--r"):
            return None
        if word in valued:
            skip = True
        elif not word.startswith("-") or word == "-":
            operands += 1
    return _PLAIN if operands <= 1 else None


def _jq(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    files: list[str] = []
    filter_seen = False
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("--arg", "--argjson"):
            i += 3
            continue
        if word in ("--slurpfile", "--rawfile"):
            if i + 2 < len(args) and args[i + 2] is not None:
                files.append(args[i + 2] or "")
            i += 3
            continue
        if word in ("-f", "--from-file", "-L") or (word or "").startswith(("-L", "--from-file=")):
            return None  # a filter from a file may `import` any JSON the module path reaches
        if word is not None and word.startswith("-"):
            i += 1
            continue
        if not filter_seen:
            filter_seen = True
            # `import "f" as $x;` / `include "f";` read files jq's module path can reach
            if word is not None and re.search(r"\b(?:import|include)\b", word):
                return None
        i += 1
    return ReadOnly(True, False, tuple(files))


_Entry = tuple[Grammar, _Judge]
_G = Grammar

COMMANDS: dict[str, _Entry] = {
    "cat": (_G("AbeEnstTuv", "show-all number-nonblank show-ends number squeeze-blank show-tabs "
                             "show-nonprinting help version"), _simple(_PLAIN)),
    "head": (_G("c:n:qvz", "bytes= lines= quiet silent verbose zero-terminated help version"),
             _simple(_PLAIN)),
    # `tail -f` never ends: a turn would hang on it
    "tail": (_G("c:n:qs:vzf!F!", "bytes= follow! lines= max-unchanged-stats= pid= quiet silent "
                                 "retry sleep-interval= verbose zero-terminated help version"),
             _simple(_PLAIN)),
    "ls": (_G("aAbBcCdDfFgGhHiI:klLmnNopqQrRsStT:uUvw:xXZ1",
              "all almost-all author escape block-size= ignore-backups color[=] directory dired "
              "classify[=] file-type format= full-time group-directories-first no-group "
              "human-readable si dereference-command-line dereference-command-line-symlink-to-dir "
              "hide= hyperlink[=] indicator-style= inode ignore= kibibytes dereference "
              "numeric-uid-gid literal hide-control-chars show-control-chars quote-name "
              "quoting-style= reverse recursive size sort= time= time-style= tabsize= width= "
              "context zero help version"), _recursive_if("-R", "--recursive")),
    "pwd": (_G("LP", "logical physical help version"), _simple(_STRINGS)),
    "echo": (_G("neE", ""), _simple(_STRINGS)),
    "printf": (_G("v!", "", permute=False), _printf),
    "wc": (_G("clLmw", "bytes chars lines files0-from=@ max-line-length words total= help "
                       "version"), _simple(_PLAIN)),
    "cut": (_G("b:c:d:f:nsz", "bytes= characters= delimiter= fields= complement only-delimited "
                              "output-delimiter= zero-terminated help version"), _simple(_PLAIN)),
    "tr": (_G("cCdst", "complement delete squeeze-repeats truncate-set1 help version"),
           _simple(_STRINGS)),
    "diff": (_G("aBbC:cdD:eEF:hiI:lnNpqrsS:tTuU:vwW:x:X@yZ",
                "normal brief report-identical-files context[=] unified[=] ed rcs side-by-side "
                "width= left-column suppress-common-lines show-c-function show-function-line= "
                "label= expand-tabs initial-tab tabsize= suppress-blank-empty paginate recursive "
                "no-dereference new-file unidirectional-new-file ignore-file-name-case "
                "no-ignore-file-name-case exclude= exclude-from=@ starting-file= from-file=@ "
                "to-file=@ ignore-case ignore-tab-expansion ignore-trailing-space "
                "ignore-space-change ignore-all-space ignore-blank-lines ignore-matching-lines= "
                "text strip-trailing-cr ifdef= old-line-format= new-line-format= "
                "unchanged-line-format= line-format= old-group-format= new-group-format= "
                "unchanged-group-format= changed-group-format= minimal horizon-lines= "
                "speed-large-files color[=] palette= help version"),
             _recursive_if("-r", "--recursive")),
    "cmp": (_G("bi:ln:sv", "print-bytes ignore-initial= verbose bytes= quiet silent help version"),
            _simple(_PLAIN)),
    "comm": (_G("123z", "check-order nocheck-order output-delimiter= total zero-terminated help "
                        "version"), _simple(_PLAIN)),
    # `file -C` compiles a magic file (writes *.mgc); `-p` resets the files' access times
    "file": (_G("bcC!de:Ef@F:hiklLm@nNp!P:rsSvzZ0",
                "help version magic-file=@ uncompress uncompress-noreport brief checking-printout "
                "exclude= exclude-quiet= files-from=@ separator= mime mime-type mime-encoding "
                "apple extension keep-going list dereference no-dereference no-buffer no-pad "
                "print0 preserve-date! parameter= raw special-files no-sandbox compile! debug"),
             _simple(_PLAIN)),
    "stat": (_G("Lfc:t", "dereference file-system format= printf= terse cached= help version"),
             _simple(_PLAIN)),
    "du": (_G("0abB:cd:DhHklLmPsSt:xX@",
              "null all apparent-size block-size= bytes total max-depth= dereference-args "
              "summarize files0-from=@ human-readable inodes dereference count-links "
              "no-dereference separate-dirs si threshold= time[=] time-style= exclude-from=@ "
              "exclude= one-file-system help version"), _simple(_TREE)),
    "df": (_G("aB:hHiklPt:Tx:", "all block-size= human-readable si inodes local no-sync output[=] "
                                "portability sync total type= print-type exclude-type= help "
                                "version"), _simple(_PLAIN)),
    "basename": (_G("as:z", "multiple suffix= zero help version"), _simple(_STRINGS)),
    "dirname": (_G("z", "zero help version"), _simple(_STRINGS)),
    "realpath": (_G("eLmPqsz", "canonicalize-existing canonicalize-missing logical physical quiet "
                               "relative-to= relative-base= strip no-symlinks zero help version"),
                 _simple(_PLAIN)),
    "readlink": (_G("efmnqsvz", "canonicalize canonicalize-existing canonicalize-missing "
                                "no-newline quiet silent verbose zero help version"),
                 _simple(_PLAIN)),
    "true": (_G(), _simple(_STRINGS)), "false": (_G(), _simple(_STRINGS)),
    "which": (_G("as"), _simple(_STRINGS)), "type": (_G("afptP"), _simple(_STRINGS)),
    "whoami": (_G(), _simple(_STRINGS)),
    "id": (_G("aZgGnruz", "context group groups name real user zero help version"),
           _simple(_STRINGS)),
    "uname": (_G("asnrvmpio", "all kernel-name nodename kernel-release kernel-version machine "
                              "processor hardware-platform operating-system help version"),
              _simple(_STRINGS)),
    "nl": (_G("b:d:f:h:i:l:n:ps:v:w:", "body-numbering= section-delimiter= footer-numbering= "
                                       "header-numbering= line-increment= join-blank-lines= "
                                       "number-format= no-renumber number-separator= "
                                       "starting-line-number= number-width= help version"),
           _simple(_PLAIN)),
    "od": (_G("A:bcdDefFhHiIj:lLN:oOsS:t:vw?xX", "address-radix= endian= skip-bytes= read-bytes= "
                                                "format= output-duplicates strings[=] traditional "
                                                "width[=] help version"), _simple(_PLAIN)),
    "hexdump": (_G("bcCde:f@n:os:vxL?X", "one-byte-octal one-byte-char canonical "
                                         "two-bytes-decimal format= format-file=@ length= "
                                         "two-bytes-octal skip= no-squeezing two-bytes-hex "
                                         "color[=] help version"), _simple(_PLAIN)),
    "column": (_G("c:C:dE:eH:i:Jl:LN:n:O:o:p:R:r:s:T:tW:x",
                  "table table-name= table-order= table-columns= table-columns-limit= "
                  "table-noextreme= table-noheadings table-header-repeat table-hide= table-right= "
                  "table-truncate= table-wrap= keep-empty-lines json tree= tree-id= tree-parent= "
                  "output-width= output-separator= separator= fillrows column= help version"),
               _simple(_PLAIN)),
    "cksum": (_G("a:cl:wz", "algorithm= base64 check length= raw tag untagged zero ignore-missing "
                            "quiet status strict warn debug help version"), _simple(_PLAIN)),
    "tac": (_G("brs:", "before regex separator= help version"), _simple(_PLAIN)),
    "rev": (_G("0", "zero help version"), _simple(_PLAIN)),
    "fold": (_G("bsw:", "bytes spaces width= help version"), _simple(_PLAIN)),
    "seq": (_G("f:s:w", "format= separator= equal-width help version"), _simple(_STRINGS)),
    "test": (_G(), _test), "[": (_G(), _test),
    "cd": (_G("LPe@"), _simple(_PLAIN)),
    "grep": (_G("A:B:C:D:EFGHIPTUVZabcd:e:f@hiLlm:noqRrsuvwxyz0123456789",
                "extended-regexp fixed-strings basic-regexp perl-regexp regexp= file=@ "
                "ignore-case no-ignore-case word-regexp line-regexp null-data no-messages "
                "invert-match version help max-count= byte-offset line-number no-line-number "
                "line-buffered with-filename no-filename label= only-matching quiet silent "
                "binary-files= text directories= devices= recursive dereference-recursive "
                "include= exclude= exclude-from=@ exclude-dir= files-without-match "
                "files-with-matches count initial-tab null before-context= after-context= "
                "context= color[=] colour[=] binary"), _grep),
    "jq": (_G(), _jq),
    "rg": (_G("A:B:C:d:E:e:f@g:j:M:m:r:T:t:aFHhiIlLnNoOpPqSsuUvVwxz0.",
              "regexp= file=@ glob= iglob= type= type-not= type-add= type-clear= max-count= "
              "max-columns= replace= after-context= before-context= context= threads= "
              "max-depth= maxdepth= max-filesize= encoding= engine= sort= sortr= color= colors= "
              "path-separator= context-separator= field-context-separator= "
              "field-match-separator= ignore-file=@ dfa-size-limit= regex-size-limit= "
              "hyperlink-format= pre! pre-glob! hostname-bin! generate= files type-list json "
              "count count-matches files-with-matches files-without-match hidden no-ignore "
              "follow search-zip passthru line-number no-heading heading"), _simple(_TREE)),
    "fd": (_G("c:d:E:e:j:o:S:t:x!X!aFgHhIiLlpsu0",
              "exec! exec-batch! extension= type= exclude= max-depth= min-depth= exact-depth= "
              "size= changed-within= changed-before= newer= older= owner= base-directory=@ "
              "path-separator= threads= max-results= ignore-file=@ color= search-path=@ "
              "format= batch-size= hidden no-ignore follow full-path absolute-path glob "
              "list-details"), _simple(_TREE)),
    # `tree -o F` writes F; `-R` re-runs tree writing 00Tree.html in every directory
    "tree": (_G("o!R!L:P:I:H:T:", "charset= filelimit= timefmt= sort= gitfile=@ hintro=@ "
                                  "houtro=@ output! fromfile"), _simple(_TREE)),
    "find": (_G(), _find),
    "sort": (_G("bcCdfgiMhnRrVk:mo!sS:t:T!uz",
                "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort "
                "ignore-nonprinting month-sort human-numeric-sort numeric-sort random-sort "
                "random-source=@ reverse sort= version-sort batch-size= check[=] "
                "compress-program! debug files0-from=@ key= merge output! stable buffer-size= "
                "field-separator= temporary-directory! parallel= unique zero-terminated help "
                "version"), _simple(_PLAIN)),
    "uniq": (_G("cdDf:is:uw:z", "count repeated all-repeated[=] skip-fields= group[=] ignore-case "
                                "skip-chars= unique zero-terminated check-chars= help version"),
             _at_most_operands(1)),
    "xxd": (_G(), _xxd),
    "base64": (_G("diw:o!", "decode ignore-garbage wrap= output! help version"), _simple(_PLAIN)),
    "date": (_G("d:f@I?r@Rs!u", "date= debug file=@ iso-8601[=] resolution rfc-email rfc-3339= "
                                "reference=@ set! universal utc help version"), _date),
    "hostname": (_G("aAdfiIsyb!F!", "alias all-fqdns domain fqdn long ip-address "
                                    "all-ip-addresses short yp nis boot! file! help version"),
                 _no_operands),
}
for _name in ("sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "md5sum", "b2sum"):
    COMMANDS[_name] = (_G("bcl:twz", "binary check tag text zero ignore-missing quiet status "
                                     "strict warn length= help version"), _simple(_PLAIN))
COMMANDS["egrep"] = COMMANDS["fgrep"] = COMMANDS["grep"]

def _command_lookup(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    # `command -v NAME` looks a name up (a `command` that runs something is peeled before this)
    return _STRINGS if list(args[:1]) in (["-v"], ["-V"]) else None


def _env_print(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    # `env` alone prints the environment (a wrapped command is peeled before this)
    return _STRINGS if all(a in ("-0", "--null") for a in args) else None


COMMANDS.update({
    "command": (_G(), _command_lookup), "env": (_G(), _env_print),
    "printenv": (_G("0", "null help version"), _simple(_STRINGS)),
    "nproc": (_G("", "all ignore= help version"), _simple(_STRINGS)),
    "arch": (_G(), _simple(_STRINGS)), "uptime": (_G("prsV"), _simple(_STRINGS)),
    "expr": (_G(), _simple(_STRINGS)),
    # binutils strings: `@FILE` reads more options from FILE
    "strings": (_G("adfn:ot:e:s:T:wU:", "all data print-file-name bytes= radix= encoding= "
                                        "output-separator= target= include-all-whitespace "
                                        "unicode= help version"),
                lambda parsed, args: None if any(a and a.startswith("@") for a in args)
                else ReadOnly(True, False, parsed.files)),
})

# Toolchains asked only for their version: nothing else in their argv is read-only.
_VERSION_ONLY = frozenset(
    {"python", "python3", "node", "rustc", "cargo", "go", "java", "ruby", "gcc", "cc", "make",
     "pip", "pip3", "uv", "deno", "bun", "npm", "perl"}
)


def _version(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    # Not `-v` for all (`python3 -v` reads a program from stdin), not `make version` (a target).
    return _STRINGS if list(args) in (["--version"], ["-V"]) else None


def _version_v(parsed: Parsed, args: Sequence[str | None]) -> ReadOnly | None:
    return _STRINGS if list(args) in (["--version"], ["-v"]) else None


for _name in _VERSION_ONLY:
    COMMANDS[_name] = (_G(), _version)
COMMANDS["go"] = (_G(), lambda parsed, args: _STRINGS if list(args) == ["version"] else None)
for _name in ("node", "npm", "yarn", "pnpm", "deno", "bun", "perl"):  # `-v` is their version
    COMMANDS[_name] = (_G(), _version_v)

# Commands none of whose options write, run a program or evaluate data: a word only known at
# run time may be any option of theirs and still only reads.
WILD_SAFE = frozenset(
    {"cat", "head", "ls", "pwd", "echo", "wc", "cut", "tr", "diff", "cmp", "comm", "stat", "du",
     "df", "basename", "dirname", "realpath", "readlink", "true", "false", "which", "type",
     "whoami", "id", "uname", "nl", "od", "hexdump", "column", "cksum", "tac", "rev", "fold",
     "seq", "grep", "egrep", "fgrep", "jq", "sha1sum", "sha224sum", "sha256sum", "sha384sum",
     "sha512sum", "md5sum", "b2sum"}
)
# …or whose dangerous forms need the unknown word in a place the judge checks.
_WILD_JUDGED = frozenset({"printf", "test", "["})


def inspect(argv: Sequence[str | None], splits: bool = False) -> ReadOnly | None:
    """How a read-only command treats its words, or None when it may write or run something."""
    if not argv or argv[0] is None:
        return None
    name = argv[0]
    if name == "git":
        from tether.core.permissions.readonly_git import inspect_git

        return inspect_git(argv[1:])
    if name == "gh":
        from tether.core.permissions.readonly_git import inspect_gh

        return inspect_gh(argv[1:])
    if name in ("sed", "awk", "mawk", "gawk", "nawk"):
        from tether.core.permissions.readonly_scripts import inspect_awk, inspect_sed

        return inspect_sed(argv[1:]) if name == "sed" else inspect_awk(argv[1:])
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    args = argv[1:]
    if None in args:
        if name in _WILD_JUDGED:
            if splits:
                return None
        elif name not in WILD_SAFE:
            return None
    grammar, judge = entry
    parsed = grammar.parse(args)
    if parsed.veto is not None:
        return None
    if splits and name in ("uniq", "xxd", "date", "hostname"):
        return None
    return judge(parsed, args)
