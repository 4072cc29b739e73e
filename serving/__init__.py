"""Serving a run's picks: many models behind one HTTP endpoint (`python -m ayci endpoint`).

Models load on first use into a memory budget and are evicted least-recently-used
(`budget.py`); each model has a pool of worker processes, each confined to the combination's
memory size like a measurement (`processes.py`, `worker.py`), that scales out with the model's
queue and in after an idle time (`scaling.py`, `pool.py`); `endpoint.py` ties them together,
`app.py` is the thin HTTP layer, `metrics.py` the Prometheus metrics. `scaling.ScalingPolicy.lambda_like`
makes each pool the Lambda pool the traffic simulation models; `open_loop.py` sends open-loop
arrivals and `loadtest.py` drives the endpoint with them beside the simulation of the same arrivals
(`core/lambda_model/traffic.py`), judged pass or fail; `capacity.py` steps their rate to the
highest within a p99 SLO (`ayci capacity`).
"""
