"""What keeps the broker within its machine: the disk and the network's share of memory.

    _disk        DiskGuard: disk usage and write health; when producers are refused and taken back
    _net_budget  NetworkBudget: unsent outbound bytes and partial inbound frames, broker-wide

May import: storage, tier 0. Imported by: session, broker/_service.py.
"""
