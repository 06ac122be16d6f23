"""sglang-router 0.3.2 with the policy that honours ``X-SMG-Target-Worker`` (issue 39), for
a fleet whose SLO front picks the replicas (picking.py).

Measured on 0.3.2 (docs/fleet.md): its ``manual`` policy reads only ``X-SMG-Routing-Key``;
``X-SMG-Target-Worker`` is read by its ``consistent_hashing`` policy, which the Rust core
and ``sglang_router.router.policy_from_str`` know but ``launch_router``'s command line
does not offer. So this takes the router's own flags, parsed by its own parser, and starts
it through its own ``launch_router`` with that policy; a request without the header goes
by the policy's fallback (a routing key's hash, else a random healthy worker).

    python -m adaserve.sglang.target_router --worker-urls URL ... [sglang-router flags]
"""

from __future__ import annotations

import sys

POLICY = "consistent_hashing"


def main(argv: list[str] | None = None) -> int:
    from sglang_router.launch_router import launch_router, parse_router_args

    args = parse_router_args(sys.argv[1:] if argv is None else argv)
    args.policy = POLICY
    launch_router(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
