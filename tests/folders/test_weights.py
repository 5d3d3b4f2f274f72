"""A model folder's weights as the hub ships them: one safetensors file, or the shards an index
names (safetensors or PyTorch's weights-only format), read to the same tensors; a shard missing or
an index that is not one is one line naming the file."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch

from electra.data.tokenizer import save_tokenizer, train_tokenizer
from electra.errors import ElectraError
from electra.folders.model_folder import is_model_dir, load_pretrained
from electra.folders.weights import read_state_dict, weights_file

from ..conftest import tiny_model_config

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One random HF discriminator saved whole, in safetensors shards and in PyTorch shards."""
    root = tmp_path_factory.mktemp("weights")
    (root / "c.txt").write_text(" ".join(f"word{i % 97} token{i % 13}" for i in range(2000)))
    tokenizer = train_tokenizer([root / "c.txt"], vocab_size=120, min_frequency=1)
    torch.manual_seed(0)
    cfg = transformers.ElectraConfig(**asdict(tiny_model_config(vocab_size=120)))
    model = transformers.ElectraForPreTraining(cfg)
    for name, kwargs in {"whole": {}, "shards": {"max_shard_size": "40KB"}}.items():
        model.save_pretrained(root / name, **kwargs)
        save_tokenizer(tokenizer, root / name, lowercase=True)
    # PyTorch shards as older `transformers` wrote them (5.x writes safetensors only).
    folder = root / "bin_shards"
    folder.mkdir()
    (folder / "config.json").write_text((root / "whole" / "config.json").read_text())
    save_tokenizer(tokenizer, folder, lowercase=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    halves = [
        dict(list(state.items())[: len(state) // 2]),
        dict(list(state.items())[len(state) // 2 :]),
    ]
    weight_map = {}
    for i, half in enumerate(halves):
        torch.save(half, folder / f"pytorch_model-0000{i + 1}-of-00002.bin")
        weight_map.update(dict.fromkeys(half, f"pytorch_model-0000{i + 1}-of-00002.bin"))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    return root


def test_shards_read_as_the_whole_file(folders):
    whole = read_state_dict(folders / "whole")
    for name, index in (("shards", "model"), ("bin_shards", "pytorch_model")):
        folder = folders / name
        assert (
            weights_file(folder).name
            == f"{index}.{'safetensors' if name == 'shards' else 'bin'}.index.json"
        )
        assert len(json.loads(weights_file(folder).read_text())["weight_map"]) == len(whole)
        assert is_model_dir(folder)
        state = read_state_dict(folder)
        assert state.keys() == whole.keys()
        assert all(torch.equal(state[k], whole[k]) for k in whole)
    ids = torch.randint(0, 120, (2, 9))
    logits = [
        load_pretrained(folders / name)[0].eval()(ids, torch.zeros_like(ids), torch.ones_like(ids))
        for name in ("whole", "shards")
    ]
    assert torch.equal(logits[0], logits[1])


def test_a_missing_shard_or_a_bad_index_is_one_line(folders, tmp_path):
    import shutil

    folder = tmp_path / "shards"
    shutil.copytree(folders / "shards", folder)
    index = folder / "model.safetensors.index.json"
    shard = sorted(set(json.loads(index.read_text())["weight_map"].values()))[-1]
    (folder / shard).unlink()
    with pytest.raises(
        ElectraError, match=rf"names the shard '{shard}', which is not a file beside"
    ):
        read_state_dict(folder)
    index.write_text('{"metadata": {}}')
    with pytest.raises(ElectraError, match=r"a shard index is JSON with a \"weight_map\""):
        read_state_dict(folder)
    index.write_text('{"weight_map": {"w": "../outside.safetensors"}}')
    with pytest.raises(ElectraError, match="which is not a file beside it"):
        read_state_dict(folder)
