"""The HTTP contract (../shared/DESIGN.md) on SGLang's routes, by the embedded server's own
code: one request gets the same SLO, or the same refusal naming the same field, from
either backend (tests/sglang_tier/test_contract.py sends one table to both).

- The contract's fields of a body -- the ``slo`` object, SGLang's ``custom_params``, the
  output length (``max_tokens`` / ``max_completion_tokens``, ``max_new_tokens``) -- are
  validated by the embedded server's models (``adaserve.server.protocol``: ChatContract,
  CompletionContract, GenerateContract, which its own request bodies inherit) and worded
  by its error description (``adaserve.server.errors.describe``). SGLang's other fields
  keep SGLang's rules (tools, n > 1, multimodal content, its own ranges).
- The SLO is resolved by ``adaserve.server.slo_classes.request_slo``, the function the
  embedded routes call: slo object, custom_params, X-SLO-TPOT-MS, X-SLO-Class, default.
- A body not sent as JSON gets 415 (``errors.not_json``), where SGLang answered 400.
- Lengths: a prompt at or over the context limit, or an output that does not fit beside
  it, counted as the embedded server counts them and refused by its rule
  (``adaserve.server.lengths``), naming the prompt field or the output-length field.
- All of it is checked by ``ContractGate``, an ASGI middleware in front of SGLang's app,
  before SGLang parses the body (its own models took ``max_tokens: 0`` on chat and refused
  it on completions, naming no field); the route hooks (``http.py``) then resolve the SLO
  into SGLang's request objects.

- A body that is not valid JSON gets 400 naming where it breaks (``errors.malformed_json``,
  the embedded server's words), where SGLang answered pydantic's error list; a body that
  is not UTF-8 gets the embedded server's 400 too.

Every refusal here is in the embedded server's (OpenAI's) shape, ``{"error": {"message",
"type", "param", "code"}}``, on every route; SGLang's own errors on its OpenAI routes are
rewritten into it by ``error_shape.OpenAIErrors``. The status, the shape and ``param`` are
the contract.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from adaserve.server.errors import (describe, error_body, error_response, malformed_json,
                                    not_json, not_utf8)
from adaserve.server.lengths import LengthError, output_limit
from adaserve.server.protocol import (
    ChatContract,
    CompletionContract,
    GenerateContract,
    GenerateSamplingContract,
)
from adaserve.server.slo_value import SLOError

ROUTES = ("/generate", "/v1/chat/completions", "/v1/completions")


class ContractError(Exception):
    """A refused request: the status, and the message and field the embedded server
    would answer with."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    @classmethod
    def of(cls, e: SLOError) -> ContractError:
        return cls(400, str(e), e.param)

    def body(self) -> dict:
        """The embedded server's (OpenAI's) shape."""
        return error_body(self.status, self.message, self.param, self.code)


def _validated(model: type[BaseModel], body: object, at: str = "") -> BaseModel:
    if not isinstance(body, Mapping):
        raise ContractError(400, f"{at or 'the body'}: must be a JSON object", at or None)
    try:
        return model.model_validate(body)
    except ValidationError as e:
        errs = e.errors()
        if at:  # a batched /generate item: name it as the embedded server names fields
            errs = [{**x, "loc": (*at.split("."), *x.get("loc", ()))} for x in errs]
        message, param = describe(errs)
        raise ContractError(400, message, param) from None


def chat_or_completion(body: object, chat: bool) -> ChatContract | CompletionContract:
    """The contract's fields of an OpenAI body; ContractError where the embedded server
    refuses them."""
    return _validated(ChatContract if chat else CompletionContract, body)


def generate(body: object) -> tuple[GenerateContract, list[GenerateSamplingContract]]:
    """The contract's fields of a /generate body, and of each of its sampling_params (a
    batched /generate gives a list, one per prompt; the embedded server serves one)."""
    if isinstance(body, Mapping) and isinstance(body.get("sampling_params"), list):
        items = [_validated(GenerateSamplingContract, p, f"sampling_params.{i}")
                 for i, p in enumerate(body["sampling_params"])]
        top = _validated(GenerateContract, {k: v for k, v in body.items()
                                            if k != "sampling_params"})
        return top, items
    top = _validated(GenerateContract, body)
    return top, [top.sampling_params]


def media_type_error(content_type: str | None) -> ContractError | None:
    why = not_json(content_type)
    return None if why is None else ContractError(415, why, None, "unsupported_media_type")


