"""AdaServe inside SGLang 0.5.23: the ADASERVE speculative algorithm as a plugin.

SGLang's EAGLE-family workers draft a beam-search tree per request and keep one global
top-(num_draft_tokens - 1) of its nodes by path score for every request alike. This
package replaces that one uniform choice with ``adaserve.scheduler``'s per-request,
SLO-aware selection under a token budget, and has the target verify only what it selects:

- ``draft_tree`` / ``select``: SGLang's draft outputs (score/token/parent lists) as our
  CandidateBatch, and the policy's selection as a keep-mask over SGLang's verify positions;
- ``compact`` / ``ragged``: the kept positions compacted per request and verified ragged
  (at most B tokens), SGLang's [bs, N] layout restored after the forward; ``links``: the
  uniform alternative, unlinking what is not kept;
- ``shapes``: the draft loop run at the plan's depth and width each iteration;
- ``contract`` / ``http`` / ``report``: the embedded server's HTTP contract, SLOs and SLO
  report on SGLang's routes;
- ``iterations``: the per-iteration log; ``names``: the names everything shares;
- ``cpu``: SGLang on a machine without a GPU (``adaserve sglang serve-cpu``), a test
  vehicle: the sgl_kernel stand-in, torch kernels, the hooks and the launcher.

Nothing here imports sglang at module level but the modules SGLang's plugin loader
imports (``plugin.register``), so ``adaserve`` works without it.
"""
