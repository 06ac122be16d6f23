"""AdaServe inside SGLang 0.5.23: the ADASERVE speculative algorithm as a plugin.

SGLang's EAGLE-family workers draft a beam-search tree per request and keep one global
top-(num_draft_tokens - 1) of its nodes by path score for every request alike. This
package replaces that one uniform choice with ``adaserve.scheduler``'s per-request,
SLO-aware selection, inside SGLang's fixed [bs, num_draft_tokens] layout:

- ``draft_tree``: SGLang's draft outputs (score/token/parent lists) as our CandidateBatch,
  and a selection back as a keep-mask over SGLang's verify positions;
- ``links``: unlinking the positions not kept from the retrieve_next_token /
  retrieve_next_sibling links verification walks, and a pure-torch reference of that walk;
- ``shapes``: the draft loop run at the plan's depth and width each iteration;
- ``cpu``: SGLang on a machine without a GPU (``adaserve sglang serve-cpu``), a test
  vehicle: the sgl_kernel stand-in, torch kernels, the hooks and the launcher.

Nothing here imports sglang at module level, so ``adaserve`` works without it.
"""
