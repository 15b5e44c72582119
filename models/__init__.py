"""Model families: loading checkpoints (tiny test models too), the chat format that turns samples into model
inputs, which parameters are which tower, and 4-bit loading."""