def refusal(path: str, body: object, headers: Mapping[str, str],
            served: Served | None = None) -> ContractError | None:
    """What the embedded server would refuse in this parsed body of a contract route: its
    contract fields, its SLO (every source, for every prompt of a batch) and, given the
    served model's tokenizer and context limit, its lengths. None if nothing."""
    from adaserve.server.slo_classes import request_slo
    from adaserve.sglang.slo import configured_classes
    from adaserve.sglang.tracestate import slo_headers

    classes, default = configured_classes()
    try:
        headers = slo_headers(headers)  # a router's tracestate member, as its X-SLO-* header
        if path == "/generate":
            top, items = generate(body)
            slo = None if top.slo is None else top.slo.as_mapping()
            for item in items:
                request_slo(slo, item.custom_params, headers, classes, default,
                            "sampling_params.custom_params")
            if served is not None and len(items) == 1:  # a batch: SGLang's own checks
                served.check(body, items[0].max_new_tokens, "sampling_params.max_new_tokens")
        else:
            chat = path == "/v1/chat/completions"
            checked = chat_or_completion(body, chat)
            request_slo(None if checked.slo is None else checked.slo.as_mapping(),
                        checked.custom_params, headers, classes, default)
            if served is not None:
                most = getattr(checked, "max_completion_tokens", None)
                served.check(body, most or checked.max_tokens,
                             "max_completion_tokens" if most else "max_tokens")
    except SLOError as e:
        return ContractError.of(e)
    except LengthError as e:
        return ContractError(400, str(e), e.param, e.code)
    except ContractError as e:
        return e
    return None


@dataclass(frozen=True, slots=True)
class Served:
    """The served model's tokenizer and context limit: the embedded server's length rule
    (``lengths.output_limit``) over the prompt as the embedded server counts it."""

    tokenizer: object
    max_context: int

    def prompt(self, body: Mapping) -> tuple[int, str] | None:
        """(tokens, field) of a text, token-id or text-only chat prompt; None for anything
        else (a batch, images, tools), which SGLang's own checks keep."""
        if isinstance(body.get("messages"), list):
            messages = body["messages"]
            if body.get("tools") or not all(isinstance(m, Mapping) and isinstance(
                    m.get("content"), str) for m in messages):
                return None
            from adaserve.engine.engine import encode_chat

            try:
                return len(encode_chat(self.tokenizer, messages)), "messages"
            except Exception:  # a template that refuses these messages: SGLang says why
                return None
        for field in ("prompt", "text", "input_ids"):
            value = body.get(field)
            if isinstance(value, str):
                return len(self.tokenizer.encode(value, add_special_tokens=False)), field
            if isinstance(value, list) and all(isinstance(t, int) for t in value):
                return len(value), field
        return None

    def check(self, body: Mapping, max_tokens: int | None, max_param: str) -> None:
        """LengthError where the embedded server refuses the lengths."""
        counted = self.prompt(body)
        if counted is not None:
            output_limit(counted[0], max_tokens, self.max_context, counted[1], max_param)


class ContractGate:
    """ASGI middleware in front of SGLang's app on ADASERVE servers (``http.serve_hook``):
    a POST to a contract route is answered here when the embedded server would refuse it
    -- 415 for a body not sent as JSON, 400 for malformed JSON (where it breaks) and for a
    contract field or an SLO (naming the field) -- before SGLang's own parsing (which
    refused some of them, naming no field, and took others). Anything else goes on to
    SGLang with its body replayed."""

    def __init__(self, app, served: Served | None = None) -> None:
        self.app, self._served = app, served

    @property
    def served(self) -> Served | None:
        """SGLang's tokenizer and context limit, from its tokenizer manager once it exists
        (None before, or without a tokenizer: the lengths are then SGLang's to check)."""
        if self._served is None:
            from sglang.srt.entrypoints.http_server import get_global_state

            tm = getattr(get_global_state(), "tokenizer_manager", None)
            if getattr(tm, "tokenizer", None) is not None and hasattr(tm, "context_len"):
                self._served = Served(tm.tokenizer, int(tm.context_len))
        return self._served

    async def __call__(self, scope, receive, send) -> None:
        if not (scope["type"] == "http" and scope.get("method") == "POST"
                and scope.get("path") in ROUTES):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1")
                   for k, v in scope.get("headers") or []}
        err = media_type_error(headers.get("content-type"))
        chunks, more = [], True
        while err is None and more:
            msg = await receive()
            if msg["type"] != "http.request":  # the client left: SGLang sees it too
                chunks, more = None, False
                break
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = b"".join(chunks) if chunks is not None else b""
        if err is None and chunks is not None:
            err = checked(scope["path"], body, headers, self.served)
        if err is not None:
            response = error_response(err.status, err.message, err.param, code=err.code)
            await response(scope, receive, send)
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed or chunks is None:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def parsed(body: bytes) -> tuple[object, ContractError | None]:
    """A contract route's body as sent (bytes said to be JSON), parsed: (the document,
    None), or (None, the refusal of malformed JSON or text)."""
    try:
        return json.loads(body.decode("utf-8")), None
    except UnicodeDecodeError as e:
        return None, ContractError(400, not_utf8(e))
    except json.JSONDecodeError as e:
        return None, ContractError(400, malformed_json(e.msg, e.pos, e.doc), None,
                                   "json_invalid")


def checked(path: str, body: bytes, headers: Mapping[str, str],
            served: Served | None = None) -> ContractError | None:
    """What the embedded server would refuse in a contract route's body as sent:
    malformed JSON or text (``parsed``), then ``refusal``. The gate asks it on a
    replica; the fleet's front parses once and asks ``refusal``."""
    doc, bad = parsed(body)
    return bad if bad is not None else refusal(path, doc, headers, served)
