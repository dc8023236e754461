"""Named limits with their units last. Every bound in velamq comes from here or from config."""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# Pulsar's default maxMessageSize, told to clients in CONNECTED.max_message_size.
max_message_bytes_default = 5 * MIB
# A frame may carry max_message_bytes of metadata + payload plus this much command and headers (CH-5).
frame_padding_bytes = 10 * KIB

# Highest protocol version velamq speaks (v20: what pulsar-client 3.13 sends).
protocol_version_max = 20

# Keep-alive: the broker pings an idle connection and drops it after two silent intervals.
keepalive_interval_s = 30.0

# Ledger rollover in the first storage version.
ledger_entries_max = 50_000
ledger_bytes_max = 256 * MIB

# Dispatch: how many entries one read from storage returns at most.
dispatch_read_entries_max = 100

# Admin operations time out instead of hanging (BR-7).
admin_timeout_s = 30.0

# ---- hardening (docs/operations.md) -----------------------------------------------------------

# Before CONNECT a client may send only a frame this small (CONNECT with its auth data fits), and
# it must send CONNECT within handshake_timeout_s; a connection that does neither is closed.
handshake_frame_bytes_max = 64 * KIB
handshake_timeout_s = 10.0

# Outbound water marks of one connection (Netty's WriteBufferWaterMark, scaled up: a Python loop
# pays per wake-up, so it toggles less often): dispatch to the connection stops while its unsent
# bytes are above the high mark and resumes once they are below the low one.
write_buffer_high_bytes = 1 * MIB
write_buffer_low_bytes = 512 * KIB

# The network's share of the memory budget (`memoryBudgetBytes`): bytes written to clients and not
# yet sent (outbound), and frames received in part (inbound). Storage gets the rest.
network_budget_share = (1, 8)
network_outbound_share = (3, 4)  # of the network's share; the inbound partial frames get the rest
# While partial frames broker-wide exceed their bound, a connection holding more than this much of
# a partial frame stops being read until the total has fallen to half the bound.
partial_frame_allowance_bytes = 64 * KIB

# File descriptors kept out of the connection cap when brokerMaxConnections is 0 (derived): the
# admin port's connections, storage's files, SQLite, the listening sockets.
fds_reserved_min = 512


def connections_max_for(fd_limit: int) -> int:
    """The derived brokerMaxConnections for a soft RLIMIT_NOFILE of fd_limit: what is left after
    the reserve (at least 512 descriptors, or 1/8 of the limit), and never less than 64."""
    return max(64, fd_limit - max(fds_reserved_min, fd_limit // 8))


# After accept() fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), the
# listener stops accepting for this long instead of spinning on a socket that stays readable.
accept_retry_s = 0.5
# Connections accepted per readiness event of the listening socket at most (then other work runs).
accepts_per_wakeup = 64
# Dispatch: one read from storage for a subscription brings about this many bytes at most.
dispatch_read_bytes_max = 4 * MIB
