"""SQL92 subscription filters (RocketMQ's `MessageSelector.bySql`, expressionType "SQL92"):
the grammar of RocketMQ's SelectorParser.jj parsed with lark, compiled to a tree of
closures over a message's properties (TAGS is one of them).

Sans-I/O: the node's pull path and the client's checks both call `compile_sql92`, so a
subscription is judged exactly as the pull evaluates it. Semantics follow RocketMQ's
filter module (ComparisonExpression, LogicExpression, UnaryExpression), because a consumer
moving between brokers must see the same messages:

- property values are strings; a comparison with a number literal converts the string
  as Java would (Integer.valueOf / Long.valueOf / Double.valueOf by the literal's type),
  and `<`, `>`, `<=`, `>=` between two strings compare them as doubles;
- a conversion that fails makes the whole expression not match (RocketMQ logs it);
- a missing property is NULL, and NULL makes a comparison unknown: three-valued
  AND / OR / NOT, and only TRUE matches;
- IN takes string literals and a property; BETWEEN takes numbers.

Deliberate differences: RocketMQ's parser silently ignores tokens after a complete
expression ("a = 1 b"); here they are a parse error. A `--` comment may end the input
without a newline (RocketMQ needs one, but then ignores what follows anyway).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lark
    from lark.exceptions import UnexpectedInput

__all__ = ["SQL92", "Sql92Error", "Sql92Filter", "compile_sql92", "sql92_error"]

SQL92 = "SQL92"
"""The remoting expressionType of a SQL92 subscription."""

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr | or_expr OR and_expr -> or_
?and_expr: eq_expr | and_expr AND eq_expr -> and_
?eq_expr: cmp_expr
    | eq_expr "=" cmp_expr -> eq
    | eq_expr "<>" cmp_expr -> ne
    | eq_expr IS NULL -> is_null
    | eq_expr IS NOT NULL -> is_not_null
?cmp_expr: unary
    | cmp_expr ">" unary -> gt
    | cmp_expr ">=" unary -> ge
    | cmp_expr "<" unary -> lt
    | cmp_expr "<=" unary -> le
    | cmp_expr BETWEEN unary AND unary -> between
    | cmp_expr NOT BETWEEN unary AND unary -> not_between
    | cmp_expr IN "(" STRING ("," STRING)* ")" -> in_
    | cmp_expr NOT IN "(" STRING ("," STRING)* ")" -> not_in
?unary: "+" unary -> pos
    | "-" unary -> neg
    | NOT unary -> not_
    | primary
?primary: STRING -> string
    | DECIMAL -> decimal
    | FLOAT -> float
    | TRUE -> true
    | FALSE -> false
    | NULL -> null
    | ID -> var
    | "(" or_expr ")"

NOT.3: /not(?![a-z0-9_$])/i
AND.3: /and(?![a-z0-9_$])/i
OR.3: /or(?![a-z0-9_$])/i
BETWEEN.3: /between(?![a-z0-9_$])/i
IN.3: /in(?![a-z0-9_$])/i
TRUE.3: /true(?![a-z0-9_$])/i
FALSE.3: /false(?![a-z0-9_$])/i
NULL.3: /null(?![a-z0-9_$])/i
IS.3: /is(?![a-z0-9_$])/i
ID: /[a-z_$][a-z0-9_$]*/i
FLOAT.2: /([0-9]+\.[0-9]*(e[+-]?[0-9]+)?|\.[0-9]+(e[+-]?[0-9]+)?|[0-9]+e[+-]?[0-9]+)/i
DECIMAL: /(0|[1-9][0-9]*l?)/i
STRING: /'(''|[^'])*'/
WS: /[ \t\n\r\f]+/
LINE_COMMENT: /--[^\n\r]*/
BLOCK_COMMENT: /\/\*[^*]*\*+([^*\/][^*]*\*+)*\//
%ignore WS
%ignore LINE_COMMENT
%ignore BLOCK_COMMENT
"""



