"""Mixed-SLO load generation and result analysis (installed as ``adaserve.loadgen``).

workload.py (prompt sets, SLO class mix), arrivals.py (open-loop schedules, trace replay),
locustfile.py (the Locust traffic), records.py (per-request records, attainment and
goodput), run.py (`adaserve loadgen`).
"""
