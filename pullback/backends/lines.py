"""Fit the generated module to a line length, as a person formats code (the project's own ruff settings).

Statements are built as libcst nodes and rendered one per line (``render``), at whatever length
their names and operands make. This pass breaks the lines longer than ``WIDTH`` the way a
formatter would, on the rendered module's tokens (our own code: identifiers, numbers, our own
messages; never a user's string):

- a comment quoting the user's line is shortened, ending in ``...``;
- ``del a, b, c`` becomes several ``del`` statements;
- a bracketed operand list (a call's arguments, a tuple) is split after its opening bracket, its
  items filled onto lines one indent deeper, the closing bracket on a line of its own; an item
  still too long is split the same way; a bare tuple (``a, b = c, d``) is bracketed first;
- adjacent string literals (an error message and the user's ``file:line``) may go on lines of
  their own.

It also reports which modules the code reads, so that an import nothing uses is left out.
"""

from __future__ import annotations

import bisect
import functools
import io
import re
import tokenize

WIDTH = 120
INDENT = "    "
_OPEN, _CLOSE = "([{", ")]}"
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12 tokenizes f-strings in parts
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


class _Unsplittable(Exception):
    """The line's tokens are not a statement this pass knows how to break."""


def _units(text: str) -> list[tuple[int, str, int, int]]:
    """(token type, string, start, end) of a one-line statement, an f-string as one STRING unit."""
    out: list[tuple[int, str, int, int]] = []
    depth_f, start = 0, 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                continue
            if tok.start[0] != 1 or tok.end[0] != 1:
                raise _Unsplittable
            if _FSTRING_START is not None and tok.type == _FSTRING_START:
                if depth_f == 0:
                    start = tok.start[1]
                depth_f += 1
                continue
            if depth_f:
                if tok.type == _FSTRING_END:
                    depth_f -= 1
                    if depth_f == 0:
                        out.append((tokenize.STRING, text[start:tok.end[1]], start, tok.end[1]))
                continue
            if tok.type == tokenize.COMMENT:
                raise _Unsplittable
            out.append((tok.type, tok.string, tok.start[1], tok.end[1]))
    except (tokenize.TokenError, SyntaxError, IndentationError) as exc:
        raise _Unsplittable from exc
    return out


def _matching(units) -> dict[int, int]:
    """Index of each opening bracket -> index of its closing one."""
    stack, match = [], {}
    for i, (kind, string, _, _) in enumerate(units):
        if kind == tokenize.OP and string in _OPEN:
            stack.append(i)
        elif kind == tokenize.OP and string in _CLOSE:
            if not stack:
                raise _Unsplittable
            match[stack.pop()] = i
    if stack:
        raise _Unsplittable
    return match


def _items(text: str, units, lo: int, hi: int, match: dict[int, int]) -> list[str]:
    """The text of units[lo:hi] split after each comma at their own depth (a comma ends its item), and
    between adjacent string literals."""
    items, first, i = [], lo, lo
    while i < hi:
        kind, string = units[i][0], units[i][1]
        if i in match:
            i = match[i] + 1
            continue
        if kind == tokenize.OP and string == ",":
            items.append(text[units[first][2]:units[i][3]])
            first = i + 1
        elif kind == tokenize.STRING and i + 1 < hi and units[i + 1][0] == tokenize.STRING:
            items.append(text[units[first][2]:units[i][3]])
            first = i + 1
        i += 1
    if first < hi:
        items.append(text[units[first][2]:units[hi - 1][3]])
    return items


def _fill(items: list[str], indent: str, width: int) -> list[str]:
    """The items on lines at ``indent``, as many to a line as fit; an item too long alone is split itself."""
    lines: list[str] = []
    current = ""
    for item in items:
        if current and not current.endswith(","):  # adjacent string literals: each on a line of its own
            lines.append(indent + current)
            current = ""
        candidate = item if not current else current + " " + item
        if len(indent) + len(candidate) <= width:
            current = candidate
            continue
        if current:
            lines.append(indent + current)
        if len(indent) + len(item) <= width:
            current = item
        else:
            lines.extend(_split(item, indent, width))
            current = ""
    if current:
        lines.append(indent + current)
    return lines


