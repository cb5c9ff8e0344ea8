"""Unit constants, defined once: 1 Gbps = 1e9 bit/s, 1 GB = 1e9 B (decimal, as links are sold)."""

BITS_PER_BYTE = 8
BITS_PER_GBIT = 1e9
BITS_PER_MBIT = 1e6
BYTES_PER_GB = 1e9
MS_PER_S = 1e3
NS_PER_S = 1e9
S_PER_HOUR = 3600
