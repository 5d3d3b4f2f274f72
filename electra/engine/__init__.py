"""What pretraining and fine-tuning run on: the runtime (device, precision, compile, CUDA graphs),
the training step, distributed training, the optimizer, progress, the metrics log and its plot.
Below the folder formats, which use its collectives and runtime; the loops that drive it are
`electra.pretraining` and `electra.finetuning`."""
