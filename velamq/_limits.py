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
