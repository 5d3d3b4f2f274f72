"""electra: pretrain text encoders with ELECTRA's replaced token detection, then fine-tune and export them."""

__version__ = "0.1.0"
