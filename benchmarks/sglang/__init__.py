"""SGLang with the AdaServe plugin on a CPU, against its own speculation and the embedded
engine (cpu: the page; runs: one server's run; page: the table)."""
