"""The Lambda-size lease is renewed while a reconfiguration waits: an update and a publish that
wait 500 s in all (longer than the 300 s lease) keep it, and no other process takes it over."""

from __future__ import annotations

import json

import boto3

from adapters.lambda_sizes import FunctionSize
from schemas import keys
from tests.unit.test_lambda_sizes import BUCKET, INTEL, Clock, aws, sizes  # noqa: F401


def test_a_long_update_and_publish_keep_the_lease(aws, monkeypatch):  # noqa: F811
    clock = Clock()
    holder = sizes(clock, lease_s=300, poll_s=10)
    other = sizes(clock, lease_s=300, poll_s=10)
    start, taken_over = clock.now, []
    real = holder.lam.get_function_configuration

    def slow(**kwargs):
        config = real(**kwargs)
        waited = clock.now - start
        if "Qualifier" not in kwargs and waited < 250:
            config = {**config, "LastUpdateStatus": "InProgress"}  # the update takes 250 s
        elif "Qualifier" in kwargs and waited < 500:
            config = {**config, "State": "Pending"}  # and the new version 250 s more to be active
        if waited > 400 and not taken_over:  # past the lease's 300 s: did it expire?
            taken_over.append(other._lease_on(INTEL).take())
        return config

    monkeypatch.setattr(holder.lam, "get_function_configuration", slow)
    assert holder.alias_for(INTEL, FunctionSize(1024)) == "mem-1024"
    assert clock.now - start >= 500 and taken_over == [False]
    lease = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key=keys.lambda_sizes_lock(INTEL))["Body"].read())
    assert lease["holder"] is None  # released (with If-Match) when done
