"""Fine-tuning video VLMs (LoRA or full) with evaluation after every checkpoint."""
