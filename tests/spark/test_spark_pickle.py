"""Nothing unpicklable is held by a data source, reader or writer; their errors pickle."""

from __future__ import annotations

import pickle
import uuid
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(60)]


def test_reader_with_an_open_connection_pickles_without_it(spark: Any, broker_thread: Any) -> None:
    from stompfast.spark._source import StompStreamReader

    q = f"/queue/pickle-{uuid.uuid4().hex[:8]}"
    broker_thread.publish(q, b"x")
    reader = StompStreamReader({"url": broker_thread.url, "destination": q, "pollTimeout": "2"})
    rows, end = reader.read(reader.initialOffset())
    assert len(list(rows)) == 1 and end["seq"] == 1
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._rt is None and copy.destinations == [q]
    reader.stop()  # un-acked: back on the queue
    broker_thread.wait_for_blocking(lambda: broker_thread.queue_depth(q) == 1)


def test_configuration_errors_pickle(spark: Any) -> None:
    from pyspark.sql.types import StructType

    from stompfast import ConfigurationError
    from stompfast.spark._sink import StompWriter

    with pytest.raises(ConfigurationError) as info:
        StompWriter({"url": "stomp://127.0.0.1:1/"}, StructType([]))
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is ConfigurationError and str(again) == str(info.value)
