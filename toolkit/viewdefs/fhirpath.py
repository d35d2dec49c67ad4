"""A FHIRPath tokenizer and Pratt parser, for the subset SQL-on-FHIR v2 views use.

The parser only builds a syntax tree (:class:`Node` subclasses); nothing here
evaluates anything. :mod:`toolkit.viewdefs.compile` turns a tree into Polars
expressions over whole frames. Operator precedence follows the FHIRPath
grammar (N1, §"Operator precedence"), highest first::

    . []  |  unary + -  |  * / div mod  |  + - &  |  is as  |  "|"
    |  < > <= >=  |  = ~ != !~  |  in contains  |  and  |  xor or  |  implies

>>> parse("name.where(use = 'official').family.first()")
Call(base=Member(base=Call(base=Member(base=This(), name='name'), name='where', ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "Binary",
    "Call",
    "Constant",
    "FhirPathSyntaxError",
    "Index",
    "Literal",
    "Member",
    "Node",
    "This",
    "Unary",
    "parse",
]


class FhirPathSyntaxError(ValueError):
    """A FHIRPath expression that does not parse; ``pos`` is the character offset."""

    def __init__(self, message: str, pos: int) -> None:
        self.pos = pos
        super().__init__(message)


@dataclass(frozen=True)
class Node:
    """A node of a FHIRPath syntax tree."""


@dataclass(frozen=True)
class This(Node):
    """``$this``, or the implicit input of a path that starts with a name."""


@dataclass(frozen=True)
class Literal(Node):
    """A literal: ``kind`` is ``string``, ``integer``, ``decimal``, ``boolean``,
    ``date``, ``dateTime``, ``time`` or ``empty`` (``{}``)."""

    value: object
    kind: str


@dataclass(frozen=True)
class Constant(Node):
    """``%name``: a view constant or one of ``%rowIndex``, ``%resource``, ``%rootResource``."""

    name: str


@dataclass(frozen=True)
class Member(Node):
    """``base.name``: the children called ``name`` of every item of ``base``."""

    base: Node
    name: str


@dataclass(frozen=True)
class Call(Node):
    """``base.name(args)``; a function called without a base has ``This()`` as base."""

    base: Node
    name: str
    args: tuple[Node, ...] = field(default_factory=tuple)
    #: the raw text of each argument that is a type specifier (``ofType(Quantity)``)
    type_args: tuple[str | None, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Index(Node):
    """``base[index]``."""

    base: Node
    index: Node


@dataclass(frozen=True)
class Unary(Node):
    """``-x`` or ``+x``."""

    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    """``left op right`` for every infix operator, keywords included (``and``, ``div``)."""

    op: str
    left: Node
    right: Node


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<datetime>@T?[0-9][0-9:T.+\-Z]*)
  | (?P<number>[0-9]+(?:\.[0-9]+)?)
  | (?P<string>'(?:[^'\\]|\\.)*')
  | (?P<delimited>`(?:[^`\\]|\\.)*`)
  | (?P<special>\$(?:this|index|total))
  | (?P<constant>%(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`\\]|\\.)*`|'(?:[^'\\]|\\.)*'))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><=|>=|!=|!~|[-+*/&|<>=~.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)

_ESCAPES = {"'": "'", '"': '"', "`": "`", "\\": "\\", "/": "/", "f": "\f", "n": "\n", "r": "\r"}
_ESCAPES["t"] = "\t"


def _unescape(text: str, pos: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
        elif nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            msg = f"unknown escape '\\{nxt}' at {pos + i}"
            raise FhirPathSyntaxError(msg, pos + i)
    return "".join(out)


@dataclass(frozen=True)
class _Tok:
    kind: str  # ident, delimited, string, number, datetime, special, constant, op, keyword, end
    text: str
    pos: int


_KEYWORD_OPS = {"and", "or", "xor", "implies", "div", "mod", "in", "contains", "is", "as"}


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            msg = f"unexpected character {text[pos]!r} at {pos}"
            raise FhirPathSyntaxError(msg, pos)
        kind = m.lastgroup or ""
        if kind != "ws":
            toks.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    toks.append(_Tok("end", "", len(text)))
    return toks


# binding powers of infix operators (higher binds tighter)
_INFIX: dict[str, int] = {
    "implies": 10,
    "or": 20,
    "xor": 20,
    "and": 30,
    "in": 40,
    "contains": 40,
    "=": 50,
    "~": 50,
    "!=": 50,
    "!~": 50,
    "<": 60,
    ">": 60,
    "<=": 60,
    ">=": 60,
    "|": 70,
    "is": 80,
    "as": 80,
    "+": 90,
    "-": 90,
    "&": 90,
    "*": 100,
    "/": 100,
    "div": 100,
    "mod": 100,
}
_UNARY_BP = 110
_POSTFIX_BP = 120


MAX_DEPTH = 100
"""The deepest a FHIRPath may nest: parentheses, unary signs and function arguments
inside each other, and the levels of its tree (a path of so many steps, a union of
so many terms). A view's paths are a few levels deep; a deeper one is refused with
a :class:`FhirPathSyntaxError` instead of exhausting Python's stack while it is
parsed, checked or compiled."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.nesting = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, tok: _Tok, expected: str) -> FhirPathSyntaxError:
        found = "end of expression" if tok.kind == "end" else repr(tok.text)
        return FhirPathSyntaxError(f"expected {expected}, found {found} at {tok.pos}", tok.pos)

    def expect(self, text: str) -> _Tok:
        tok = self.next()
        if tok.text != text or tok.kind not in {"op"}:
            raise self.fail(tok, repr(text))
        return tok

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise self.fail(self.peek(), "an expression")
        node = self.expr(0)
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "an operator or the end")
        return node

    def infix_op(self, tok: _Tok) -> str | None:
        if tok.kind == "op" and tok.text in _INFIX:
            return tok.text
        if tok.kind == "ident" and tok.text in _KEYWORD_OPS:
            return tok.text
        return None

    def expr(self, min_bp: int) -> Node:
        self.nesting += 1
        try:
            if self.nesting > MAX_DEPTH:
                tok = self.peek()
                msg = f"the expression nests deeper than {MAX_DEPTH} levels at {tok.pos}"
                raise FhirPathSyntaxError(msg, tok.pos)
            return self.expr_at(min_bp)
        finally:
            self.nesting -= 1

    def expr_at(self, min_bp: int) -> Node:
        left = self.prefix()
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.text == "." and min_bp < _POSTFIX_BP:
                self.next()
                left = self.invocation(left)
                continue
            if tok.kind == "op" and tok.text == "[" and min_bp < _POSTFIX_BP:
                self.next()
                index = self.expr(0)
                self.expect("]")
                left = Index(left, index)
                continue
            op = self.infix_op(tok)
            if op is None:
                return left
            bp = _INFIX[op]
            if bp <= min_bp:
                return left
            self.next()
            if op in {"is", "as"}:
                type_name = self.type_specifier()
                left = Call(left, "ofType" if op == "as" else "is", (), (type_name,))
                continue
            right = self.expr(bp)
            left = Binary(op, left, right)

    def type_specifier(self) -> str:
        parts = [self.identifier(self.next())]
        while self.peek().kind == "op" and self.peek().text == ".":
            self.next()
            parts.append(self.identifier(self.next()))
        return ".".join(parts)

    def identifier(self, tok: _Tok) -> str:
        if tok.kind == "ident":
            return tok.text
        if tok.kind == "delimited":
            return _unescape(tok.text[1:-1], tok.pos + 1)
        raise self.fail(tok, "a name")

    def prefix(self) -> Node:
        tok = self.next()
        if tok.kind == "op" and tok.text in {"+", "-"}:
            operand = self.expr(_UNARY_BP)
            if isinstance(operand, Literal) and operand.kind in {"integer", "decimal"}:
                value = operand.value
                assert isinstance(value, int | float)  # the tokenizer made it a number
                return Literal(-value if tok.text == "-" else value, operand.kind)
            return Unary(tok.text, operand)
        if tok.kind == "op" and tok.text == "(":
            inner = self.expr(0)
            self.expect(")")
            return inner
        if tok.kind == "op" and tok.text == "{":
            self.expect("}")
            return Literal(None, "empty")
        if tok.kind == "string":
            return Literal(_unescape(tok.text[1:-1], tok.pos + 1), "string")
        if tok.kind == "number":
            if "." in tok.text:
                return Literal(float(tok.text), "decimal")
            return Literal(int(tok.text), "integer")
        if tok.kind == "datetime":
            return self.datetime_literal(tok)
        if tok.kind == "constant":
            raw = tok.text[1:]
            name = _unescape(raw[1:-1], tok.pos + 2) if raw[:1] in {"`", "'"} else raw
            return Constant(name)
        if tok.kind == "special":
            if tok.text == "$this":
                return This()
            return Constant(tok.text)
        if tok.kind in {"ident", "delimited"}:
            if tok.kind == "ident" and tok.text in {"true", "false"}:
                return Literal(tok.text == "true", "boolean")
            return self.after_name(This(), tok)
        raise self.fail(tok, "an expression")

    def datetime_literal(self, tok: _Tok) -> Literal:
        text = tok.text[1:]
        if text.startswith("T"):
            if not re.fullmatch(r"T\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?", text):
                raise self.fail(tok, "a time literal")
            return Literal(text[1:], "time")
        date = r"\d{4}(-\d{2}(-\d{2})?)?"
        if re.fullmatch(date, text):
            return Literal(text, "date")
        if re.fullmatch(date + r"T(\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?(Z|[+-]\d{2}:\d{2})?", text):
            return Literal(text.rstrip("T"), "dateTime")
        raise self.fail(tok, "a date or dateTime literal")

    def invocation(self, base: Node) -> Node:
        tok = self.next()
        if tok.kind == "special" and tok.text == "$this":
            return base
        if tok.kind not in {"ident", "delimited"}:
            raise self.fail(tok, "a name or function after '.'")
        return self.after_name(base, tok)

    def after_name(self, base: Node, tok: _Tok) -> Node:
        name = self.identifier(tok)
        if tok.kind == "ident" and self.peek().kind == "op" and self.peek().text == "(":
            self.next()
            args: list[Node] = []
            type_args: list[str | None] = []
            if not (self.peek().kind == "op" and self.peek().text == ")"):
                while True:
                    start = self.i
                    args.append(self.expr(0))
                    type_args.append(self.type_text(start))
                    if self.peek().kind == "op" and self.peek().text == ",":
                        self.next()
                        continue
                    break
            self.expect(")")
            return Call(base, name, tuple(args), tuple(type_args))
        return Member(base, name)

    def type_text(self, start: int) -> str | None:
        """The argument's text when it is a (dotted) name, which may be a type specifier."""
        toks = self.toks[start : self.i]
        if toks and all(
            (t.kind in {"ident", "delimited"}) if k % 2 == 0 else (t.kind == "op" and t.text == ".")
            for k, t in enumerate(toks)
        ):
            return ".".join(self.identifier(t) for t in toks[::2])
        return None


