"""The endpoint's Prometheus metrics (text format at GET /metrics): requests by model and
status, the latency histogram by model (observed by the HTTP layer), and read from the
endpoint at each scrape: cold loads by kind, evictions, workers, queue depth, workers lost."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from serving.endpoint import Endpoint

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EndpointCollector:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def collect(self):
        loads = CounterMetricFamily(
            "ayci_model_loads",
            "Cold loads of a model's worker (first, scale-out, replacement)",
            labels=["model", "kind"],
        )
        for (model, kind), count in sorted(self.endpoint.load_counts().items()):
            loads.add_metric([model, kind], count)
        evictions = CounterMetricFamily(
            "ayci_model_evictions", "Models evicted from the memory budget", labels=["model"]
        )
        lost = CounterMetricFamily("ayci_workers_lost", "Workers that died while serving", labels=["model"])
        workers = GaugeMetricFamily("ayci_workers", "Workers ready per model", labels=["model"])
        starting = GaugeMetricFamily("ayci_workers_starting", "Workers loading per model", labels=["model"])
        queue = GaugeMetricFamily("ayci_queue_depth", "Requests waiting per model", labels=["model"])
        for row in self.endpoint.state():
            name = row["model"]
            evictions.add_metric([name], row["evictions"])
            lost.add_metric([name], row["lost_workers"])
            workers.add_metric([name], row["workers"])
            starting.add_metric([name], row["starting"])
            queue.add_metric([name], row["queue_depth"])
        budget = GaugeMetricFamily("ayci_memory_reserved_mb", "Memory the workers reserve of the budget")
        budget.add_metric([], self.endpoint.budget.used_mb)
        yield from (loads, evictions, lost, workers, starting, queue, budget)


class Metrics:
    def __init__(self, endpoint: Endpoint) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ayci_requests", "Requests by model and HTTP status", ["model", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "ayci_request_latency_seconds",
            "Latency of answered requests",
            ["model", "cold"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.registry.register(EndpointCollector(endpoint))

    def text(self) -> bytes:
        return generate_latest(self.registry)
