"""One validation style for every construct and the planner.

Collect every problem of one call, then raise once, so a user fixes all their props in one round:

    with Checks("QueuedInference", scope=self) as check:
        check.integer("batch_size", batch_size, minimum=1, maximum=10, fix="...")
        if check.integer("max_concurrency", cap, minimum=2, maximum=1000):
            check.rule(reserved is None or reserved >= cap, "reserved_concurrency=... is below ...",
                       id="reserved_concurrency.below-max-concurrency")

Each message names the prop, the value, the rule and the fix. Each problem carries a stable id,
`<Owner>.<prop>.<rule>`: the generic checks derive it from the prop and the kind of rule broken
(`QueuedInference.batch_size.maximum`), a custom rule()/fail() names it (`id=`, written literally
at the call site, so searching the part after the owner finds the rule). With `scope=` the error
also names the construct's path (aws-cdk-lib's ValidationError does the same), so of two
QueuedInference constructs a user sees which one is wrong. Every warning the library emits goes
through warn(), as a `genai-pacer:<id>` annotation a user can acknowledge. Unresolved CDK tokens are skipped
(their value is known only at deploy time). NaN and infinity are refused before they reach jsii,
whose process they would kill. Booleans are never numbers. This module imports no CDK at load
time, so the pure-Python planner can use it too.
"""

from __future__ import annotations

import contextlib
import enum
import math
import re
import struct
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

_T = TypeVar("_T")

__all__ = [
    "Checks", "Default", "InvalidPropsError", "Problem", "WARNING_PREFIX", "deploy_time_duration", "duration_in",
    "fit_concurrency", "in_unit", "is_token", "kind_of", "resolved", "seconds_text", "shown", "token_kind",
    "token_of_kind", "warn", "warn_above_reservable_concurrency",
]

#: Lambda's concurrent executions per account and Region: 1,000 by default (new accounts get less), an
#: adjustable quota that "can be increased up to tens of thousands":
#: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
LAMBDA_DEFAULT_ACCOUNT_CONCURRENCY = 1_000
#: Lambda keeps 100 of it unreserved: "You can reserve up to the Unreserved account concurrency value
#: that is shown, minus 100": https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html
LAMBDA_UNRESERVED_MINIMUM = 100
#: The most a function's reserved concurrency can be in a default account. Neither the API
#: (PutFunctionConcurrency) nor AWS::Lambda::Function's schema has a maximum (tests/test_aws_facts_bounds.py):
#: the bound is the account's adjustable quota, so a value above it is warned, never refused.
LAMBDA_DEFAULT_RESERVABLE_CONCURRENCY = LAMBDA_DEFAULT_ACCOUNT_CONCURRENCY - LAMBDA_UNRESERVED_MINIMUM


class Problem(str):
    """One problem of an InvalidPropsError: its text (what a user reads, and what `str` comparisons and
    `in` see, so code reading problems as strings keeps working) and `.id`, the stable id of the rule
    it breaks (`QueuedInference.batch_size.maximum`): match on the id, never on the wording."""

    id: str

    def __new__(cls, text: str, id: str) -> Problem:
        problem = super().__new__(cls, text)
        problem.id = id
        return problem

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (pytest-xdist, multiprocessing) with its id
        return (Problem, (str(self), self.id))


class InvalidPropsError(ValueError, TypeError):
    """One or more props are wrong. A ValueError (and a TypeError, for wrong types) listing each problem,
    each with the id of the rule it breaks, and `path`, the construct's path when a construct raised it.

    `problems` are Problem strings (`.id` on each), `ids` their ids in the same order. The message is
    `Owner at Stack/Construct: [id] text`, or with several problems one `- [id] text` line each.
    """

    def __init__(self, owner: str, problems: Sequence[str], path: str | None = None) -> None:
        self.owner = owner
        self.path = path
        # Checks always passes Problems; a plain string (an error built by hand) gets the owner's "unnamed" id.
        self.problems = [p if isinstance(p, Problem) else Problem(p, f"{_subject(owner)}.unnamed") for p in problems]
        self.ids = [p.id for p in self.problems]
        where = f"{owner} at {path}" if path else owner
        if len(self.problems) == 1:
            text = f"{where}: [{self.ids[0]}] {self.problems[0]}"
        else:
            text = f"{where}: {len(self.problems)} problems:\n" + "\n".join(f"- [{p.id}] {p}" for p in self.problems)
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.owner, self.problems, self.path))