def parse(text: str) -> Node:
    """Parse one FHIRPath expression into a syntax tree.

    Raises
    ------
    FhirPathSyntaxError
        The text is not a FHIRPath expression; the message gives the offset.

    Examples
    --------
    >>> parse("a.b = 'x'")
    Binary(op='=', left=Member(base=Member(base=This(), name='a'), name='b'), right=Literal(...))
    >>> parse("@@")
    Traceback (most recent call last):
    ...
    toolkit.viewdefs.fhirpath.FhirPathSyntaxError: unexpected character '@' at 0
    """
    node = _Parser(text).parse()
    depth = tree_depth(node)
    if depth > MAX_DEPTH:
        msg = (
            f"the expression is {depth} levels deep (a path of so many steps, or a union "
            f"of so many terms); at most {MAX_DEPTH} are allowed"
        )
        raise FhirPathSyntaxError(msg, 0)
    return node


def _kids(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Member):
        return (node.base,)
    if isinstance(node, Call):
        return (node.base, *node.args)
    if isinstance(node, Index):
        return (node.base, node.index)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Unary):
        return (node.operand,)
    return ()


def tree_depth(node: Node) -> int:
    """The number of levels of a syntax tree, counted without recursion."""
    deepest = 0
    stack = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((kid, depth + 1) for kid in _kids(current))
    return deepest
