"""Mixed-SLO load generation and result analysis (installed as ``adaserve.loadgen``).

The Locust file, arrival schedules and analysis arrive with the load-generator issue.
"""
