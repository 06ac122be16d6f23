"""The main() of a timed page about the compiled kernels: --render rewrites the page from
its kept JSON and measures nothing; otherwise the kernels must load (a page without them
would time the eager path under the kernels' name), the measurement runs, and the page and
its data are written."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from benchmarks.shared.page import kept, render_flags, write_page

from adaserve.engine import kernels


def run(name: str, doc: str, measure: Callable[[argparse.Namespace], dict],
        page: Callable[[dict], list[str]], argv: list[str] | None,
        add_args: Callable[[argparse.ArgumentParser], None] = lambda ap: None,
        printed_only: Callable[[argparse.Namespace], bool] = lambda args: False) -> int:
    """``printed_only(args)``: a probe whose page is printed, not written."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    add_args(ap)
    render_flags(ap, name)
    args = ap.parse_args(argv)
    if args.render:
        res = kept(name, args.out)
    else:
        status = kernels.load()
        if not status.available:
            print(f"the compiled kernels are unavailable: {status.reason}")
            return 1
        res = measure(args)
    if printed_only(args):
        print("\n".join(page(res)))
    else:
        write_page(name, page(res), args.out, None if args.render else res)
    return 0
