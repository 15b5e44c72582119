"""Data builders: the synthetic world, OVI-Train, visual-prompt SFT data, and the media spec."""