def _split(text: str, indent: str, width: int) -> list[str]:
    """``text`` (one statement or expression, without its indent) on lines of at most ``width``, where its
    brackets allow; as it is where they do not."""
    try:
        units = _units(text)
        match = _matching(units)
    except _Unsplittable:
        return [indent + text]
    if not units:
        return [indent + text]
    if units[0][0] == tokenize.STRING and (len(units) == 1 or (len(units) == 2 and units[1][1] == ",")):
        return _split_literal(text, indent, width)
    depth0 = [i for i in range(len(units)) if not any(o < i <= c for o, c in match.items())]
    if units[0][1] == "del" and units[0][0] == tokenize.NAME:  # del a, b, c: several statements
        names = [n.strip() for n in _items(text, units, 1, len(units), match)]
        names = [n[:-1] if n.endswith(",") else n for n in names]
        lines, current = [], []
        for n in names:
            if current and len(indent) + len("del " + ", ".join([*current, n])) > width:
                lines.append(indent + "del " + ", ".join(current))
                current = []
            current.append(n)
        lines.append(indent + "del " + ", ".join(current))
        return lines
    # the last bracket opened at the outermost level and closed at the end: a call's arguments, a tuple
    closers = [i for i in depth0 if units[i][0] == tokenize.OP and units[i][1] in _OPEN]
    bare_comma = any(units[i][1] == "," and units[i][0] == tokenize.OP for i in depth0)
    eq = [i for i in depth0 if units[i][0] == tokenize.OP and units[i][1] == "="]
    if bare_comma and eq:  # a, b = c, d: bracket the sides that have the commas and do not fit
        last_eq = eq[-1]
        target, value = text[:units[last_eq][2]].rstrip(), text[units[last_eq][3]:].strip()
        inner = INDENT + indent
        lines = [indent + target + " = "]
        tu = _units(target)
        if len(lines[0]) + 1 > width and any(u[1] == "," for u in tu):
            lines = [indent + "(", *_fill(_items(target, tu, 0, len(tu), _matching(tu)), inner, width),
                     indent + ") = "]
        vu = _units(value)
        if any(units[i][1] == "," for i in depth0 if i > last_eq):
            return [*lines[:-1], lines[-1] + "(", *_fill(_items(value, vu, 0, len(vu), _matching(vu)), inner, width),
                    indent + ")"]
        if len(lines) > 1:
            rest = _split(value, indent, width)
            return [*lines[:-1], lines[-1] + rest[0].lstrip(), *rest[1:]]
    if bare_comma and not eq and units[0][1] == "return":  # return a, b
        value = text[units[0][3]:].strip()
        vu = _units(value)
        return [indent + "return (", *_fill(_items(value, vu, 0, len(vu), _matching(vu)), INDENT + indent, width),
                indent + ")"]
    for o in reversed(closers):
        c = match[o]
        if c == o + 1:  # an empty pair, ``.copy()``: the one before
            continue
        head, tail = text[:units[o][3]], text[units[c][2]:]
        items = _items(text, units, o + 1, c, match)
        return [indent + head, *_fill(items, INDENT + indent, width), indent + tail]
    return [indent + text]


def _split_literal(text: str, indent: str, width: int) -> list[str]:
    """A string literal of ours (``"..."`` or ``f"..."``, maybe a trailing comma) as adjacent literals
    broken after spaces outside replacement fields, each line within ``width`` where the words allow."""
    prefix = "f" if text.startswith("f") else ""
    quote = text[len(prefix)]
    if text[len(prefix) + 1:len(prefix) + 3] == quote * 2 or not text.rstrip(",").endswith(quote):
        return [indent + text]  # a triple-quoted string, or a prefix we do not print
    comma = "," if text.endswith(",") else ""
    body = text[len(prefix) + 1:len(text) - len(comma) - 1]
    room = width - len(indent) - len(prefix) - 2 - len(comma)
    breaks, depth, i = [], 0, 0  # positions just after a space outside ``{...}``
    while i < len(body):
        c = body[i]
        if c == "\\":
            i += 2
            continue
        if prefix and c in "{}" and body[i + 1:i + 2] == c and depth == 0:
            i += 2
            continue
        if prefix and c == "{":
            depth += 1
        elif prefix and c == "}":
            depth -= 1
        elif c == " " and depth == 0:
            breaks.append(i + 1)
        i += 1
    pieces, start = [], 0
    while len(body) - start > room:
        fitting = [b for b in breaks if start < b <= start + room]
        if not fitting:
            later = [b for b in breaks if b > start]
            if not later:
                break
            fitting = later[:1]
        pieces.append(body[start:fitting[-1]])
        start = fitting[-1]
    pieces.append(body[start:])
    out = []
    for k, piece in enumerate(pieces):
        fields = prefix and any(c == "{" for c in piece.replace("{{", ""))
        p = prefix if fields else ""
        if prefix and not fields:  # no field left in this piece: a plain literal, its braces unescaped
            piece = piece.replace("{{", "{").replace("}}", "}")
        out.append(indent + p + quote + piece + quote + (comma if k == len(pieces) - 1 else ""))
    return out