@functools.cache
def _parser() -> lark.Lark:
    """Built on the first expression compiled, not at import: lark and the table build cost
    ~90 ms, which every node, name server and CLI process would pay for a filter few use."""
    import lark

    return lark.Lark(_GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MIN_VALUE = 5e-324
"""Java's Double.MIN_VALUE (smallest positive): RocketMQ refuses float literals below it (so 0.0)."""


class Sql92Error(ValueError):
    """An expression that does not parse or cannot be evaluated as RocketMQ would: the
    message names the 1-based line and column (also attributes) of the offending token."""

    def __init__(self, reason: str, line: int, column: int) -> None:
        super().__init__(f"{reason} at line {line}, column {column}")
        self.reason, self.line, self.column = reason, line, column


class _EvalError(Exception):
    """A conversion that throws in RocketMQ: the message does not match."""


class JavaLong(int):
    """A number literal outside Java's int range: Long, so a property compared with it is
    read with Long.valueOf (an Integer literal reads it with Integer.valueOf)."""


Value = Any  # None | bool | str | int (Integer) | JavaLong | float (Double)
Props = Mapping[str, str]
Eval = Callable[[Props], Value]

# ---------------------------------------------------------------- Java conversions

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_DOUBLE_TEXT = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")


def _java_int(s: str, low: int, high: int) -> int:
    """Integer.valueOf / Long.valueOf: decimal digits with an optional sign, in range."""
    if not _INT_TEXT.fullmatch(s):
        raise _EvalError(f"not an integer: {s!r}")
    v = int(s)
    if not low <= v <= high:
        raise _EvalError(f"out of range: {s!r}")
    return v


def _java_double(s: str) -> float:
    """Double.valueOf (decimal forms; Java also trims characters <= ' ')."""
    t = s.strip("".join(map(chr, range(33))))
    if not _DOUBLE_TEXT.fullmatch(t):
        raise _EvalError(f"not a number: {s!r}")
    t = t.rstrip("fFdD") if t[-1:] in "fFdD" and not t.endswith("Infinity") else t
    return float(t.replace("Infinity", "inf"))


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _double_cmp(a: float, b: float) -> int:
    """Double.compareTo: NaN above everything and equal to itself, -0.0 below 0.0."""
    if math.isnan(a) or math.isnan(b):
        return int(math.isnan(a)) - int(math.isnan(b))
    if a == b == 0.0:
        return _cmp(math.copysign(1, a), math.copysign(1, b))
    return _cmp(a, b)


def _kind(v: Value) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "str"
    if isinstance(v, float):
        return "double"
    return "long" if isinstance(v, JavaLong) else "int"


def _from_string(s: str, kind: str) -> Value:
    if kind == "int":
        return _java_int(s, INT_MIN, INT_MAX)
    if kind == "long":
        return _java_int(s, LONG_MIN, LONG_MAX)
    if kind == "double":
        return _java_double(s)
    return s.lower() == "true"  # Boolean.valueOf


def java_compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.__compare with convertStringExpressions (always on in RocketMQ):
    numbers widen, a string becomes the other side's type, any other mix is "less" (-1)."""
    lk, rk = _kind(lv), _kind(rv)
    if lk != rk:
        numbers = ("int", "long", "double")
        if lk == "bool":
            if rk == "str":  # RocketMQ casts the Boolean to String here and throws
                raise _EvalError("a boolean compared with a string")
            return -1
        if lk in numbers and rk in numbers:
            if "double" in (lk, rk):
                lv, rv, lk = float(lv), float(rv), "double"
        elif lk in numbers and rk == "str":
            rv = _from_string(rv, lk)
        elif lk == "str" and rk != "str":
            lv, lk = _from_string(lv, rk), rk
        else:
            return -1
    if lk == "double":
        return _double_cmp(lv, rv)
    return _cmp(lv, rv)


# ---------------------------------------------------------------- compiling


class _Node:
    """A compiled sub-expression: its evaluator and what the parser's checks need to know."""

    __slots__ = ("ev", "kind", "value", "meta")

    def __init__(self, ev: Eval, kind: str, meta: Any, value: Value = None) -> None:
        self.ev, self.kind, self.meta, self.value = ev, kind, meta, value
        # kind: "const" (literal; TRUE/FALSE/NULL are "boolconst"), "prop", "bool", "value"


def _fail(reason: str, where: Any) -> Sql92Error:
    return Sql92Error(reason, getattr(where, "line", 1) or 1, getattr(where, "column", 1) or 1)


def _as_boolean(n: _Node) -> Eval:
    """asBooleanExpression: boolean expressions as they are, a property cast (a string is
    FALSE, a missing one NULL), anything else a parse error."""
    if n.kind in ("bool", "boolconst"):
        return n.ev
    if n.kind == "prop":
        ev = n.ev

        def cast(p: Props) -> Value:
            v = ev(p)
            return None if v is None else (v if isinstance(v, bool) else False)

        return cast
    raise _fail("expression will not result in a boolean value", n.meta)


def _check_orderable(n: _Node) -> None:
    """checkLessThanOperand: literals must be numbers, boolean expressions are refused."""
    if n.kind == "boolconst" or n.kind == "bool" or (n.kind == "const" and isinstance(n.value, str)):
        raise _fail("value cannot be compared with <, <=, >, >= or BETWEEN (numbers only)", n.meta)


def _check_equality(left: _Node, right: _Node) -> None:
    """checkEqualOperand and checkEqualOperandCompatability."""
    for n in (left, right):
        if n.kind == "boolconst" and n.value is None:
            raise _fail("NULL cannot be compared; use IS NULL", n.meta)
    if left.kind == "boolconst" and right.kind == "const":
        raise _fail("a boolean literal cannot be compared with a non-boolean literal", left.meta)


def _equal(left: Eval, right: Eval) -> Eval:
    def ev(p: Props) -> Value:
        lv, rv = left(p), right(p)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None:
            return True
        return java_compare(lv, rv) == 0

    return ev


def _not(inner: Eval) -> Eval:
    def ev(p: Props) -> Value:
        v = inner(p)
        return None if v is None else not v

    return ev


_ORDER: dict[str, Callable[[int], bool]] = {
    "gt": lambda c: c > 0, "ge": lambda c: c >= 0, "lt": lambda c: c < 0, "le": lambda c: c <= 0,
}


def _order(op: str, left: _Node, right: _Node) -> Eval:
    _check_orderable(left)
    _check_orderable(right)
    test, lf, rf = _ORDER[op], left.ev, right.ev

    def ev(p: Props) -> Value:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):  # two strings: as doubles, or it throws
            return test(_double_cmp(_java_double(lv), _java_double(rv)))
        return test(java_compare(lv, rv))

    return ev