#: Every warning the library emits is an annotation `genai-pacer:<id>` (warn()).
WARNING_PREFIX = "genai-pacer:"


def warn(scope: Any, id: str, message: str) -> None:
    """The one way the library warns: a `genai-pacer:<id>` warning on `scope`, shown by `cdk synth` with
    the construct's path and the id, which a user who accepts it acknowledges with
    `cdk.Annotations.of(scope).acknowledge_warning("genai-pacer:<id>")`. Nothing is acknowledged here."""
    import aws_cdk as cdk

    cdk.Annotations.of(scope).add_warning_v2(WARNING_PREFIX + id, message)


def _subject(owner: str) -> str:
    """The id prefix of an owner: its leading name ("QueuedInference", "TpmQuota.from_plan",
    "sustainable_rate"), without the free text some owners add after it."""
    found = re.match(r"[A-Za-z_][\w.]*[\w]", owner)
    return found.group(0) if found else "genai_pacer"


def _prop(name: str) -> str:
    """A prop's name as an id shows it: list indices and keys dropped (`alarm_actions[2]` -> `alarm_actions`)."""
    return re.sub(r"\[[^\]]*\]", "", name).strip() or "value"


def is_token(value: Any) -> bool:
    """True for an unresolved CDK token (a deploy-time value), decided without calling into jsii.

    aws-cdk-lib encodes a number token as a double whose top 16 bits are 0xFBFF and a string token
    as text containing "${Token[" (list tokens "#{Token["), so plain numbers and strings are
    recognized here: jsii is not thread-safe, and the pure-Python planner runs in threads (the
    benchmark) while a synthesis may hold the jsii process. Only objects that carry their own
    `is_unresolved` (Duration, Size) ask jsii. Never loads the CDK by itself.
    """
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value) and struct.pack(">d", value)[:2] == _NUMBER_TOKEN_MARKER
    if isinstance(value, str):
        return "${Token[" in value or "#{Token[" in value
    if isinstance(value, int):
        return False  # jsii hands number tokens to Python as floats
    if "aws_cdk" in sys.modules and callable(getattr(value, "is_unresolved", None)):
        try:
            return bool(value.is_unresolved())
        except Exception:  # not a CDK value after all
            return False
    return False


class Default:
    """A prop default that help() shows as the code that builds it (`answer_ttl=cdk.Duration.days(30)`),
    where a CDK object as the default would show as '<aws_cdk.Duration object at 0x...>'. The value is
    built when a construct is (jsii objects cannot be built at import time without starting jsii)."""

    def __init__(self, code: str, build: Callable[[], Any]) -> None:
        self.code, self._build = code, build

    def __repr__(self) -> str:
        return self.code

    def build(self) -> Any:
        return self._build()


def resolved(value: _T | Default) -> _T:
    """A prop's value with a Default built: what a construct works with."""
    return value.build() if isinstance(value, Default) else value


def token_kind(value: Any) -> str | None:
    """The kind of a deploy-time value ("number", "string", "list", "Duration"), or None for a value
    known at synth. aws-cdk-lib hands a CfnParameter to Python as a float (value_as_number), a str
    (value_as_string), a list of one encoded str (value_as_list) or a Duration built from a number."""
    if isinstance(value, list | tuple):
        return "list" if any(isinstance(item, str) and is_token(item) for item in value) else None
    if not is_token(value):
        return None
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "list" if "#{Token[" in value else "string"
    return type(value).__name__  # Duration, Size


