"""Running the networks: the runtime (device, precision, compile, CUDA graphs), the training step and
loop, distributed training, the optimizer, checkpoints, tracking, and inference on raw text."""