def _and(left: Eval, right: Eval) -> Eval:
    def ev(p: Props) -> Value:
        lv = left(p)
        if lv is False:
            return False
        rv = right(p)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return ev


def _or(left: Eval, right: Eval) -> Eval:
    def ev(p: Props) -> Value:
        lv = left(p)
        if lv is True:
            return True
        rv = right(p)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return ev


def _negate(inner: Eval) -> Eval:
    def ev(p: Props) -> Value:
        v = inner(p)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None  # a string or boolean is not a Number: NULL
        if isinstance(v, JavaLong):
            return JavaLong(-v if -v <= LONG_MAX else v)  # Java wraps -Long.MIN_VALUE to itself
        if isinstance(v, int):
            return -v if -v <= INT_MAX else v
        return -v

    return ev


def _in(n: _Node, items: list[str], negated: bool, meta: Any) -> Eval:
    if n.kind != "prop":
        raise _fail("IN needs a property on its left", meta)
    values, inner = frozenset(items), n.ev

    def ev(p: Props) -> Value:
        v = inner(p)
        if not isinstance(v, str):
            return None
        return (v in values) != negated

    return ev


def _string(token: str) -> str:
    return token[1:-1].replace("''", "'")


def _constant(value: Value) -> Eval:
    return lambda p: value


def _literal(tree: lark.Tree[lark.Token]) -> _Node:
    name, token = tree.data, (tree.children[0] if tree.children else None)
    meta = token if token is not None else tree.meta
    if name == "string":
        value: Value = _string(str(token))
    elif name == "decimal":
        text = str(token).rstrip("lL")
        v = int(text)
        if v > LONG_MAX:
            raise _fail(f"number {text} is out of the long range", meta)
        value = v if v <= INT_MAX else JavaLong(v)
    elif name == "float":
        f = float(str(token))
        if math.isinf(f) or f < DOUBLE_MIN_VALUE:
            raise _fail(f"number {token} is outside the double range (positive, up to 1.8e308)", meta)
        value = f
    else:
        value = {"true": True, "false": False, "null": None}[name]
        return _Node(_constant(value), "boolconst", meta, value)
    return _Node(_constant(value), "const", meta, value)


