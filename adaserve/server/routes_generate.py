"""SGLang's native /generate: ``text`` or ``input_ids``, ``sampling_params`` (with the SLO in
``custom_params`` as the SGLang plugin reads it, or a body ``slo``), the SLO report in
``meta_info``; streamed as the text so far, as SGLang does."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from adaserve.engine.request import Output
from adaserve.server import errors, sse
from adaserve.server.admission import admit, params_for, slo_for
from adaserve.server.jobs import Job
from adaserve.server.protocol import GenerateRequest
from adaserve.server.state import ServerDep

router = APIRouter(dependencies=[Depends(errors.require_json)])


@router.post("/generate")
async def generate(body: GenerateRequest, request: Request, srv: ServerDep) -> Response:
    sp = body.sampling_params
    slo_class, slo = slo_for(srv, request, body.slo, sp.custom_params,
                             "sampling_params.custom_params")
    ids = srv.engine.encode(body.text) if body.text is not None else list(body.input_ids)
    params = params_for(srv, len(ids), "text" if body.text is not None else "input_ids",
                        max_tokens=sp.max_new_tokens, temperature=sp.temperature,
                        top_p=sp.top_p, top_k=sp.top_k, seed=sp.sampling_seed, stop=sp.stop,
                        ignore_eos=sp.ignore_eos, max_param="sampling_params.max_new_tokens")
    job = admit(srv, ids, params, slo_class, slo, rid=body.rid)
    if not body.stream:
        text, last = await job.collect(request)
        n = last.stats.output_tokens if last.stats else 0
        return JSONResponse({"text": text, "meta_info": _meta(job, last, n)})
    return sse.response(_stream(job, request))


async def _stream(job: Job, request: Request) -> AsyncIterator[str]:
    text, n = "", 0
    with job.aborted_unless_done():
        while True:
            out = await job.next_output(request)
            if out is None:
                return
            text += out.text
            n += len(out.token_ids)
            if out.finished and out.finish_reason == "error":
                yield sse.event(errors.error_body(500, f"generation failed: {out.error}"))
                yield sse.DONE
                return
            if out.text or out.finished:  # SGLang streams the text so far
                yield sse.event({"text": text, "meta_info": _meta(job, out, n)})
            if out.finished:
                yield sse.DONE
                return


def _meta(job: Job, out: Output, n_out: int) -> dict:
    m = {"id": job.rid, "prompt_tokens": job.prompt_tokens, "completion_tokens": n_out,
         "finish_reason": {"type": out.finish_reason} if out.finished else None}
    if out.finished:
        m.update(job.finished(out))
    return m

