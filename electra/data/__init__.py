"""Text in, batches out: corpora, the WordPiece tokenizer, `prepare` and the shard store."""
