"""Request bodies of the HTTP contract, validated by pydantic (and described by them in the
OpenAPI schema). Unknown fields are ignored, as OpenAI clients send many we do not use
(user, logprobs, presence_penalty, ...); fields we do use are strict: a string where a
number belongs, a bool for an integer, NaN or infinity are 400s, never coerced. The one
exception is slo.tpot_ms (and slo.ttft_ms), which takes "30ms" as the headers and
--slo-classes do (slo_value.py).

Every string a body carries, in any field and at any depth, must be Unicode text. JSON may
escape half a surrogate pair alone (backslash, ``ud800``); it decodes to a lone surrogate,
which a Python str holds but no encoder (the tokenizer's, or our own JSON answer's) can
write. It is refused here, once, for every field of every route, instead of failing
wherever the string goes next."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt,
                      StrictStr, ValidationError, WithJsonSchema, WrapValidator,
                      field_validator, model_validator)

from adaserve.server.slo_value import FORMS, parse_tpot_ms, parse_ttft_ms

Temperature = Annotated[float, Field(strict=True, ge=0.0, le=2.0)]
TopP = Annotated[float, Field(strict=True, gt=0.0, le=1.0)]
TopK = Annotated[StrictInt, Field(ge=-1, lt=1 << 31)]  # -1 and 0: off (SGLang: -1, us: 0)
PositiveInt = Annotated[StrictInt, Field(ge=1)]


def _one_error(what: str) -> WrapValidator:
    """A union's failure as one error on the field itself: pydantic reports each member
    apart, at locations such as ``prompt.list[int]``, which name no field a client sent."""
    def check(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(f"must be {what}, got {type(value).__name__}") from None
    return WrapValidator(check)


Stop = Annotated[StrictStr | list[StrictStr] | None, _one_error("text or a list of texts")]


def _ms(parse: Any, param: str, what: str) -> Any:
    """A body's SLO in milliseconds: the same parser as the headers and the class flag
    (slo_value.py), naming ``param`` when it refuses."""
    return Annotated[float, BeforeValidator(lambda v: parse(v, param)),
                     WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string"}],
                                     "description": f"{what} in milliseconds: {FORMS}"})]


TpotMs = _ms(parse_tpot_ms, "slo.tpot_ms", "TPOT SLO (time per output token after the first)")
TtftMs = _ms(parse_ttft_ms, "slo.ttft_ms", "TTFT SLO (time to the first token), an objective "
             "of its own beside tpot_ms or class; without it, the class's default (GET "
             "/server_info)")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _unicode_text(cls, value: Any) -> Any:
        _check_text(value)
        return value


def _check_text(value: Any) -> None:
    """ValueError if a string in ``value`` (a field's value: str, list, dict; nested bodies
    check themselves) cannot be written as UTF-8. A loop, not recursion: a dict field may
    nest as deep as the JSON decoder allows."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"the text holds a lone UTF-16 surrogate (U+{ord(v[e.start]):04X})"
                                 f" at character {e.start}, which is not Unicode text; escape "
                                 "a character outside the BMP as a pair (\\ud83d\\ude00)") from None
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
        elif isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())


class SLOField(_Body):
    """The request's TPOT SLO, a number of milliseconds or a class name, not both; and its
    TTFT SLO in milliseconds, with either."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    tpot_ms: TpotMs | None = None
    class_: StrictStr | None = Field(None, alias="class",
                                     description="an SLO class of this server (/server_info)")
    ttft_ms: TtftMs | None = None

    @model_validator(mode="after")
    def _one(self) -> SLOField:
        if self.tpot_ms is not None and self.class_ is not None:
            raise ValueError("give tpot_ms or class, not both")
        return self

    def as_mapping(self) -> dict:
        return {"tpot_ms": self.tpot_ms, "class": self.class_, "ttft_ms": self.ttft_ms}


class StreamOptions(_Body):
    include_usage: StrictBool = False


# The fields whose rules are the HTTP contract on both backends (DESIGN.md): the SLO, in
# the body's slo object or SGLang's custom_params, and the output length. The embedded
# server's request bodies inherit them; the SGLang plugin checks SGLang's request bodies
# against these very models (adaserve/sglang/contract.py), so one request gets one
# answer from either server.

CustomParams = Annotated[dict | None, Field(
    None, description="SGLang's per-request parameters; tpot_slo_ms / slo_class give the "
    "SLO (after the slo object, before the headers), other keys are SGLang's")]


class SamplingContract(_Body):
    """The sampling fields whose ranges are the contract on both backends' OpenAI routes."""

    temperature: Temperature = 1.0
    top_p: TopP = 1.0


class ChatContract(SamplingContract):
    # a list of message objects; what a message may hold is each backend's (the embedded
    # server takes text, SGLang images and tools too)
    messages: list[dict] = Field(..., min_length=1)
    max_tokens: PositiveInt | None = Field(None, description="output tokens at most")
    max_completion_tokens: PositiveInt | None = None
    slo: SLOField | None = Field(None, description="per-request SLO; custom_params, then "
                                 "headers X-SLO-TPOT-MS / X-SLO-Class / X-SLO-TTFT-MS when "
                                 "absent")
    custom_params: CustomParams


class CompletionContract(SamplingContract):
    # text or token ids; SGLang also takes a batch of either, which the embedded server
    # does not serve
    prompt: Annotated[StrictStr | list[StrictInt] | list[StrictStr] | list[list[StrictInt]],
                      _one_error("text, token ids, or a list of either")] = Field(
        ..., description="text or token ids")
    max_tokens: PositiveInt | None = Field(None, description="output tokens at most")
    slo: SLOField | None = Field(None, description="per-request SLO; custom_params, then "
                                 "headers X-SLO-TPOT-MS / X-SLO-Class / X-SLO-TTFT-MS when "
                                 "absent")
    custom_params: CustomParams


class GenerateSamplingContract(_Body):
    max_new_tokens: PositiveInt | None = None
    custom_params: CustomParams


class GenerateContract(_Body):
    sampling_params: GenerateSamplingContract = Field(
        default_factory=GenerateSamplingContract)
    slo: SLOField | None = None


class _Sampling(SamplingContract):
    top_k: TopK = 0
    seed: StrictInt | None = None
    stop: Stop = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: Literal[1] = Field(1, description="only n = 1 is served")
    ignore_eos: StrictBool = False


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant"]
    content: StrictStr


class ChatCompletionRequest(_Sampling, ChatContract):
    model: StrictStr | None = None
    messages: list[ChatMessage] = Field(..., min_length=1)


class CompletionRequest(_Sampling, CompletionContract):
    model: StrictStr | None = None
    prompt: Annotated[StrictStr | list[StrictInt], _one_error("text or a list of token ids")] \
        = Field(..., description="text or token ids")
    echo: StrictBool = False


class GenerateSampling(GenerateSamplingContract):
    """SGLang's sampling_params (the fields we serve)."""

    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    top_k: TopK = -1
    stop: Stop = None
    ignore_eos: StrictBool = False
    sampling_seed: StrictInt | None = None


class GenerateRequest(GenerateContract):
    text: StrictStr | None = None
    input_ids: list[StrictInt] | None = None
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    stream: StrictBool = False
    rid: StrictStr | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("give exactly one of text and input_ids")
        return self