def deploy_time_duration(value: Any) -> bool:
    """A cdk.Duration known only at deploy time (e.g. cdk.Duration.seconds(parameter.value_as_number))."""
    return callable(getattr(value, "to_seconds", None)) and is_token(value)


def shown(value: Any) -> str:
    """A number as a description or expression shows it: '20', or for a deploy-time number the
    reference CloudFormation fills in (never the token's float encoding)."""
    if is_token(value):
        import aws_cdk as cdk

        return str(cdk.Tokenization.stringify_number(value))
    return f"{value:g}"


_CONVERSIONS = {"seconds": "to_seconds", "minutes": "to_minutes", "days": "to_days", "millis": "to_milliseconds"}


def duration_in(check: Checks, name: str, duration: Any, unit: str, *, why: str) -> Any:
    """`duration` as a number of `unit` ("seconds", "minutes", "days" or "millis"), or None after a failure.

    A literal converts; a deploy-time Duration converts only from the same unit, since aws-cdk-lib
    cannot scale a token (it reaches the template as the parameter itself). `why` says what the
    number is for, so the refusal names the prop, the reason and the fix."""
    convert = getattr(duration, _CONVERSIONS[unit])
    if not duration.is_unresolved():
        return convert(integral=False)
    try:
        return convert()
    except Exception:  # aws-cdk-lib: "Duration must be specified as 'Duration.<unit>()' here"
        check.fail(
            f"{name} is a deploy-time Duration in another unit, but {why} in {unit}: build it with "
            f"cdk.Duration.{unit}(parameter.value_as_number)",
            id=f"{_prop(name)}.duration-unit",
        )
        return None


def in_unit(check: Checks, name: str, value: Any, unit: str, *, why: str) -> bool:
    """False (the problem recorded) for a deploy-time Duration not built in `unit`; True for anything
    else (a literal, None or a wrong type are judged by the prop's own checks)."""
    return not deploy_time_duration(value) or duration_in(check, name, value, unit, why=why) is not None


def seconds_text(duration: Any) -> str:
    """Whole seconds as a handler's environment takes them ("" for None). A deploy-time Duration
    (built with Duration.seconds; duration_in refuses any other unit) stays a reference that
    CloudFormation resolves, never int() of the token's number encoding (a 290-digit garble)."""
    if duration is None:
        return ""
    if duration.is_unresolved():
        import aws_cdk as cdk

        return str(cdk.Token.as_string(duration.to_seconds()))
    return str(int(duration.to_seconds()))


def token_of_kind(check: Checks, name: str, value: Any, expected: str, *, fix: str) -> bool:
    """True when `value` is a deploy-time value of the `expected` kind (it may pass to CloudFormation);
    a deploy-time value of another kind is refused, naming the prop; False for a literal."""
    kind = token_kind(value)
    if kind is None:
        return False
    if kind == expected:
        return True
    check.fail(f"{name} is a deploy-time {kind}, but it takes a {expected}: {fix}", id=f"{_prop(name)}.token-kind")
    return False


#: The top 16 bits of every number token aws-cdk-lib encodes (core/lib/private/encoding.ts).
_NUMBER_TOKEN_MARKER = b"\xfb\xff"