def _compile(tree: lark.Tree[lark.Token] | lark.Token) -> _Node:  # noqa: C901 - one branch per grammar rule
    import lark

    if isinstance(tree, lark.Token):
        raise _fail(f"unexpected {tree.type}", tree)
    name, kids, meta = tree.data, tree.children, tree.meta
    if name in ("string", "decimal", "float", "true", "false", "null"):
        return _literal(tree)
    if name == "var":
        prop = str(kids[0])
        return _Node(lambda p: p.get(prop), "prop", kids[0])
    if name == "pos":
        return _compile(kids[0])
    if name == "neg":
        return _Node(_negate(_compile(kids[0]).ev), "value", meta)
    if name == "not_":
        return _Node(_not(_as_boolean(_compile(kids[1]))), "bool", meta)
    if name in ("or_", "and_"):
        either, other = _as_boolean(_compile(kids[0])), _as_boolean(_compile(kids[2]))
        return _Node((_or if name == "or_" else _and)(either, other), "bool", meta)
    if name in ("eq", "ne"):
        left, right = _compile(kids[0]), _compile(kids[1])
        _check_equality(left, right)
        ev = _equal(left.ev, right.ev)
        return _Node(ev if name == "eq" else _not(ev), "bool", meta)
    if name in ("is_null", "is_not_null"):
        ev = _equal(_compile(kids[0]).ev, _constant(None))
        return _Node(ev if name == "is_null" else _not(ev), "bool", meta)
    if name in _ORDER:
        return _Node(_order(name, _compile(kids[0]), _compile(kids[1])), "bool", meta)
    if name in ("between", "not_between"):
        value, low, high = (_compile(k) for k in kids if not isinstance(k, lark.Token))
        if low.kind in ("const", "boolconst") and high.kind in ("const", "boolconst"):
            if low.value is None or high.value is None:
                raise _fail("BETWEEN bounds cannot be NULL", meta)
            _check_orderable(low)
            _check_orderable(high)
            if java_compare(high.value, low.value) < 0:
                raise _fail(f"BETWEEN's low bound {low.value} is above its high bound {high.value}", low.meta)
        if name == "between":
            ev = _and(_order("ge", value, low), _order("le", value, high))
        else:
            ev = _or(_order("lt", value, low), _order("gt", value, high))
        return _Node(ev, "bool", meta)
    if name in ("in_", "not_in"):
        items = [_string(str(k)) for k in kids if isinstance(k, lark.Token) and k.type == "STRING"]
        return _Node(_in(_compile(kids[0]), items, name == "not_in", meta), "bool", meta)
    raise AssertionError(f"unknown rule {name}")


class Sql92Filter:
    """A compiled SQL92 expression; `matches(properties)` is RocketMQ's
    isMatchedByCommitLog: TRUE matches, FALSE, NULL (unknown) or a failed conversion does not."""

    __slots__ = ("expression", "_ev")

    def __init__(self, expression: str, ev: Eval) -> None:
        self.expression, self._ev = expression, ev

    def evaluate(self, properties: Props) -> bool | None:
        """The expression's three-valued result (None: unknown or a failed conversion)."""
        try:
            v = self._ev(properties)
        except _EvalError:
            return None
        return v if isinstance(v, bool) else None

    def matches(self, properties: Props) -> bool:
        return self.evaluate(properties) is True

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


def _parse_error(e: UnexpectedInput, text: str) -> Sql92Error:
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        lines = text.split("\n")
        return Sql92Error("unexpected end of expression", len(lines), len(lines[-1]) + 1)
    if isinstance(e, UnexpectedToken):
        return Sql92Error(f"unexpected {str(e.token)!r}", e.line if e.line > 0 else 1, e.column if e.column > 0 else 1)
    if isinstance(e, UnexpectedCharacters):
        return Sql92Error(f"unexpected character {text[e.pos_in_stream or 0]!r}", e.line, e.column)
    return Sql92Error(str(e).splitlines()[0], getattr(e, "line", 1), getattr(e, "column", 1))


@functools.lru_cache(maxsize=512)
def compile_sql92(expression: str) -> Sql92Filter:
    """Parse and compile; Sql92Error (a ValueError) with the position of the first problem.
    Cached (bounded LRU): a subscription's expression is compiled once, not per pull."""
    if not expression.strip():
        raise Sql92Error("a SQL92 expression must not be empty", 1, 1)
    from lark.exceptions import UnexpectedInput

    try:
        tree = _parser().parse(expression)
    except UnexpectedInput as e:
        raise _parse_error(e, expression) from None
    return Sql92Filter(expression, _as_boolean(_compile(tree)))


def sql92_error(expression: str) -> str | None:
    """A request field check: None when `expression` compiles, else the problem."""
    try:
        compile_sql92(expression)
    except Sql92Error as e:
        return str(e)
    return None
