"""The benchmarks' release formats, read, checked and written: V2P-Bench's (v2p) and OVIBench's (ovi)."""
