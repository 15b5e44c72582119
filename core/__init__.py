"""What training and evaluation share: the run config schema, the run directory, rank helpers and metric
logging."""
