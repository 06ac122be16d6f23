"""The HTTP server measured from outside: served TPOT, memory, start-up time, the soak.
(The served policy sweeps are `adaserve bench`, loadgen/bench.py.)"""
