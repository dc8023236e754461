"""Helpers for tests, ours and users': a real broker process on free ports with its own data dir.

    from velamq.testing import run_broker
    with run_broker() as broker:
        client = pulsar.Client(broker.service_url)
        ...
        broker.kill()      # SIGKILL, as a crash would
        broker.start()     # same ports, same data dir: recovery
"""

from velamq.testing._broker_process import BrokerProcess, free_port, run_broker

__all__ = ["BrokerProcess", "free_port", "run_broker"]