def _comment(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def fit(source: str, width: int = WIDTH) -> tuple[str, dict[str, str]]:
    """``source`` with its long lines broken (see the module docstring), and the shortened comments'
    texts -> their full texts (for the map from comments to the user's lines)."""
    if _longer(width).search(source) is None:  # (most programs: no line to break, the text as it is)
        return source, {}
    if _OTHER_BREAKS.search(source) is None:  # lines end in "\n" only: visit the long lines alone
        return _fit_long_lines(source, width)
    out, shortened = [], {}
    in_docstring = False
    for line in source.splitlines(keepends=True):
        body = line.rstrip("\n")
        quotes = body.count('"""')
        if in_docstring or quotes % 2:
            in_docstring = in_docstring != bool(quotes % 2)
            out.append(line)
            continue
        if len(body) <= width:
            out.append(line)
            continue
        stripped = body.lstrip(" ")
        indent = body[: len(body) - len(stripped)]
        if stripped.startswith("#"):
            short = _comment(body, width)
            shortened[short.strip()] = stripped
            out.append(short + "\n")
            continue
        out.extend(piece + "\n" for piece in _split(stripped, indent, width))
    return "".join(out), shortened


def _fit_long_lines(source: str, width: int) -> tuple[str, dict[str, str]]:
    """``fit`` of a text whose lines end in "\n" only, visiting only its lines longer than ``width``: one
    inside a docstring (after an odd number of triple quotes) or holding an odd number of them stays."""
    quotes = [m.start() for m in re.finditer('"""', source)]
    out, shortened, done = [], {}, 0
    for m in _long_line(width).finditer(source):
        start, end = m.span()
        body = m.group()
        if bisect.bisect_left(quotes, start) % 2 or body.count('"""') % 2:
            continue
        out.append(source[done:start])
        stripped = body.lstrip(" ")
        indent = body[: len(body) - len(stripped)]
        if stripped.startswith("#"):
            short = _comment(body, width)
            shortened[short.strip()] = stripped
            out.append(short)
        else:
            out.append("\n".join(_split(stripped, indent, width)))
        if end == len(source):  # (``fit`` ends every line it breaks with "\n")
            out.append("\n")
        done = end
    out.append(source[done:])
    return "".join(out), shortened


def modules_read(source: str, aliases) -> set[str]:
    """Which of the module ``aliases`` (``np``, ``scipy``) the code of ``source`` reads, as ``alias.``
    outside comment lines: a regular expression over the text, linear and fast on a module of 10^5 lines
    (``tokenize`` takes a second there). Our messages, the only strings, do not name modules."""
    code = _COMMENT_LINE.sub("", source)  # (one pass of the regular expression engine, not a call per line)
    return {a for a in aliases if _read(a).search(code)}


@functools.lru_cache(maxsize=64)
def _read(alias: str) -> re.Pattern:
    """``alias.`` read as a module's attribute (not part of a longer name or an attribute itself)."""
    return re.compile(r"(?<![\w.])" + re.escape(alias) + r"\.")


_COMMENT_LINE = re.compile(r"^[^\S\n]*#[^\n]*$", re.MULTILINE)


@functools.lru_cache(maxsize=8)
def _longer(width: int) -> re.Pattern:
    """A line longer than ``width`` characters (tried from the lines' starts alone: from every character, the
    search read each line's characters again and again, 8 ms on a 160 KB program where this takes 2)."""
    return re.compile(rf"^[^\n]{{{width + 1}}}", re.MULTILINE)


@functools.lru_cache(maxsize=8)
def _long_line(width: int) -> re.Pattern:
    """A whole line longer than ``width`` characters (its "\n" aside)."""
    return re.compile(rf"^[^\n]{{{width + 1},}}$", re.MULTILINE)


# the line boundaries of ``str.splitlines`` but "\n"
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
