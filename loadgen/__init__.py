"""Mixed-SLO load generation and result analysis (installed as ``adaserve.loadgen``).

workload.py (prompt sets, SLO class mix and how requests get their classes), arrivals.py
(open-loop schedules, trace replay, sending on time), options.py (the traffic flags, shared
with Locust), locustfile.py (the Locust traffic), records.py (per-request records,
attainment and goodput), run.py (`adaserve loadgen`), bench.py, extend.py and report.py
(`adaserve bench`: sweeps, their extension, the result page), settle.py (the machine
settled before a sweep's first server).
"""
