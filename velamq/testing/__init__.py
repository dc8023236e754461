"""Helpers for tests, ours and users': a real broker on free ports with its own data dir.

    from velamq.testing import run_broker, run_broker_in_thread
    with run_broker() as broker:               # a `velamq standalone` child process
        client = pulsar.Client(broker.service_url)
        ...
        broker.kill()      # SIGKILL, as a crash would
        broker.start()     # same ports, same data dir: recovery
    with run_broker_in_thread() as broker:     # the same server in this process, on its own loop
        broker.run(broker.server.metadata.list_tenants())   # a coroutine on the server's loop
"""

from velamq.testing._broker_process import BrokerProcess, free_port, run_broker
from velamq.testing._broker_thread import BrokerThread, run_broker_in_thread

__all__ = ["BrokerProcess", "BrokerThread", "free_port", "run_broker", "run_broker_in_thread"]
