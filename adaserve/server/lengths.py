"""How long a request may be (DESIGN.md, "prompt over the context limit, bad max_tokens"):
a prompt and its output within the context limit. One rule for the embedded server's
admission and for SGLang's routes with the plugin (``adaserve.sglang.contract``), so the
same request is refused, naming the same field, by either."""

from __future__ import annotations

DEFAULT_MAX_TOKENS = 256  # when a request names none (capped by the context left)


class LengthError(ValueError):
    """A prompt or output that does not fit; ``param`` names the field, ``code`` is
    OpenAI's (context_length_exceeded) where it has one."""

    def __init__(self, message: str, param: str, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


def output_limit(n_prompt: int, max_tokens: int | None, max_context: int, prompt_param: str,
                 max_param: str = "max_tokens") -> int:
    """The output tokens a request may have: ``max_tokens`` if it fits beside the prompt,
    the default capped by the room left when it names none. LengthError otherwise."""
    if n_prompt == 0:
        raise LengthError("the prompt is empty", prompt_param)
    if n_prompt >= max_context:
        raise LengthError(f"the prompt is {n_prompt} tokens; this server's context limit "
                          f"is {max_context} tokens (prompt + output)", prompt_param,
                          "context_length_exceeded")
    room = max_context - n_prompt
    if max_tokens is None:
        return min(DEFAULT_MAX_TOKENS, room)
    if max_tokens > room:
        raise LengthError(f"{max_param}={max_tokens} does not fit: the prompt is {n_prompt} "
                          f"tokens and the context limit is {max_context}, so at most {room}",
                          max_param, "context_length_exceeded")
    return max_tokens