def _num(value: float) -> str:
    """A limit as people write it: 99,999,999 or 0.5."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _show(value: Any) -> str:
    """A value as a message shows it: enums and CDK objects by name, a deploy-time value by its kind
    (a number token's value is a meaningless encoding), never as '<... at 0x...>'."""
    kind = token_kind(value)
    if kind is not None:
        return f"<a deploy-time {kind}>"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if callable(getattr(value, "to_human_string", None)):  # cdk.Duration, cdk.Size
        with contextlib.suppress(Exception):  # an unresolved token has no human string
            return str(value.to_human_string())
    text = repr(value)
    if text.startswith("<") and " at 0x" in text:
        return f"<{_type_name(value)}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(value: Any) -> str:
    name = type(value).__name__
    return "imported resource" if name == "InterfaceDynamicProxy" else name


def kind_of(value: Any) -> str:
    """'an int', 'a str', 'a Duration': what a wrong value is, with its article."""
    name = _type_name(value)
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _seconds(duration: Any) -> float:
    return float(duration.to_seconds(integral=False))


def _human(duration: Any) -> str:
    return str(duration.to_human_string())


class Checks:
    """Collects the problems of one construct's (or function's) props; raises InvalidPropsError once.

    `owner` names what is checked ("QueuedInference", "TokenProfile", "sustainable_rate") and prefixes
    every id; `scope`, the construct checked (or the one whose method is), adds its path to the error.
    A construct that must check its props before its own node exists (a subclass of an aws-cdk-lib
    construct, whose props go to super().__init__) passes its parent as `scope` and its id as `child`.
    """

    def __init__(self, owner: str, *, scope: Any = None, child: str | None = None) -> None:
        self.owner = owner
        self.scope = scope
        self.child = child
        self.problems: list[Problem] = []
        self._refused: set[str] = set()  # props whose value refuse() reported: no generic check repeats it

    @property
    def path(self) -> str | None:
        node = getattr(self.scope, "node", None)
        if node is None:
            return None
        path = str(node.path)
        return path if self.child is None else f"{path}/{self.child}" if path else self.child

    def __enter__(self) -> Checks:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.raise_if_any()

    def raise_if_any(self) -> None:
        if self.problems:
            raise InvalidPropsError(self.owner, self.problems, self.path)

    def errors(self) -> list[str]:
        """The problems as `[id] text` lines without raising: what a node.add_validation validator returns,
        for a rule whose values are known only after construction (aws-cdk-lib adds the path itself)."""
        return [f"[{p.id}] {p}" for p in self.problems]

    def fail(self, message: str, *, id: str) -> bool:
        """Record a problem of a custom rule. `id` is the rule's, `<prop>.<rule>` in kebab case, unique in
        the package (tests/test_layout.py checks it); the owner is put in front of it."""
        self.problems.append(Problem(message, f"{_subject(self.owner)}.{id}"))
        return False

    def refuse(self, name: str, message: str, *, id: str) -> bool:
        """Record the one problem of prop `name`'s value, as fail() does, and leave it at that: the generic
        checks of `name` run after it (number, text, one_of, duration, ...) report nothing more about it.
        For a construct whose own rule says best what is wrong with a value (e.g. a deploy-time value
        where only a value known at synth will do), so a user reads one problem per wrong prop."""
        self._refused.add(name)
        return self.fail(message, id=id)

    def rule(self, ok: bool, message: str, *, id: str) -> bool:
        """A relation between props (or any other rule): `message` says what is wrong and the fix; `id`
        names the rule as fail() does."""
        return True if ok else self.fail(message, id=id)

    def _broke(self, name: str, kind: str, message: str) -> bool:
        """A generic check's problem: its id is `<owner>.<prop>.<kind>` (required, type, token-kind,
        too-large, not-finite, not-integer, above, minimum, maximum, choice, empty, too-long).

        A deploy-time value of the wrong kind is one problem: a construct that named it first
        (token_of_kind, with its own fix) is not told again by the number or string check after it."""
        id = f"{_prop(name)}.{kind}"
        if name in self._refused:
            return False
        if kind == "token-kind" and f"{_subject(self.owner)}.{id}" in (p.id for p in self.problems):
            return False
        return self.fail(message, id=id)

    def number(
        self,
        name: str,
        value: Any,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        above: float | None = None,
        integer: bool = False,
        optional: bool = False,
        fix: str = "",
    ) -> bool:
        """A finite number (an int where `integer`) within [minimum, maximum] and > `above`.

        Returns True only when the value is a concrete, valid number that further rules may use.
        """
        tail = f"; {fix}" if fix else ""
        kind = "an integer" if integer else "a number"
        if value is None:
            return False if optional else self._broke(name, "required", f"{name} is required: pass {kind}{tail}")
        if is_token(value):  # a number token reaches CloudFormation as a Ref; any other kind is wrong
            if isinstance(value, float):
                return False
            return self._broke(name, "token-kind",
                f"{name} is a deploy-time {token_kind(value)}; pass {kind} or a number token "
                f"(CfnParameter(type='Number').value_as_number){tail}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            return self._broke(name, "type", f"{name}={_show(value)} is {kind_of(value)}; pass {kind}{tail}")
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an int beyond any float
            return self._broke(name, "too-large", f"{name}={_show(value)} is too large for any service limit; pass a realistic {kind[3:] if integer else 'number'}{tail}")
        if not finite:
            return self._broke(name, "not-finite", f"{name}={value!r} is not a finite number; pass {kind}{tail}")
        if integer and value != int(value):
            return self._broke(name, "not-integer", f"{name}={value!r} is not a whole number; pass an integer{tail}")
        if above is not None and not value > above:
            return self._broke(name, "above", f"{name}={value!r} must be greater than {_num(above)}{tail}")
        if minimum is not None and value < minimum:
            return self._broke(name, "minimum", f"{name}={value!r} is below the minimum of {_num(minimum)}{tail}")
        if maximum is not None and value > maximum:
            return self._broke(name, "maximum", f"{name}={value!r} exceeds the maximum of {_num(maximum)}{tail}")
        return True

    def integer(self, name: str, value: Any, **limits: Any) -> bool:
        return self.number(name, value, integer=True, **limits)

    def instance(self, name: str, value: Any, types: type | tuple[type, ...], expected: str, *, optional: bool = False) -> bool:
        """`value` is one of `types`; `expected` says what to pass, e.g. "a BedrockModel (BedrockModel.from_id(...))"."""
        if value is None:
            return False if optional else self._broke(name, "required", f"{name} is required: pass {expected}")
        bool_refused = isinstance(value, bool) and bool not in _as_tuple(types)
        if not bool_refused and any(_is_instance(value, t) for t in _as_tuple(types)):
            return True
        return self._broke(name, "type", f"{name}={_show(value)} is {kind_of(value)}; pass {expected}")

    def duration(
        self,
        name: str,
        value: Any,
        *,
        minimum: Any = None,
        maximum: Any = None,
        optional: bool = False,
        fix: str = "",
    ) -> bool:
        """A cdk.Duration within [minimum, maximum] (Durations too); tokens skipped."""
        import aws_cdk as cdk

        tail = f"; {fix}" if fix else ""
        if value is None:
            return False if optional else self._broke(name, "required", f"{name} is required: pass a cdk.Duration{tail}")
        if not isinstance(value, cdk.Duration):
            if is_token(value):
                return self._broke(name, "token-kind",
                    f"{name} is a deploy-time {token_kind(value)}; pass a cdk.Duration, for a deploy-time one "
                    f"cdk.Duration.seconds(parameter.value_as_number){tail}"
                )
            return self._broke(name, "type",
                f"{name}={_show(value)} is {kind_of(value)}; pass a cdk.Duration such as "
                f"cdk.Duration.seconds({_suggested_seconds(value, minimum, maximum)}){tail}"
            )
        if value.is_unresolved():
            return False
        seconds = _seconds(value)
        if minimum is not None and seconds < _seconds(minimum):
            return self._broke(name, "minimum", f"{name}={_human(value)} is below the minimum of {_human(minimum)}{tail}")
        if maximum is not None and seconds > _seconds(maximum):
            return self._broke(name, "maximum", f"{name}={_human(value)} exceeds the maximum of {_human(maximum)}{tail}")
        return True

    def one_of(self, name: str, value: Any, choices: Iterable[Any], *, fix: str = "") -> bool:
        options = list(choices)
        if is_token(value):
            return False
        if any(value is c or (type(value) is type(c) and value == c) for c in options):
            return True
        tail = f"; {fix}" if fix else ""
        return self._broke(name, "choice", f"{name}={_show(value)} must be one of {', '.join(_show(c) for c in options)}{tail}")

    def text(self, name: str, value: Any, *, optional: bool = False, max_length: int | None = None, fix: str = "") -> bool:
        """A non-empty string (tokens skipped)."""
        tail = f"; {fix}" if fix else ""
        if value is None:
            return False if optional else self._broke(name, "required", f"{name} is required: pass a non-empty string{tail}")
        if not isinstance(value, str):
            return self._broke(name, "type", f"{name}={_show(value)} is {kind_of(value)}; pass a string{tail}")
        if is_token(value):
            return False
        if not value.strip():
            return self._broke(name, "empty", f"{name}={value!r} is empty; pass a non-empty string{tail}")
        if max_length is not None and len(value) > max_length:
            return self._broke(name, "too-long", f"{name} has {len(value)} characters; at most {max_length} are allowed{tail}")
        return True

    def alarm_actions(self, name: str, actions: Any) -> bool:
        """A list of CloudWatch alarm actions. Each is added to the alarms at synth, so a deploy-time
        list cannot be one; a deploy-time topic ARN can, inside an action."""
        from aws_cdk import aws_cloudwatch as cloudwatch

        kind = token_kind(actions)
        if kind is not None:
            return self._broke(name, "token-kind",
                f"{name} is a deploy-time {kind}; pass a list of alarm actions, for a deploy-time topic "
                "[cloudwatch_actions.SnsAction(sns.Topic.from_topic_arn(scope, 'Alarms', parameter.value_as_string))]"
            )
        return self.each(name, actions, lambda n, v: self.instance(
            n, v, cloudwatch.IAlarmAction, "an alarm action such as cloudwatch_actions.SnsAction(topic)"))

    def each(self, name: str, values: Any, check: Callable[[str, Any], bool]) -> bool:
        """Apply `check(item_name, item)` to each item of a list or tuple."""
        if isinstance(values, str) or not isinstance(values, list | tuple):
            return self._broke(name, "type", f"{name}={_show(values)} is {kind_of(values)}; pass a list")
        results = [check(f"{name}[{i}]", item) for i, item in enumerate(values)]
        return all(results)


def _suggested_seconds(value: Any, minimum: Any, maximum: Any) -> str:
    """The seconds a Duration suggestion names: the number given when it fits the limits, else the
    nearest limit (30 s without limits), so the suggested fix is one the check accepts."""
    given = value if isinstance(value, int | float) and not isinstance(value, bool) else 30
    try:
        seconds = float(given) if math.isfinite(given) else 30.0
    except OverflowError:
        seconds = 30.0
    if minimum is not None:
        seconds = max(seconds, _seconds(minimum))
    if maximum is not None:
        seconds = min(seconds, _seconds(maximum))
    return str(int(seconds)) if seconds.is_integer() else f"{seconds:g}"  # Python, not prose: no commas


def _is_instance(value: Any, kind: type) -> bool:
    """isinstance, also for jsii interfaces (IBucket, IRole...), which are Protocols isinstance refuses."""
    if not getattr(kind, "_is_protocol", False) or getattr(kind, "_is_runtime_protocol", False):
        return isinstance(value, kind)
    if kind in _jsii_interfaces(value):
        return True
    proxy = getattr(kind, "__jsii_proxy_class__", None)  # an object jsii returned typed as the interface
    return proxy is not None and any(isinstance(obj, proxy()) for obj in [value, *getattr(value, "_delegates", ())])


def _jsii_interfaces(value: Any) -> set[type]:
    """Every jsii interface `value` implements, inherited ones included."""
    objects = [value, *getattr(value, "_delegates", ())]  # an imported resource is a dynamic proxy
    found: set[type] = set()
    for obj in objects:
        for cls in type(obj).__mro__:
            for iface in getattr(cls, "__jsii_ifaces__", None) or ():
                found.update(getattr(iface, "__mro__", (iface,)))
    return found


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def fit_concurrency(
    check: Checks,
    scope: Any,
    name: str,
    value: Any,
    *,
    minimum: int,
    maximum: int | None,
    limit: str,
    fix: str = "size it with genai_pacer.planning.sustainable_rate(...)",
) -> int | None:
    """The concurrency cap a construct uses for `value`: an int as given, or a RatePlan fitted to [minimum, maximum].

    A plan above the construct's maximum (None: the construct has none of its own, e.g. a function's
    reserved concurrency, bounded only by the account) is clamped, with a warning that the rest of
    the quota is unused. A plan below the minimum is refused: raising the cap would overdraw the quota the plan
    came from. "Below" reads the calls in flight the plan sustains (its rate x call duration), not
    its max_concurrency, which never rounds below 1: a plan of 0.5 calls is below an inline Map's 1.
    An int outside the range is refused. Returns None when the value is invalid or a token.

    A plan is also recorded on `scope` as `scope.concurrency_plan`: a construct holds the plan it was
    given, and that is how ModelQuota tells which construct holds which share, whatever their names.
    """
    plan_cap = getattr(value, "max_concurrency", None)
    if plan_cap is not None and type(value).__name__ == "RatePlan":
        if scope is not None:
            scope.concurrency_plan = value
        if maximum is not None and plan_cap > maximum:
            warn(
                scope,
                f"{_prop(name).replace('_', '-')}-clamped",  # kebab-case, as every warning id
                f"{name}: the plan sustains {plan_cap} calls at once but {limit} allows at most {maximum}; "
                f"{maximum} is used and the rest of the quota stays unused",
            )
            return maximum
        # The calls in flight the rate sustains; rounded, so a plan of exactly n calls is not 0.999... below n.
        sustained = min(plan_cap, round(value.requests_per_minute / 60 * value.call_seconds, 9))
        if sustained < 1:
            fix = ("no construct runs less than one call at a time: give the plan at least "
                   "planning.one_call_tpm(profile, call_seconds) TPM")
        else:
            fix = f"give the plan more quota or use a construct that allows {plan_cap}"
        ok = check.rule(
            sustained >= minimum,
            f"{name}: the plan sustains {sustained:g} calls at once ({value.requests_per_minute:.1f} requests per "
            f"minute), below {limit}'s minimum of {minimum}; raising the cap would overdraw the quota the plan "
            f"came from: {fix}",
            id=f"{_prop(name)}.plan-below-minimum",
        )
        return plan_cap if ok else None
    allowed = f"at least {minimum}" if maximum is None else f"{minimum}..{maximum}"
    if check.integer(name, value, minimum=minimum, maximum=maximum, fix=f"{limit} allows {allowed}; {fix}"):
        return int(value)
    return value if is_token(value) else None


def warn_above_reservable_concurrency(scope: Any, name: str, value: Any) -> None:
    """Warn when a function's reserved concurrency is above what a default account can reserve (900).

    Above it the deployment fails unless the account's concurrency quota was raised; since it can be
    raised, the value is not refused. Deploy-time values are skipped (they reach CloudFormation as they are).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= LAMBDA_DEFAULT_RESERVABLE_CONCURRENCY:
        return
    warn(
        scope,
        "reserved-concurrency-quota",
        f"{name}={value:,} is above the {LAMBDA_DEFAULT_RESERVABLE_CONCURRENCY:,} a default account can reserve: "
        f"Lambda's concurrent executions quota is {LAMBDA_DEFAULT_ACCOUNT_CONCURRENCY:,} per Region by default (less "
        f"for new accounts) and {LAMBDA_UNRESERVED_MINIMUM} of it stay unreserved, so the deployment fails unless "
        f"the account's quota is at least {value + LAMBDA_UNRESERVED_MINIMUM:,}; check AccountLimit in `aws lambda "
        "get-account-settings` and request a higher 'Concurrent executions' quota for AWS Lambda in Service Quotas "
        "(https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html)",
    )
