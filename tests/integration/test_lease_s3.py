"""The lease on S3's conditional writes (LocalStack): `If-None-Match: *` creates it, `If-Match` on
its ETag takes it over, so of the takers that all read the same expired lease exactly one wins."""

from __future__ import annotations

import uuid

import boto3
import pytest

from adapters.aws import S3Store
from tests.lease_race import assert_one_taker_of_an_expired_lease_wins

pytestmark = pytest.mark.localstack
KEY = "leases/artifact.json"


@pytest.fixture
def store():
    bucket = f"ayci-lease-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    yield S3Store(bucket, s3=s3)
    for item in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        s3.delete_object(Bucket=bucket, Key=item["Key"])
    s3.delete_bucket(Bucket=bucket)


def test_compare_and_put_is_s3_if_match(store):
    assert store.compare_and_put(KEY, b"one", version=None) is not None
    assert store.compare_and_put(KEY, b"two", version=None) is None  # If-None-Match: * on an existing key
    data, version = store.get_versioned(KEY)
    assert data == b"one"
    assert store.compare_and_put(KEY, b"two", version=version) is not None
    assert store.compare_and_put(KEY, b"three", version=version) is None  # a stale ETag
    assert store.get_bytes(KEY) == b"two"


@pytest.mark.parametrize("racers", [2, 4])
def test_of_the_takers_of_an_expired_lease_exactly_one_wins(store, racers):
    assert_one_taker_of_an_expired_lease_wins(store, KEY, racers)
