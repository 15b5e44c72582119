"""Evaluation of V2P-Bench and OVIBench, standalone and after every checkpoint."""
