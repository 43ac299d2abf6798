"""Dims as exact integer expressions: ``batch*seq``, ``past_seq + seq``, ``floor((h + 1)/2)``.

A symbolic dim is stored in the IR as its dim_param string; this module parses such a string into
an :class:`Expr` (a polynomial with integer coefficients over atoms), computes with it and prints
the canonical string back, so that every rule that builds ``seq + past`` and ``past + seq`` writes
the same ``past + seq``. Atoms are symbols (the names in the model) and the non-polynomial parts
of shape arithmetic: ``floor(a/b)``, ``ceiling(a/b)``, ``Mod(a, b)``, ``Max(a, b)`` and
``Min(a, b)``, printed as onnxruntime's symbolic shape inference (sympy) prints them, so its
strings parse here too.

Every dim is an integer >= 0, which is what lets ``floor((2*h + 3)/2)`` become ``h + 1`` and
``Max(h, 0)`` become ``h``. The rules use the helpers at the bottom (:func:`add`, :func:`mul`,
:func:`floordiv` ...), which take and return dims as the IR holds them (int, str or None for
unknown) and give None whenever an input is unknown.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable

Dim = int | str | None

#: An expression with more terms is written as unknown (products of sums grow fast).
MAX_TERMS = 32

# -- the expression type --------------------------------------------------------------------------


class Atom:
    """A symbol (``args`` is its name) or a function of expressions (floor, ceiling, Mod, Max,
    Min); compared by its printed form, which is canonical."""

    __slots__ = ("kind", "args", "text")

    def __init__(self, kind: str, args: tuple):
        self.kind = kind
        self.args = args
        self.text = args[0] if kind == "sym" else _print_fn(kind, args)

    def __eq__(self, other) -> bool:
        return isinstance(other, Atom) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __lt__(self, other: Atom) -> bool:
        return self.text < other.text

    def __repr__(self) -> str:
        return self.text

    def nonnegative(self) -> bool:
        return True  # (symbols are dims; floor/ceiling/Mod/Max/Min of dims are built so)


def _print_fn(kind: str, args: tuple) -> str:
    if kind in ("floor", "ceiling"):
        num, den = args
        return f"{kind}({_wrap(num)}/{_wrap(den)})"
    return f"{kind}({', '.join(str(a) for a in args)})"


def _wrap(e: Expr) -> str:
    s = str(e)
    return s if e.is_atomic() else f"({s})"


# A monomial is a sorted tuple of (atom, power); the constant term's monomial is ().
Monomial = tuple


class Expr:
    """An integer polynomial over atoms, kept canonical: ``{monomial: coefficient}`` without
    zero coefficients. Immutable and hashable; equal expressions print equally."""

    __slots__ = ("terms", "_text")

    def __init__(self, terms: dict):
        self.terms = {m: c for m, c in terms.items() if c}
        self._text: str | None = None

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def const(n: int) -> Expr:
        return Expr({(): int(n)})

    @staticmethod
    def symbol(name: str) -> Expr:
        return Expr.atom(Atom("sym", (name,)))

    @staticmethod
    def atom(a: Atom) -> Expr:
        return Expr({((a, 1),): 1})

    # -- queries --------------------------------------------------------------------------------
    def is_const(self) -> bool:
        return not self.terms or (len(self.terms) == 1 and () in self.terms)

    def value(self) -> int:
        return self.terms.get((), 0)

    def is_atomic(self) -> bool:
        """A single symbol, function or non-negative constant (printed without parentheses)."""
        if self.is_const():
            return self.value() >= 0
        if len(self.terms) != 1:
            return False
        ((m, c),) = self.terms.items()
        return c == 1 and len(m) == 1 and m[0][1] == 1

    def nonnegative(self) -> bool:
        """Provably >= 0 (every coefficient is: all atoms are)."""
        return all(c >= 0 for c in self.terms.values())

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for m in self.terms:
            for a, _ in m:
                if a.kind == "sym":
                    out.add(a.args[0])
                else:
                    for e in a.args:
                        out |= e.symbols()
        return out

    def evaluate(self, binding: dict[str, int]) -> int:
        """The value with every symbol bound (KeyError names a missing one)."""
        total = 0
        for m, c in self.terms.items():
            v = c
            for a, p in m:
                v *= _eval_atom(a, binding) ** p
            total += v
        return total

    # -- arithmetic -----------------------------------------------------------------------------
    def __add__(self, other: Expr) -> Expr:
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return Expr(terms)

    def __neg__(self) -> Expr:
        return Expr({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: Expr) -> Expr:
        return self + (-other)

    def __mul__(self, other: Expr) -> Expr:
        terms: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = _mono_mul(m1, m2)
                terms[m] = terms.get(m, 0) + c1 * c2
        return Expr(terms)

    def scale(self, k: int) -> Expr:
        return Expr({m: c * k for m, c in self.terms.items()})

    # -- equality and printing ------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        if self._text is None:
            self._text = _print(self)
        return self._text

    __repr__ = __str__


def _mono_mul(m1: Monomial, m2: Monomial) -> Monomial:
    powers: dict = dict(m1)
    for a, p in m2:
        powers[a] = powers.get(a, 0) + p
    return tuple(sorted(powers.items()))


def _mono_str(m: Monomial) -> str:
    return "*".join(a.text if p == 1 else f"{_atom_factor(a)}**{p}" for a, p in m)


def _atom_factor(a: Atom) -> str:
    return a.text


def _print(e: Expr) -> str:
    if e.is_const():
        return str(e.value())
    # symbols in name order (sympy's order for sums of symbols), the constant last
    items = sorted(((m, c) for m, c in e.terms.items() if m), key=lambda mc: _mono_str(mc[0]))
    parts = []
    for m, c in items:
        body = _mono_str(m)
        mag = abs(c)
        text = body if mag == 1 else f"{mag}*{body}"
        parts.append((c < 0, text))
    k = e.value()
    if k:
        parts.append((k < 0, str(abs(k))))
    if parts[0][0]:  # (as sympy: "1 - seq", "past - seq": a positive term leads if any)
        lead = next((k for k, (neg, _) in enumerate(parts) if not neg), 0)
        parts.insert(0, parts.pop(lead))
    neg, first = parts[0]
    out = ("-" if neg else "") + first
    for neg, text in parts[1:]:
        out += (" - " if neg else " + ") + text
    return out


def _eval_atom(a: Atom, binding: dict[str, int]) -> int:
    if a.kind == "sym":
        return int(binding[a.args[0]])
    vals = [e.evaluate(binding) for e in a.args]
    if a.kind == "floor":
        return vals[0] // vals[1]
    if a.kind == "ceiling":
        return -(-vals[0] // vals[1])
    if a.kind == "Mod":
        return vals[0] % vals[1]
    return max(vals) if a.kind == "Max" else min(vals)


# -- the non-polynomial operations ----------------------------------------------------------------


def _split(e: Expr, k: int) -> tuple[Expr, Expr]:
    """e = k*q + r, with every coefficient of r in [0, k) (k > 0)."""
    q, r = {}, {}
    for m, c in e.terms.items():
        q[m], r[m] = divmod(c, k)
    return Expr(q), Expr(r)


def _reduce(r: Expr, k: int) -> tuple[Expr, Expr]:
    """r and k divided by their common factor: floor((2*h + 2)/4) is floor((h + 1)/2)."""
    g = math.gcd(k, *r.terms.values())
    return Expr({m: c // g for m, c in r.terms.items()}), Expr.const(k // g)


def _exact_quotient(a: Expr, b: Expr) -> Expr | None:
    """a / b when it is a polynomial: b one term dividing every term of a, or a = q * b for a
    single term q (``(32*b*n - 32*b)/(16*b*n - 16*b)`` is 2), else None."""
    if len(b.terms) != 1:
        if not a.terms:
            return a
        lead_a = max(a.terms.items(), key=lambda mc: _mono_str(mc[0]))
        lead_b = max(b.terms.items(), key=lambda mc: _mono_str(mc[0]))
        q = _exact_quotient(Expr(dict([lead_a])), Expr(dict([lead_b])))
        return q if q is not None and q * b == a else None
    ((bm, bc),) = b.terms.items()
    bpow = dict(bm)
    out = {}
    for m, c in a.terms.items():
        if c % bc:
            return None
        powers = dict(m)
        for atom, p in bpow.items():
            if powers.get(atom, 0) < p:
                return None
            powers[atom] -= p
        out[tuple(sorted((x, p) for x, p in powers.items() if p))] = c // bc
    return Expr(out)


def e_floordiv(a: Expr, b: Expr) -> Expr | None:
    """floor(a / b); None for a division by zero."""
    if b.is_const():
        k = b.value()
        if k == 0:
            return None
        if k < 0:
            return e_floordiv(-a, -b)
        q, r = _split(a, k)
        if r.is_const():
            return q  # (r's coefficient is in [0, k))
        inner = _single_atom(r)
        if inner is not None and inner.kind == "floor" and inner.args[1].is_const():
            # floor(floor(x/m)/k) is floor(x/(m*k))
            return q + e_floordiv(inner.args[0], inner.args[1].scale(k))
        r, b = _reduce(r, k)
        return q + Expr.atom(Atom("floor", (r, b)))
    exact = _exact_quotient(a, b)
    if exact is not None:
        return exact
    if a == Expr.const(0):
        return a
    return Expr.atom(Atom("floor", (a, b)))


def e_ceildiv(a: Expr, b: Expr) -> Expr | None:
    """ceiling(a / b); None for a division by zero."""
    if b.is_const():
        k = b.value()
        if k == 0:
            return None
        if k < 0:
            return e_ceildiv(-a, -b)
        q, r = _split(a, k)
        if r.is_const():
            return q + Expr.const(1 if r.value() else 0)
        r, b = _reduce(r, k)
        return q + Expr.atom(Atom("ceiling", (r, b)))
    exact = _exact_quotient(a, b)
    if exact is not None:
        return exact
    return Expr.atom(Atom("ceiling", (a, b)))


def e_mod(a: Expr, b: Expr) -> Expr | None:
    """a mod b (the divisor's sign, as Python and numpy); None for a modulus of zero."""
    if b.is_const():
        k = b.value()
        if k <= 0:
            return None
        _, r = _split(a, k)
        if r.is_const():
            return Expr.const(r.value() % k)
        return Expr.atom(Atom("Mod", (r, b)))
    if _exact_quotient(a, b) is not None:
        return Expr.const(0)
    return Expr.atom(Atom("Mod", (a, b)))


def _beyond(kind: str, a: Expr, b: Expr) -> bool:
    """Whether a >= b provably (kind "Max") or a <= b (kind "Min")."""
    diff = a - b if kind == "Max" else b - a
    if diff.nonnegative():
        return True
    # Min(x, ...) <= x and Max(x, ...) >= x: the inner function bounds its arguments
    inner = "Min" if kind == "Max" else "Max"
    atom = _single_atom(b)
    if atom is not None and atom.kind == inner and a in atom.args:
        return True
    atom = _single_atom(a)
    return atom is not None and atom.kind == kind and b in atom.args


def _single_atom(e: Expr) -> Atom | None:
    return next(iter(e.terms))[0][0] if e.is_atomic() and not e.is_const() else None


def _extreme(kind: str, args: list[Expr]) -> Expr:
    """Max or Min of expressions, dropping those another provably bounds."""
    keep: list[Expr] = []
    for e in args:
        if any(e == k for k in keep):
            continue
        beaten = False
        for k in list(keep):
            if _beyond(kind, k, e):  # k is at least as far out as e
                beaten = True
                break
            if _beyond(kind, e, k):
                keep.remove(k)
        if not beaten:
            keep.append(e)
    if kind == "Max":  # every dim is >= 0: a constant <= 0 never wins against one
        nonneg = [e for e in keep if e.nonnegative()]
        if nonneg and len(nonneg) < len(keep):
            keep = [e for e in keep if not (e.is_const() and e.value() <= 0)] or keep
    if len(keep) == 1:
        return keep[0]
    return Expr.atom(Atom(kind, tuple(sorted(keep, key=str))))


def e_max(*args: Expr) -> Expr:
    return _extreme("Max", list(args))


def e_min(*args: Expr) -> Expr:
    return _extreme("Min", list(args))


# -- parsing dim_param strings --------------------------------------------------------------------

# names may hold '.', ':' or '-' between word characters ("batch-size", "input.1"); a minus sign
# between two names or numbers is written with spaces ("seq - 1"), as the printer does
# (compiled at the first expression: a model whose dims are plain names never needs it)
_TOKEN_PATTERN = (
    r"\s*(?:(?P<num>\d+)(?![\w.])|(?P<name>[A-Za-z_]\w*(?:[.:\-]\w+)*)|(?P<op>\*\*|[-+*/(),]))"
)
_token = None

_FUNCS = {"floor", "ceiling", "ceil", "Mod", "Max", "Min", "max", "min"}


class _ParseError(Exception):
    pass


def _tokens(text: str) -> list:
    global _token
    if _token is None:
        _token = re.compile(_TOKEN_PATTERN).match
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _token(text, pos)
        if m is None or m.end() == pos:
            raise _ParseError(text)
        pos = m.end()
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
    return out


class _Parser:
    """expr := term (('+'|'-') term)*;  term := factor (('*'|'/') factor)*;
    factor := '-' factor | atom ('**' num)?;  atom := num | name | call | '(' expr ')'.
    A '/' is a floor division (inside floor() and ceiling() the division is the call's)."""

    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if tok[0] is None or (value is not None and tok[1] != value):
            raise _ParseError(value)
        self.i += 1
        return tok

    def parse(self) -> Expr:
        e = self.expr()
        if self.i != len(self.toks):
            raise _ParseError("trailing tokens")
        return e

    def expr(self) -> Expr:
        e = self.term()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            t = self.term()
            e = e + t if op == "+" else e - t
        return e

    def term(self, div=None) -> Expr:
        e = self.factor()
        while self.peek()[1] in ("*", "/"):
            op = self.take()[1]
            f = self.factor()
            if op == "*":
                e = e * f
                if len(e.terms) > MAX_TERMS:
                    raise _ParseError("too large")
            else:
                q = (div or e_floordiv)(e, f)
                if q is None:
                    raise _ParseError("division by zero")
                e = q
        return e

    def factor(self) -> Expr:
        if self.peek()[1] == "-":
            self.take()
            return -self.factor()
        e = self.primary()
        if self.peek()[1] == "**":
            self.take()
            kind, n = self.take()
            if kind != "num" or int(n) > 8:
                raise _ParseError("power")
            out = Expr.const(1)
            for _ in range(int(n)):
                out = out * e
            e = out
        return e

    def primary(self) -> Expr:
        kind, text = self.take()
        if kind == "num":
            return Expr.const(int(text))
        if text == "(":
            e = self.expr()
            self.take(")")
            return e
        if kind == "name" and text in _FUNCS and self.peek()[1] == "(":
            return self.call(text)
        if kind == "name":
            return Expr.symbol(text)
        raise _ParseError(text)

    def call(self, fn: str) -> Expr:
        self.take("(")
        if fn in ("floor", "ceiling", "ceil"):
            div = e_floordiv if fn == "floor" else e_ceildiv
            e = self.sum_with(div)
            self.take(")")
            return e
        args = [self.expr()]
        while self.peek()[1] == ",":
            self.take()
            args.append(self.expr())
        self.take(")")
        if fn == "Mod":
            if len(args) != 2:
                raise _ParseError("Mod")
            out = e_mod(*args)
            if out is None:
                raise _ParseError("Mod by zero")
            return out
        return e_max(*args) if fn.lower() == "max" else e_min(*args)

    def sum_with(self, div) -> Expr:
        e = self.term(div)
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            t = self.term(div)
            e = e + t if op == "+" else e - t
        return e


@functools.lru_cache(maxsize=8192)
def parse(text: str) -> Expr:
    """The expression a dim_param spells; a string that is no expression is one symbol."""
    if text.isidentifier():  # (one name, the common case: what the parser would make of it)
        return Expr.symbol(text)
    try:
        return _Parser(text).parse()
    except _ParseError:
        return Expr.symbol(text)


# -- dims as the IR holds them (int, str, None) ---------------------------------------------------


def to_expr(d: Dim) -> Expr | None:
    if d is None or d == "":  # (an empty dim_param is what some exporters write for unknown)
        return None
    if isinstance(d, str):
        return parse(d)
    return Expr.const(int(d))


def to_dim(e: Expr | None) -> Dim:
    """The IR's form: an int for a constant, the canonical string otherwise."""
    if e is None:
        return None
    if e.is_const():
        return e.value()
    return str(e)


def canonical(d: Dim) -> Dim:
    """The canonical form of a dim ("seq+past" -> "past + seq"; "2" -> 2)."""
    return to_dim(to_expr(d)) if isinstance(d, str) else d


def same(a: Dim, b: Dim) -> bool:
    """Whether two known dims are provably equal."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    return to_expr(a) == to_expr(b)


def equal(a: Dim, b: Dim) -> bool | None:
    """Whether two dims are equal: True, False, or None when it depends on the symbols' values
    (a dim is >= 0, so ``seq + 1`` is no 0 and no dim is -1)."""
    if a is None or b is None:
        return None
    diff = to_expr(a) - to_expr(b)
    if diff.is_const():
        return diff.value() == 0
    if (diff.nonnegative() and diff.value() > 0) or ((-diff).nonnegative() and diff.value() < 0):
        return False
    return None


def nonnegative(d: Dim) -> bool:
    """Whether a dim expression is provably >= 0."""
    e = to_expr(d)
    return e is not None and e.nonnegative()


def nonpositive(d: Dim) -> bool:
    """Whether a dim expression is provably <= 0 (a negated dim, ``-seq``)."""
    e = to_expr(d)
    return e is not None and (-e).nonnegative()


def _lift(fn, on_ints):
    """A dim operation from an Expr one, with a fast path for plain numbers (most dims)."""

    def lifted(*dims: Dim) -> Dim:
        if all(type(d) is int for d in dims):
            return on_ints(*dims)
        es = [to_expr(d) for d in dims]
        if any(e is None for e in es):
            return None
        out = fn(*es)
        if out is not None and len(out.terms) > MAX_TERMS:
            return None  # (a product of many sums: unknown rather than a page-long dim)
        return to_dim(out)

    lifted.__name__ = fn.__name__
    return lifted


def _int_div(fn):
    return lambda a, b: fn(a, b) if b else None


add = _lift(lambda *es: functools.reduce(lambda x, y: x + y, es, Expr.const(0)), lambda *n: sum(n))
sub = _lift(lambda a, b: a - b, lambda a, b: a - b)
mul = _lift(
    lambda *es: functools.reduce(lambda x, y: x * y, es, Expr.const(1)), lambda *n: math.prod(n)
)
floordiv = _lift(e_floordiv, _int_div(lambda a, b: a // b))
ceildiv = _lift(e_ceildiv, _int_div(lambda a, b: -(-a // b)))
mod = _lift(e_mod, lambda a, b: a % b if b > 0 else None)
dmax = _lift(e_max, max)
dmin = _lift(e_min, min)


def prod(dims: Iterable[Dim]) -> Dim:
    return mul(*dims)


def total(dims: Iterable[Dim]) -> Dim:
    return add(*dims)


def is_compound(d: Dim) -> bool:
    """A dim that is an expression of others, not one name or number."""
    return isinstance(d, str) and not parse(d).is_atomic()


def symbols_of(d: Dim) -> set[str]:
    return set() if not isinstance(d, str) else parse(d).symbols()


def evaluate(d: Dim, binding: dict[str, int]) -> int | None:
    """The dim's value with its symbols bound; None when one is not bound or it is unknown."""
    if d is None:
        return None
    if isinstance(d, int):
        return d
    try:
        return parse(d).evaluate(binding)
    except (KeyError, ZeroDivisionError):
        return None
