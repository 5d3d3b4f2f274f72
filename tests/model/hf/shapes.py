"""What the hf family's tests build their random-weight folders from: the types they cover (every
one `electra.model.hf.types` lists, written out so that a type dropped from the table fails a test)
and DeBERTa-v3's settings, as microsoft's deberta-v3 folders ship them."""

TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "distilbert")
DEBERTA_V3 = {
    "relative_attention": True,
    "pos_att_type": ["p2c", "c2p"],
    "position_buckets": 256,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "position_biased_input": False,
    "max_relative_positions": -1,
    "type_vocab_size": 0,
}
