"""The networks: one module per architecture family, the fine-tuning heads, CPU kernels and FLOP
counts. Modules here know nothing of training."""
