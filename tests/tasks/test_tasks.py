"""The tasks' structure (issue 37 item 4): the own-data tasks are the bases and the benchmarks
configurations of them; each family has its own settings, flat on the command line and in old
`finetune.json` files; fitting to the training split is a step of its own, so reading a file
changes no task; the split files are resolved once; the two QA heads are strategies."""

import json
from dataclasses import asdict

import pytest
import torch

from electra.errors import ElectraError
from electra.folders.finetuned import FINETUNE_FILE, load_finetuned, save_finetuned
from electra.tasks import get_task
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.labelled import ClassificationTask, RegressionTask
from electra.tasks.qa import QaTask
from electra.tasks.qa_heads import NO_SPAN_NULL_SCORE, LinearHead, OfficialHead
from electra.tasks.settings import ClassificationSettings, QaSettings, TaggingSettings
from electra.tasks.tagging import TaggingTask

from ..conftest import tiny_model_config
from ..numerics import rounding_bound


def test_the_benchmarks_are_configurations_of_the_general_tasks():
    assert isinstance(get_task("sst2"), ClassificationTask)
    assert isinstance(get_task("stsb"), RegressionTask) and get_task("stsb").value_scale == 5.0
    assert isinstance(get_task("conll2003"), TaggingTask)
    assert isinstance(get_task("squad2"), QaTask) and get_task("squad1").version == "1.1"
    # Their labels, tags and versions are the benchmark's: nothing is fitted to a training file.
    sst2 = get_task("sst2")
    assert sst2.labels == ("0", "1") and sst2.fit([], "unused.tsv") is sst2
    assert get_task("conll2003").fit([], "unused.txt").labels[:3] == ("O", "B-PER", "I-PER")


def test_reading_a_file_changes_no_task_and_fit_gives_the_label_set(tmp_path, capsys):
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    train.write_text("id,text_a,text_b,label\n1,a,b,pos\n2,c,d,neg\n3,e,f,pos\n")
    dev.write_text("text_a,text_b,label\ng,h,neutral\n")
    task = get_task("classification")
    examples = task.read(train, "train")
    assert (task.labels, task.text_columns) == ((), ())  # as it was built
    fitted = task.fit(examples, train)
    assert fitted.labels == ("neg", "pos") and fitted.text_columns == ("text_a", "text_b")
    assert fitted.head_config()["labels"] == ["neg", "pos"] and task.labels == ()
    # The other splits are read by the fitted task: a label outside the set is refused.
    with pytest.raises(ElectraError, match=r"dev.csv, line 2, column 'label': label 'neutral'"):
        fitted.read(dev, "dev")
    assert capsys.readouterr().err == ""
    regression = get_task("regression")
    targets = tmp_path / "r.jsonl"
    targets.write_text('{"text": "a", "label": -4}\n{"text": "b", "label": 2.5}\n')
    scaled = regression.fit(regression.read(targets, "train"), targets)
    assert (scaled.scale, regression.scale) == (4.0, 0.0)


