"""Structured evaluations: typed questions, their answers, and the evaluator protocol.

A structured evaluation asks a model typed questions about a candidate instead of chatting:

* :class:`YesNo`: the probability that the answer is yes;
* :class:`Choice`: a distribution over named options, the most likely one and a confidence;
* :class:`Score`: a distribution over the levels of a rubric (lowest first), the expected
  position on it as a fraction (0 = the lowest level, 1 = the highest), the nearest level and
  a confidence.

Confidence is the concentration of the distribution: 1 when all of it is on one option, 0 when
it is uniform (one minus the normalised entropy). It is not a measure of truth.

An *evaluator* (:class:`Evaluator`) sends one :class:`EvaluationRequest` to a provider, once,
with no retries of its own, and returns the raw answers with the usage (an
:class:`EvaluatorReply`), or raises :class:`~turnkit_django.exceptions.EvaluationError`. The
runtime (:mod:`turnkit_django.runtime.evaluations`) validates the answers strictly against the
questions (:func:`parse_answers`), persists attempts, retries and charges.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import ClassVar, Protocol, runtime_checkable

from ..base.serialization import JsonMapping, JsonObject, JsonValue
from ._http import member
from .protocol import Usage

_KEY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
#: How far a distribution's sum may be from 1 before it is malformed (it is then normalised).
SUM_TOLERANCE = 0.02


def _key(value: object, what: str) -> str:
    if not isinstance(value, str) or not _KEY.match(value):
        raise ValueError(f"{what} {value!r} must be 1-64 lowercase letters, digits or '_', "
                         "starting with a letter")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _labels(values: object, what: str) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence | Mapping):
        raise ValueError(f"{what} must be a list of at least two distinct strings, got "
                         f"{values!r}")
    labels = tuple(_key(v, f"{what}: the label") for v in values)
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise ValueError(f"{what} must be at least two distinct labels, got {list(labels)}")
    described = values.items() if isinstance(values, Mapping) else ()
    for label, description in described:
        if not isinstance(description, str):  # the request and the receipt hold it as text
            raise ValueError(f"{what}: the description of {label!r} must be a string, got "
                             f"{repr(description)[:40]}; describe it in words, or give the "
                             "labels as a list")
    return labels


@dataclass(frozen=True)
class YesNo:
    """Is the answer yes? Answered with the probability of yes."""

    key: str
    question: str
    kind: ClassVar[str] = "yes_no"

    def __post_init__(self) -> None:
        _key(self.key, "a question key")
        _text(self.question, f"question {self.key!r}")

    def as_json(self) -> JsonObject:
        return {"kind": self.kind, "key": self.key, "question": self.question}


class _Labelled:
    """A question answered with a distribution over labels (held in ``field``)."""

    key: str
    question: str
    kind: ClassVar[str]
    field: ClassVar[str]

    def __post_init__(self) -> None:
        _key(self.key, "a question key")
        _text(self.question, f"question {self.key!r}")
        _labels(getattr(self, self.field), f"the {self.field} of {self.key!r}")

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(getattr(self, self.field))

    def as_json(self) -> JsonObject:
        values = getattr(self, self.field)
        described: JsonObject = (dict(values) if isinstance(values, Mapping)
                                 else {v: "" for v in values})
        return {"kind": self.kind, "key": self.key, "question": self.question,
                self.field: described}


@dataclass(frozen=True)
class Choice(_Labelled):
    """Which option fits best? ``options`` are labels, or labels with descriptions."""

    key: str
    question: str
    options: Sequence[str] | Mapping[str, str]
    kind: ClassVar[str] = "choice"
    field: ClassVar[str] = "options"


@dataclass(frozen=True)
class Score(_Labelled):
    """Where on the rubric does it sit? ``rubric`` lists the levels from lowest to highest
    (labels, or labels with their legend)."""

    key: str
    question: str
    rubric: Sequence[str] | Mapping[str, str]
    kind: ClassVar[str] = "score"
    field: ClassVar[str] = "rubric"


Question = YesNo | Choice | Score


def check_questions(questions: object) -> tuple[Question, ...]:
    """Return ``questions`` as a tuple if they are a non-empty list with distinct keys."""
    if isinstance(questions, YesNo | Choice | Score):
        questions = [questions]
    if not isinstance(questions, Sequence) or not questions:
        raise ValueError("questions must be a non-empty list of YesNo, Choice or Score")
    for question in questions:
        if not isinstance(question, YesNo | Choice | Score):
            raise TypeError(f"a question must be YesNo, Choice or Score, got {question!r}")
    keys = [q.key for q in questions]
    if len(set(keys)) != len(keys):
        raise ValueError(f"question keys must be distinct, got {keys}")
    return tuple(questions)


# --------------------------------------------------------------------------- answers


def concentration(distribution: Mapping[str, float]) -> float:
    """1 minus the normalised entropy: 1 when certain, 0 when uniform."""
    n = len(distribution)
    entropy = -sum(p * math.log(p) for p in distribution.values() if p > 0)
    return round(max(0.0, 1.0 - entropy / math.log(n)), 6) if n > 1 else 1.0


@dataclass(frozen=True)
class YesNoAnswer:
    key: str
    probability: float
    kind: ClassVar[str] = "yes_no"

    @property
    def yes(self) -> bool:
        return self.probability >= 0.5

    def as_json(self) -> JsonObject:
        return {"kind": self.kind, "probability": self.probability}


@dataclass(frozen=True)
class ChoiceAnswer:
    key: str
    choice: str
    distribution: dict[str, float]
    confidence: float
    kind: ClassVar[str] = "choice"

    def as_json(self) -> JsonObject:
        return {"kind": self.kind, "choice": self.choice, "distribution": {**self.distribution},
                "confidence": self.confidence}


@dataclass(frozen=True)
class ScoreAnswer:
    key: str
    score: float
    level: str
    distribution: dict[str, float]
    confidence: float
    kind: ClassVar[str] = "score"

    def as_json(self) -> JsonObject:
        return {"kind": self.kind, "score": self.score, "level": self.level,
                "distribution": {**self.distribution}, "confidence": self.confidence}


Answer = YesNoAnswer | ChoiceAnswer | ScoreAnswer


def _probability(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0.0 <= float(value) <= 1.0) or math.isnan(float(value)):
        raise ValueError(f"{where} must be a probability between 0 and 1, got {value!r}")
    return float(value)


def _distribution(value: object, labels: tuple[str, ...], where: str) -> dict[str, float]:
    if not isinstance(value, Mapping) or set(value) != set(labels):
        shown = sorted(value) if isinstance(value, Mapping) else value
        raise ValueError(f"{where} must give a probability for exactly {list(labels)}, got "
                         f"{shown!r}")
    probabilities = {label: _probability(value[label], f"{where}[{label!r}]")
                     for label in labels}
    total = sum(probabilities.values())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"{where} must add up to 1, got {total:.4f}")
    return {label: round(p / total, 6) for label, p in probabilities.items()}


def _closed(value: object, keys: set[str], where: str) -> JsonMapping:
    if not isinstance(value, Mapping) or set(value) != keys:
        shown = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise ValueError(f"{where} must be an object with exactly {sorted(keys)}, got {shown}")
    return value


def parse_answers(questions: Sequence[Question], raw: object) -> dict[str, Answer]:
    """Validate an evaluator's raw answers strictly (closed objects, every question, valid
    probabilities); raise ValueError naming the first problem."""
    body = _closed(raw, {q.key for q in questions}, "the answers")
    answers: dict[str, Answer] = {}
    for question in questions:
        where = f"answer {question.key!r}"
        if isinstance(question, YesNo):
            entry = _closed(body[question.key], {"probability"}, where)
            answers[question.key] = YesNoAnswer(
                question.key, _probability(entry["probability"], f"{where}.probability"))
            continue
        entry = _closed(body[question.key], {"distribution"}, where)
        labels = question.labels
        distribution = _distribution(entry["distribution"], labels, f"{where}.distribution")
        confidence = concentration(distribution)
        best = max(labels, key=lambda label: distribution[label])
        if isinstance(question, Choice):
            answers[question.key] = ChoiceAnswer(question.key, best, distribution, confidence)
        else:
            position = sum(i * distribution[label] for i, label in enumerate(labels))
            score = round(position / (len(labels) - 1), 6)
            level = labels[min(len(labels) - 1, round(position))]
            answers[question.key] = ScoreAnswer(question.key, score, level, distribution,
                                                confidence)
    return answers


def _stored_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"a stored answer holds {value!r} where a number belongs")
    return float(value)


def _stored_distribution(value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise TypeError(f"a stored answer holds {value!r} where a distribution belongs")
    return {str(label): _stored_number(p) for label, p in value.items()}


def answer_from_json(key: str, data: JsonMapping) -> Answer:
    """An answer as stored in a receipt."""
    kind = data.get("kind")
    if kind == "yes_no":
        return YesNoAnswer(key, _stored_number(data["probability"]))
    if kind == "choice":
        return ChoiceAnswer(key, str(data["choice"]), _stored_distribution(data["distribution"]),
                            _stored_number(data["confidence"]))
    return ScoreAnswer(key, _stored_number(data["score"]), str(data["level"]),
                       _stored_distribution(data["distribution"]),
                       _stored_number(data["confidence"]))


def answer_schema(questions: Sequence[Question]) -> JsonObject:
    """A closed JSON schema of the raw answers (every property required, nothing extra), the
    form strict structured-output modes accept."""

    def closed(properties: JsonObject) -> JsonObject:
        return {"type": "object", "properties": properties, "required": [*properties],
                "additionalProperties": False}

    properties: JsonObject = {}
    for question in questions:
        if isinstance(question, YesNo):
            properties[question.key] = closed({"probability": {"type": "number"}})
        else:
            labels: JsonObject = {label: {"type": "number"} for label in question.labels}
            properties[question.key] = closed({"distribution": closed(labels)})
    return closed(properties)


@dataclass(frozen=True)
class Evaluation:
    """The answers of a structured evaluation, as its receipt records them.

    ``evaluation["safe"]`` is the answer to the question with key ``safe``. ``reused`` says the
    receipt was already complete (no request was made, nothing was charged). ``cost`` is None
    when an attempt could not be priced.
    """

    receipt_id: str
    purpose: str
    model: str
    answers: Mapping[str, Answer]
    usage: Usage
    cost: Decimal | None
    attempts: int
    reused: bool = False

    def __getitem__(self, key: str) -> Answer:
        return self.answers[key]

    @classmethod
    def from_receipt(cls, receipt: JsonMapping, *, reused: bool) -> Evaluation:
        result = member(receipt, "result")
        stored = member(result, "answers")
        answers = {key: answer_from_json(key, member(stored, key)) for key in stored}
        cost, attempts = receipt.get("cost"), receipt.get("attempts")
        return cls(str(receipt["id"]), str(receipt.get("purpose") or ""),
                   str(result.get("model") or receipt.get("model") or ""), answers,
                   Usage.from_dict(receipt.get("usage")),
                   None if cost is None else Decimal(str(cost)),
                   len(attempts) if isinstance(attempts, list) else 0, reused)


# --------------------------------------------------------------------------- the protocol


@dataclass(frozen=True)
class EvaluationRequest:
    """One dispatch of an evaluation: what the evaluator sends, once."""

    model: str
    purpose: str
    questions: tuple[Question, ...]
    candidate: JsonValue
    policy_version: str = ""
    timeout: float = 30.0
    #: The receipt id and the attempt number (for the provider's logs; not an idempotency key).
    metadata: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluatorReply:
    """What the provider answered: the raw answers, the usage, the model that answered."""

    answers: object
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    http_status: int | None = None
    #: The cost the provider reported, in USD, when it reports one.
    reported_cost: str | None = None
    #: Whether the provider reported the usage: a reply without it leaves the cost unknown
    #: (its zero tokens were never counted), unless it reported a cost.
    usage_reported: bool = True


@runtime_checkable
class Evaluator(Protocol):
    """Sends evaluation requests to a provider.

    ``identity`` names the provider side of a receipt (endpoint, account label, schema
    version; never a secret): a change of it makes identical questions a new evaluation.
    """

    identity: str

    def evaluate(self, request: EvaluationRequest) -> EvaluatorReply:
        """Make one request (no retries); raise EvaluationError on failure."""
        ...


__all__ = ["SUM_TOLERANCE", "Answer", "Choice", "ChoiceAnswer", "Evaluation", "EvaluationRequest",
           "Evaluator", "EvaluatorReply", "Question", "Score", "ScoreAnswer", "YesNo",
           "YesNoAnswer", "answer_from_json", "answer_schema", "check_questions",
           "concentration", "parse_answers"]
