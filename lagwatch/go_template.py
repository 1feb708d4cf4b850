"""Burrow's notifier templates (Go text/template) rewritten as lagwatch's Jinja2 templates.

The notifier offers Burrow's names and helpers (shared/notifications/templating/burrow_helpers.py), so most of a
template carries over word for word: `{{.Result.TotalLag}}` → `{{ Result.TotalLag }}`, `{{index .Extras "app"}}` →
`{{ Extras["app"] }}`, `{{.Result.Partitions | jsonencoder}}` → `{{ jsonencoder(Result.Partitions) }}`,
`{{if eq .Result.Status 2}}…{{else}}…{{end}}` → `{% if Result.Status == "WARN" %}…{% else %}…{% endif %}`,
`{{range .Result.Partitions}}{{.Topic}}{{end}}` → `{% for p1 in Result.Partitions %}{{ p1.Topic }}{% endfor %}`,
`{{.Start.Format "2006-01-02"}}` → `{{ formattimestamp(Start, "2006-01-02") }}`.

What has no counterpart (`define`, `template`, `block`, `break`, `continue`, `call`, methods other than
`Format` and `String`, …) raises `Untranslatable`; `translate` also returns notes on what it changed in meaning.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# Burrow's status constants (protocol.StatusConstant), as Go compares them with numbers
STATUS_NAMES = ("NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND")
COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
ORDERINGS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
BURROW_HELPERS = frozenset(
    {"jsonencoder", "topicsbystatus", "partitioncounts", "add", "minus", "multiply", "divide", "maxlag"}
)
MAP_VALUED = re.compile(r"^(Extras|topicsbystatus\(.*\)|partitioncounts\(.*\))$")  # ranged over as sorted pairs
MISSING_OFFSET_FIELDS = frozenset({"Timestamp", "ObservedTimestamp", "Lag"})  # of a partition's Start / End
UNSUPPORTED_WORDS = frozenset({"define", "template", "block", "break", "continue", "call", "slice", "js", "println"})
# An action: up to the first "}}" outside strings and comments
ACTION = re.compile(r'\{\{((?:"(?:\\.|[^"\\])*"|`[^`]*`|/\*.*?\*/|[^"`}/]|/(?!\*)|\}(?!\}))*+)\}\}', re.S)
TOKEN = re.compile(
    r"""(?P<space>\s+)
    |(?P<string>"(?:\\.|[^"\\])*")
    |(?P<raw>`[^`]*`)
    |(?P<number>-?\d+(?:\.\d+)?)
    |(?P<declare>:=)
    |(?P<assign>=)
    |(?P<punct>[()|,])
    |(?P<variable>\$\w*(?:\.\w+)*)
    |(?P<field>(?:\.\w+)+|\.)
    |(?P<word>[A-Za-z_]\w*)
    |(?P<unreadable>.)""",
    re.X,
)


class Untranslatable(ValueError):
    """A construct of the Go template with no Jinja2 counterpart here."""


@dataclass
class Token:
    kind: str
    text: str
    glued: bool = False  # directly after the previous token (`(index .X 0).Topic`)


@dataclass
class _Scope:
    kind: str  # "if", "range", "with"
    dot: str | None  # what `.` meant inside it (None: unchanged)


@dataclass
class Translation:
    source: str
    notes: list[str] = field(default_factory=list)


def translate(go_source: str) -> Translation:
    """The Jinja2 form of a Go template; Untranslatable when a construct has none."""
    return _Translator().run(go_source)


def _pieces(source: str) -> Iterator[tuple[str, str | None]]:
    """(plain text, the action after it between {{ and }}, None after the last) through the template."""
    i = 0
    while (start := source.find("{{", i)) >= 0:
        if (action := ACTION.match(source, start)) is None:
            raise Untranslatable("an action ({{ …) is not closed with }}")
        yield source[i:start], action.group(1)
        i = action.end()
    yield source[i:], None


def _text(text: str) -> str:
    # Jinja2 would read "{%" and "{#" in plain text as its own markup
    return re.sub(r"\{([%#])", lambda m: '{{ "{' + m.group(1) + '" }}', text)


class _Translator:
    """The actions in order: control actions open and close scopes (what `.` means inside them), the rest print or
    set a variable through `_Expressions`."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.notes: list[str] = []
        self.scopes: list[_Scope] = []
        self.loops = 0
        self.pipeline = _Expressions(self.dot, self.note).pipeline

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def dot(self) -> str | None:
        """What `.` is here: the innermost range's or with's value; None at the top (Burrow's names are globals)."""
        return next((scope.dot for scope in reversed(self.scopes) if scope.dot is not None), None)

    def run(self, source: str) -> Translation:
        for text, action in _pieces(source):
            self.out.append(_text(text))
            if action is not None:
                self._action(action)
        if self.scopes:
            raise Untranslatable(f"{{{{{self.scopes[-1].kind}}}}} is never closed with {{{{end}}}}")
        return Translation("".join(self.out), self.notes)

    def _action(self, body: str) -> None:
        left = body.startswith("- ") or body == "-"
        right = body.endswith(" -")
        body = body[2 if left else 0 : len(body) - 2 if right else None].strip()
        lt, rt = ("-" if left else ""), ("-" if right else "")
        if body.startswith("/*"):
            self.out.append(f"{{#{lt} {body[2:-2].strip().replace('#}', '# }')} {rt}#}}")
            return
        tokens = _lex(body)
        if not tokens:
            raise Untranslatable("an empty action {{ }}")
        statement = self._statement(tokens[0], tokens) or self._assignment(tokens)
        if statement is None:
            self.out.append(f"{{{{{lt} {self.pipeline(tokens)} {rt}}}}}")
            return
        self.out.append("".join(f"{{%{lt if i == 0 else ''} {s} {rt if i == len(statement) - 1 else ''}%}}"
                                for i, s in enumerate(statement)))  # fmt: skip

    def _assignment(self, tokens: list[Token]) -> list[str] | None:
        """`$x := …` or `$x = …` as a Jinja2 `set`; None for an action that prints."""
        if len(tokens) <= 2 or tokens[0].kind != "variable" or tokens[1].kind not in ("declare", "assign"):
            return None
        if tokens[1].kind == "assign":
            self.note("a variable set again ($x = …) inside a range or with keeps its outer value in Jinja2")
        return [f"set {_variable(tokens[0].text)} = {self.pipeline(tokens[2:])}"]

    def _statement(self, head: Token, tokens: list[Token]) -> list[str] | None:
        """Jinja2 statements for a control action; None for an action that prints (or sets a variable)."""
        if head.kind != "word":
            return None
        word = head.text
        if word in UNSUPPORTED_WORDS:
            raise Untranslatable(f"{{{{{word}}}}} has no counterpart in lagwatch's templates")
        if word == "if":
            self.scopes.append(_Scope("if", None))
            return [f"if {self.pipeline(tokens[1:])}"]
        if word == "else":
            return self._else(tokens[1:])
        if word == "end":
            return self._end()
        if word == "range":
            return self._range(tokens[1:])
        if word == "with":
            value = self.pipeline(tokens[1:])
            name = self._open("with", "w")
            return [f"with {name} = {value}", f"if {name}"]
        return None

    def _open(self, kind: str, prefix: str, name: str | None = None) -> str:
        """A range or with scope: `.` inside it is `name` (default: a fresh one), returned."""
        self.loops += 1
        name = name or f"{prefix}{self.loops}"
        self.scopes.append(_Scope(kind, name))
        return name

    def _else(self, rest: list[Token]) -> list[str]:
        if not self.scopes:
            raise Untranslatable("{{else}} outside if, range or with")
        scope = self.scopes[-1]
        scope.dot = None  # Go: `.` is the outer value again in a with's or a range's else
        if rest:
            if rest[0].text != "if" or scope.kind != "if":
                raise Untranslatable("only {{else if …}} chains are translated")
            return [f"elif {self.pipeline(rest[1:])}"]
        return ["else"]

    def _end(self) -> list[str]:
        if not self.scopes:
            raise Untranslatable("{{end}} without if, range or with")
        scope = self.scopes.pop()
        return {"if": ["endif"], "range": ["endfor"], "with": ["endif", "endwith"]}[scope.kind]

    def _range(self, rest: list[Token]) -> list[str]:
        names: list[str] = []
        if any(t.kind == "declare" for t in rest):
            while rest and rest[0].kind in ("variable", "punct") and rest[0].text != "(":
                if rest[0].kind == "variable":
                    names.append(_variable(rest[0].text))
                rest = rest[1:]
            if not rest or rest[0].kind != "declare":
                raise Untranslatable("a range declaration other than $v := … or $k, $v := …")
            rest = rest[1:]
        value = self.pipeline(rest)
        item = self._open("range", "p", names[-1] if names else None)
        if MAP_VALUED.match(value):  # Go ranges over a map in key order
            key = names[0] if len(names) == 2 else f"k{self.loops}"
            return [f"for {key}, {item} in {value} | dictsort"]
        statements = [f"for {item} in {value}"]
        if len(names) == 2:
            statements.append(f"set {names[0]} = loop.index0")
        return statements


class _Expressions:
    """Go pipelines, commands and operands as Jinja2 expressions, `.` read as `dot()` says where they stand."""

    def __init__(self, dot: Callable[[], str | None], note: Callable[[str], None]) -> None:
        self.dot = dot
        self.note = note

    def pipeline(self, tokens: list[Token]) -> str:
        """A Go pipeline (commands joined by |; each passes its value as the last argument of the next)."""
        commands: list[list[Token]] = [[]]
        depth = 0
        for token in tokens:
            if token.text == "(":
                depth += 1
            elif token.text == ")":
                depth -= 1
            if token.kind == "punct" and token.text == "|" and depth == 0:
                commands.append([])
            else:
                commands[-1].append(token)
        value: str | None = None
        for command in commands:
            if not command:
                raise Untranslatable("an empty command in a pipeline")
            value = self._command(command, value)
        assert value is not None
        return value

    def _command(self, words: list[Token], piped: str | None) -> str:
        head = words[0]
        call = head.kind == "word" and head.text not in ("true", "false", "nil")
        operands = self._operands(words[1:] if call else words)
        if call:
            return _function(head.text, operands + ([piped] if piped is not None else []))
        if len(operands) == 2 and operands[0].startswith("__method__"):
            return _method(operands[0], [operands[1]] + ([piped] if piped else []))
        if len(operands) != 1 or piped is not None:
            raise Untranslatable(f"a command that is not a function call: {' '.join(t.text for t in words)}")
        if operands[0].startswith("__method__"):
            return _method(operands[0], [])
        return operands[0]

    def _operands(self, tokens: list[Token]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(tokens):
            if tokens[i].text != "(":
                out.append(self._operand(tokens[i]))
                i += 1
                continue
            depth, j = 1, i + 1
            while j < len(tokens) and depth:
                depth += {"(": 1, ")": -1}.get(tokens[j].text, 0)
                j += 1
            if depth:
                raise Untranslatable("unbalanced parentheses")
            expr = f"({self.pipeline(tokens[i + 1 : j - 1])})"
            while j < len(tokens) and tokens[j].kind == "field" and tokens[j].glued:
                expr += tokens[j].text
                j += 1
            out.append(expr)
            i = j
        return out

    def _operand(self, token: Token) -> str:
        if token.kind == "string":
            return json.dumps(json.loads(token.text), ensure_ascii=False)
        if token.kind == "raw":
            return json.dumps(token.text[1:-1], ensure_ascii=False)
        if token.kind == "number":
            return token.text
        if token.kind == "word" and token.text in ("true", "false", "nil"):
            return {"nil": "none"}.get(token.text, token.text)
        if token.kind == "variable":
            name, _, chain = token.text.partition(".")
            if name == "$":
                return self._field("." + chain if chain else ".", root=True)
            return _variable(name) + ("." + chain if chain else "")
        if token.kind == "field":
            value = self._field(token.text)
            if value.startswith("__method__") and "Unix" in value:  # methods without arguments: called at once
                return _method(value, [])
            return value
        if token.kind == "word":
            raise Untranslatable(f"the function {token.text} as an argument needs parentheses in Go too")
        raise Untranslatable(f"unexpected {token.text!r}")

    def _field(self, chain: str, *, root: bool = False) -> str:
        dot = None if root else self.dot()
        names = [n for n in chain.split(".") if n]
        if dot is None and names[:1] == ["Id"]:
            self.note("`.Id` is no field of Burrow's (its templates fail there): translated as ID, the incident's id")
            names[0] = "ID"
        if names and names[-1] == "String":  # StatusConstant.String(): statuses are names already
            names.pop()
        if names and names[-1] in ("Format", "Unix", "UnixNano"):
            return "__method__" + names.pop() + "|" + _join(dot, names)
        if dot is None and not names:
            raise Untranslatable("the whole data ({{.}}) at the top level has no counterpart")
        if len(names) >= 2 and names[-2] in ("Start", "End") and names[-1] in MISSING_OFFSET_FIELDS:
            raise Untranslatable(f"a partition's {names[-2]}.{names[-1]}: lagwatch's events carry offsets only")
        return _join(dot, names)


def _method(marker: str, args: list[str]) -> str:
    method, _, base = marker.removeprefix("__method__").partition("|")
    if method == "Format" and len(args) == 1:
        return f"formattimestamp({base}, {args[0]})"
    if method in ("Unix", "UnixNano") and not args:
        return f"({base} // 1000)" if method == "Unix" else f"({base} * 1000000)"
    raise Untranslatable(f"the method {method} with {len(args)} arguments")


def _function(name: str, args: list[str]) -> str:
    if name in UNSUPPORTED_WORDS:
        raise Untranslatable(f"the function {name} has no counterpart in lagwatch's templates")
    if name in BURROW_HELPERS or name == "formattimestamp":
        return f"{name}({', '.join(args)})"
    if name in COMPARISONS:
        return _comparison(name, args)
    if name in ("and", "or"):
        return "(" + f" {name} ".join(args) + ")"
    if name == "not" and len(args) == 1:
        return f"(not {args[0]})"
    if name == "len" and len(args) == 1:
        return f"({args[0]} | length)"
    if name == "index" and args:
        return args[0] + "".join(f"[{a}]" for a in args[1:])
    if name == "print":
        return " ~ ".join(f"({a})" for a in args) if args else '""'
    if name == "printf" and args:
        fmt = re.sub(r"%v", "%s", args[0])
        if re.search(r"%[^sdfgexX%0-9.+\- #]", json.loads(fmt)):
            raise Untranslatable(f"printf verbs other than %s %d %f %g %e %x: {args[0]}")
        return f"({fmt} | format({', '.join(args[1:])}))"
    if name == "urlquery":
        return f"({' ~ '.join(args)} | urlencode)"
    if name == "html":
        return f"({' ~ '.join(args)} | escape)"
    raise Untranslatable(f"the function {name}")


def _comparison(name: str, args: list[str]) -> str:
    if len(args) < 2:
        raise Untranslatable(f"{name} needs two arguments")
    left, rights = args[0], args[1:]
    if name != "eq" and len(rights) > 1:
        raise Untranslatable(f"{name} with more than two arguments")
    if left.endswith("Status") and all(re.fullmatch(r"\d+", r) for r in rights):  # statuses are names here
        codes = {int(r) for r in rights}
        if name in ("eq", "ne") and all(c < len(STATUS_NAMES) for c in codes):
            names = [STATUS_NAMES[c] for c in sorted(codes)]
            if len(names) == 1:
                return f'({left} {COMPARISONS[name]} "{names[0]}")'
            return f"({left} in {json.dumps(names)})"
        code = next(iter(codes))
        wanted = [s for i, s in enumerate(STATUS_NAMES) if ORDERINGS[name](i, code)]
        return f"({left} in {json.dumps(wanted)})"
    if len(rights) > 1:
        return "(" + " or ".join(f"{left} == {r}" for r in rights) + ")"
    return f"({left} {COMPARISONS[name]} {rights[0]})"


def _join(dot: str | None, names: list[str]) -> str:
    return ".".join(names if dot is None else [dot, *names])


def _variable(name: str) -> str:
    if name == "$":
        raise Untranslatable("$ alone (the whole data) has no counterpart")
    return "v_" + name[1:]


def _lex(body: str) -> list[Token]:
    tokens: list[Token] = []
    previous_end = -1
    for match in TOKEN.finditer(body):
        if match.lastgroup == "unreadable":
            raise Untranslatable(f"cannot read {body[match.start() : match.start() + 20]!r}")
        if match.lastgroup != "space":
            tokens.append(Token(match.lastgroup or "", match.group(), glued=match.start() == previous_end))
            previous_end = match.end()
    return tokens