def test_tagging_fits_its_tag_set_and_a_given_one_is_kept(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("EU B-ORG\nrejects O\n\nPeter I-PER\n")
    task = TaggingTask(TaggingSettings(tag_column=-1))
    fitted = task.fit(task.read(path, "train"), path)
    assert fitted.labels == ("O", "B-ORG", "I-ORG", "B-PER", "I-PER") and task.labels == ()
    fixed = TaggingTask(tags=("O", "B-X", "I-X"))
    assert fixed.fit([], path) is fixed
    with pytest.raises(ElectraError, match="tag_column=0 is the word's column"):
        TaggingSettings(tag_column=0)


def test_each_family_has_its_settings_flat_or_nested():
    cfg = FinetuneConfig.from_values(
        {"lr": "1e-4", "qa_head": "linear", "text_columns": ["a", "b"], "tag_column": "2"},
        source="test",
    )
    assert cfg.lr == 1e-4 and cfg.qa == QaSettings(qa_head="linear")
    assert cfg.classification == ClassificationSettings(text_columns=("a", "b"))
    assert cfg.tagging.tag_column == 2
    # Saved nested (finetune.json, results.json), and read back alike.
    saved = json.loads(json.dumps(asdict(cfg)))
    assert saved["qa"]["qa_head"] == "linear" and "qa_head" not in saved
    assert FinetuneConfig.from_values(saved, source="test") == cfg
    assert get_task("qa", cfg).qa_head == "linear"
    assert get_task("classification", cfg).text_columns == ("a", "b")
    with pytest.raises(ElectraError, match=r"unknown setting 'text_column' in x \(did you mean"):
        FinetuneConfig.from_values({"text_column": "a"}, source="x")
    with pytest.raises(ElectraError, match=r"^qa_head='lin': use official or linear$"):
        FinetuneConfig.from_values({"qa_head": "lin"}, source="x")
    with pytest.raises(ElectraError, match=r"^doc_stride must be at least 1 \(got 0\)$"):
        QaSettings(doc_stride=0)


def test_a_finetune_json_saved_with_flat_settings_still_loads(tmp_path, task_tokenizer):
    """Models fine-tuned before the families had their own settings saved them flat."""
    task = QaTask(QaSettings(qa_head="linear", doc_stride=8)).with_head_config(
        {"qa_head": "linear", "version": "2.0"}
    )
    cfg = FinetuneConfig(max_seq_len=32, qa=QaSettings(qa_head="linear", doc_stride=8))
    model = task.build_model(tiny_model_config(vocab_size=task_tokenizer.get_vocab_size()))
    save_finetuned(model, task, task_tokenizer, cfg, tmp_path, tmp_path)
    info = json.loads((tmp_path / FINETUNE_FILE).read_text())
    flat = {k: v for k, v in info["config"].items() if k not in ("qa", "classification", "tagging")}
    for family in ("qa", "classification", "tagging"):
        flat.update(info["config"][family])
    (tmp_path / FINETUNE_FILE).write_text(json.dumps({**info, "config": flat}))
    loaded, _, _, loaded_cfg = load_finetuned(tmp_path)
    assert loaded_cfg.qa == cfg.qa and loaded_cfg.max_seq_len == 32
    assert (loaded.qa_head, loaded.version, loaded.doc_stride) == ("linear", "2.0", 8)


def test_the_split_files_are_resolved_once_and_a_bad_one_is_said_where_needed(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\na,x\nb,y\n")
    (tmp_path / "dev.csv").write_text("text,label\na,x\n")
    (tmp_path / "test.txt").write_text("a\n")
    files = get_task("classification").resolve(tmp_path)
    assert files.file("train") == tmp_path / "train.csv" and not files.given
    assert files["dev"] == {"dev": tmp_path / "dev.csv"}
    with pytest.raises(ElectraError, match=r"test.txt: unknown data format"):
        files.has("test")
    given = get_task("sst2").resolve({"train": tmp_path / "train.csv", "dev": tmp_path})
    assert given.given and given.file("train") == tmp_path / "train.csv"
    with pytest.raises(ElectraError, match=r"--dev .* is a folder"):
        given["dev"]
    with pytest.raises(ElectraError, match=r"^no test file for sst2: pass --test FILE$"):
        given["test"]
    with pytest.raises(ElectraError, match=r"^data not found: "):
        get_task("sst2").resolve(tmp_path / "nowhere")


@pytest.mark.numeric
def test_the_linear_head_ranks_start_plus_end_and_its_null_score_is_relative():
    head = LinearHead(n_best=2)
    row = {
        "start_logits": torch.tensor([0.0, 5.0, 1.0, 0.0]),
        "end_logits": torch.tensor([0.0, 0.0, 4.0, 1.0]),
    }
    candidates = {(s, e): score for s, e, score, _ in head.candidates(row)}
    assert set(candidates) == {(1, 2), (1, 3), (2, 2), (2, 3)} and candidates[(1, 2)] == 9.0
    _, _, score, log_prob = next(c for c in head.candidates(row) if c[:2] == (1, 2))
    norm = float(row["start_logits"].logsumexp(0) + row["end_logits"].logsumexp(0))
    # two log-sum-exps over 4 logits (of size 5 at most) and the sums: in float32, not exact
    assert log_prob == pytest.approx(score - norm, abs=rounding_bound(torch.float32, 4, 3, 5.0))
    outputs = {
        "start_logits": torch.tensor([[2.0, 0.0], [1.0, 0.0]]),
        "end_logits": torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
    }
    assert head.cls_scores(outputs) == [3.0, 2.0]
    spans = {0: (9.0, 0.0, 0, 1)}  # question 0's best span scores 9; question 1 has none
    assert head.null_scores({0: 2.0, 1: 3.0}, spans) == {0: -7.0, 1: NO_SPAN_NULL_SCORE}
    assert head.null_threshold == 0.0 and head.token_outputs == ("start_logits", "end_logits")


def test_the_official_head_ranks_by_log_probability_and_its_null_score_is_the_logit():
    head = OfficialHead(n_best=2)
    row = {
        "start_log_probs": torch.tensor([-0.1, -2.0]),
        "start_index": torch.tensor([3, 5]),
        "end_log_probs": torch.tensor([[-0.2, -3.0], [-0.5, -1.0]]),
        "end_index": torch.tensor([[4, 6], [5, 7]]),
    }
    found = [(s, e, round(score, 4)) for s, e, score, log_prob in head.candidates(row)]
    assert found == [(3, 4, -0.3), (3, 6, -3.1), (5, 5, -2.5), (5, 7, -3.0)]
    assert head.cls_scores({"answerable_logit": torch.tensor([0.5, -1.0])}) == [0.5, -1.0]
    assert head.null_scores({0: -1.0}, {}) == {0: -1.0}
    assert head.null_threshold == -2.75 and head.token_outputs == ()
    # The task's threshold is the head's unless the settings give one.
    assert QaTask().null_threshold == -2.75
    assert QaTask(QaSettings(qa_head="linear")).null_threshold == 0.0
    assert QaTask(QaSettings(null_threshold=1.0)).null_threshold == 1.0
