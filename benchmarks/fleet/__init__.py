"""Several replicas: served through SGLang's router on a CPU (cpu), and simulated with
the routers (sim, with its kept runs in runs)."""
