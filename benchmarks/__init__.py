"""The benchmark suite: one module per results page, in folders by what they measure.

    python -m benchmarks                 # every page, the module that makes it, current or not
    python -m benchmarks NAME [--run]    # the command that remakes one page (adaserve bench page)

shared/ holds what every page uses (timing, machine, page headers, run keys, the page
listing, the orphan check); paper/ the paper's figures on the simulator; sim/ the
simulator's own pages; engine/ the embedded engine's microbenchmarks; serving/ the HTTP
server's; sglang/ SGLang with the plugin on a CPU; fleet/ several replicas, served and
simulated. Run a page's module from the repository root: ``python -m benchmarks.engine.engine``.
"""
