"""Tagging and QA on the user's own files (issue 32): CoNLL-2003 sentences rewritten as JSONL with
a renamed tag set and as CoNLL columns with an extra column, hand-made SQuAD JSON and flat JSONL
records, each fine-tuned end to end with a tiny model; metrics recomputed from predictions.jsonl
independently (seqeval directly, EM/F1 by the small implementation below); the linear QA head
trained and decoded; and every bad input as one error line naming its file and line."""

from __future__ import annotations

import json
import re
import string
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file

from electra.errors import ElectraError
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.qa import QaTask
from electra.tasks.settings import QaSettings, TaggingSettings
from electra.tasks.squad import SquadTask
from electra.tasks.tagging import TaggingTask

from ..conftest import CONTEXT, qa, shared_data, squad_file, tiny_model_config

RENAMED = {"PER": "PERSON", "LOC": "PLACE", "ORG": "COMPANY", "MISC": "OTHER"}
FAST = dict(batch_size=8, lr=3e-3, progress=False, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def conll_sentences():
    """The first 40 sentences of CoNLL-2003's training file: (words, tags) pairs."""
    path = shared_data("conll2003", "train.txt")
    sentences = TaggingTask().read(path, "train")[:40]
    return [(list(s.words), list(s.tags)) for s in sentences]


@pytest.fixture(scope="module")
def conll_model(tmp_path_factory, conll_sentences):
    """A tiny random discriminator whose vocabulary covers the sentences' words."""
    from electra.data.tokenizer import train_tokenizer
    from electra.folders.model_folder import save_pretrained
    from electra.model.electra.modeling import ElectraForPreTraining

    root = tmp_path_factory.mktemp("conll_model")
    (root / "c.txt").write_text("\n".join(" ".join(w) for w, _ in conll_sentences) + "\n")
    tokenizer = train_tokenizer([root / "c.txt"], vocab_size=600, min_frequency=1)
    torch.manual_seed(0)
    cfg = tiny_model_config(vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=128)
    save_pretrained(ElectraForPreTraining(cfg), root / "model", tokenizer)
    return root / "model"


def rename(tag):
    return tag if tag == "O" else f"{tag[:2]}{RENAMED[tag[2:]]}"


def read_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def seed_metrics(out):
    return json.loads((out / "results.json").read_text())["per_seed"][0]["metrics"]


def assert_entity_scores_recomputed(out):
    from seqeval.metrics import f1_score, precision_score, recall_score

    rows = read_rows(out / "seed_0" / "predictions.jsonl")
    gold, pred = [r["label"] for r in rows], [r["prediction"] for r in rows]
    assert all(len(g) == len(p) for g, p in zip(gold, pred, strict=True))
    metrics = seed_metrics(out)
    assert metrics["f1"] == pytest.approx(100 * f1_score(gold, pred, zero_division=0))
    assert metrics["precision"] == pytest.approx(100 * precision_score(gold, pred, zero_division=0))
    assert metrics["recall"] == pytest.approx(100 * recall_score(gold, pred, zero_division=0))
    return rows


# --- tagging --------------------------------------------------------------------------------------


def near_copies(sentences):
    """Training sentences with one word more (an `O`): not training rows, which a dev file may
    not hold, yet near enough for a few epochs' memory to show in the dev score."""
    return [([*words, "indeed"], [*tags, "O"]) for words, tags in sentences]


def test_tagging_jsonl_with_a_renamed_tag_set(tmp_path, conll_sentences, conll_model):
    from electra.finetuning.run import finetune
    from electra.folders.finetuned import load_finetuned

    data = tmp_path / "data"
    data.mkdir()
    records = [
        json.dumps({"id": f"s{i}", "tokens": w, "tags": [rename(t) for t in tags]})
        for i, (w, tags) in enumerate(conll_sentences)
    ]
    (data / "train.jsonl").write_text("\n".join(records) + "\n")
    near = [
        json.dumps({"id": f"s{i}", "tokens": w, "tags": [rename(t) for t in tags]})
        for i, (w, tags) in enumerate(near_copies(conll_sentences[:16]))
    ]
    (data / "dev.jsonl").write_text("\n".join(near) + "\n")
    out = tmp_path / "ft"
    finetune(conll_model, "tagging", data, out, FinetuneConfig(epochs=8, **FAST))
    expected = ("O",) + tuple(f"{p}-{k}" for k in sorted(RENAMED.values()) for p in "BI")
    head = json.loads((out / "seed_0" / "finetune.json").read_text())["head"]
    assert tuple(head["labels"]) == expected  # 'O', then each type's B- and I-, alphabetically
    rows = assert_entity_scores_recomputed(out)
    assert rows[0]["id"] == "s0" and rows[0]["label"] == [
        *(rename(t) for t in conll_sentences[0][1]),
        "O",
    ]
    assert {t for r in rows for t in r["prediction"]} <= set(expected)
    assert seed_metrics(out)["f1"] > 0  # 8 epochs memorise some of the 16 sentences
    task, *_ = load_finetuned(out)  # the tag set comes back with the model
    assert task.name == "tagging" and task.labels == expected


def test_tagging_conll_columns_with_a_tag_column(tmp_path, conll_sentences, conll_model):
    from electra.finetuning.run import finetune

    data = tmp_path / "data"
    data.mkdir()

    def conll(sentences):  # word, POS stand-in, tag, then an extra column after the tag
        return "-DOCSTART- x O x\n\n" + "".join(
            "".join(f"{w}\tNN\t{t}\t{i}\n" for i, (w, t) in enumerate(zip(*s, strict=True))) + "\n"
            for s in sentences
        )

    (data / "train.conll").write_text(conll(conll_sentences))
    (data / "dev.conll").write_text(conll(near_copies(conll_sentences[:8])))
    (data / "test.conll").write_text("".join(f"{w}\n" for w in conll_sentences[0][0]) + "\n")
    task = TaggingTask(TaggingSettings(tag_column=2))
    train = task.read(data / "train.conll", "train")
    assert [list(s.words) for s in train] == [w for w, _ in conll_sentences]
    assert [list(s.tags) for s in train] == [t for _, t in conll_sentences]
    out = tmp_path / "ft"
    finetune(
        conll_model,
        "tagging",
        data,
        out,
        FinetuneConfig(epochs=1, tagging=TaggingSettings(tag_column=2), **FAST),
    )
    assert_entity_scores_recomputed(out)
    (tested,) = read_rows(out / "seed_0" / "test_predictions.jsonl")  # words alone: predicted
    assert tested["label"] is None and len(tested["prediction"]) == len(conll_sentences[0][0])
    # Without --tag-column the last column (the extra one) is taken for the tag, and refused.
    with pytest.raises(ElectraError, match=r"train.conll, line 3, column 4: tag '0' is not IOB"):
        TaggingTask().read(data / "train.conll", "train")


def bad_tagging(tmp_path, name, text, split="train", task=None, **kwargs):
    path = tmp_path / name
    path.write_text(text)
    task = task or TaggingTask(TaggingSettings(**kwargs))
    with pytest.raises(ElectraError) as e:
        task.read(path, split)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


def test_tagging_bad_input_names_file_line_and_what_to_do(tmp_path):
    message = bad_tagging(tmp_path, "a.txt", "EU NNP B-ORG\nrejects VBZ\n")
    assert "line 2: 2 columns where line 1 has 3" in message
    message = bad_tagging(tmp_path, "b.jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n')
    assert "line 1: 2 tokens but 1 tags" in message
    message = bad_tagging(tmp_path, "c.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": []}')
    assert "line 2: empty tokens list" in message
    message = bad_tagging(tmp_path, "d.jsonl", '{"tokens": ["a", " "], "tags": ["O", "O"]}\n')
    assert "line 1: token 1 is ' '" in message
    message = bad_tagging(tmp_path, "e.tsv", "EU\tB-ORG\n\tO\n")
    assert "line 2, column 1: empty field" in message
    message = bad_tagging(tmp_path, "f.txt", "EU NNP PER\n")
    assert "line 1, column 3: tag 'PER' is not IOB" in message
    message = bad_tagging(tmp_path, "g.txt", "EU NNP B-ORG\n", tag_column=5)
    assert "line 1: tag column 5 is outside the line's 3 columns" in message
    message = bad_tagging(tmp_path, "h.txt", "EU\nrejects\n")
    assert "line 1: a word without a tag" in message
    message = bad_tagging(tmp_path, "i.jsonl", '{"tokens": ["a"]}\n', split="dev")
    assert 'line 1: no "tags"' in message
    message = bad_tagging(tmp_path, "j.jsonl", "\n\n")
    assert "has no sentences" in message
    message = bad_tagging(tmp_path, "k.csv", "EU,B-ORG\n")
    assert "tagging reads .conll, .txt, .tsv, .jsonl files, not .csv" in message
    # A dev tag the training file never had: the model could not predict it.
    unfitted = TaggingTask()
    (tmp_path / "train.txt").write_text("EU B-ORG\nrejects O\n")
    train = unfitted.read(tmp_path / "train.txt", "train")
    task = unfitted.fit(train, tmp_path / "train.txt")
    assert task.labels == ("O", "B-ORG", "I-ORG") and unfitted.labels == ()
    message = bad_tagging(tmp_path, "dev.txt", "EU B-ORG\nPeter B-PER\n", split="dev", task=task)
    assert "line 2, column 2: tag 'B-PER' is not in the training file's tag set" in message
    # A test file may hold words alone; its sentences are predicted, not scored.
    (tmp_path / "test.txt").write_text("EU\nrejects\n\nPeter\n")
    test = task.read(tmp_path / "test.txt", "test")
    assert [s.words for s in test] == [("EU", "rejects"), ("Peter",)] and test[0].tags is None
    # `electra predict` reads either format and ignores the tags, unknown ones included.
    assert [s.words for s in task.read_inputs(tmp_path / "dev.txt")] == [("EU", "Peter")]
    (tmp_path / "p.jsonl").write_text('{"tokens": ["EU"], "tags": ["B-FOO"]}\n')
    assert task.read_inputs(tmp_path / "p.jsonl")[0].tags is None


def test_the_conll2003_preset_keeps_its_tag_set():
    from electra.tasks import get_task

    task = get_task("conll2003")
    assert task.name == "conll2003" and task.labels[:3] == ("O", "B-PER", "I-PER")


# --- question answering ---------------------------------------------------------------------------


def normalize(text):
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def em_f1(prediction, golds):
    """The SQuAD scripts' EM and F1 against a question's answers ([] unanswerable: "" only)."""
    golds = [g for g in golds if normalize(g)] or [""]
    em = max(float(normalize(prediction) == normalize(g)) for g in golds)

    def f1(gold):
        p, g = normalize(prediction).split(), normalize(gold).split()
        if not p or not g:
            return float(p == g)
        common = sum((Counter(p) & Counter(g)).values())
        return 0.0 if not common else 2 * common / (len(p) + len(g))

    return em, max(f1(g) for g in golds)


def assert_qa_scores_recomputed(out, exact_key):
    rows = read_rows(out / "seed_0" / "predictions.jsonl")
    pairs = [em_f1(r["prediction"], r["label"]) for r in rows]
    metrics = seed_metrics(out)
    assert metrics[exact_key] == pytest.approx(100 * sum(e for e, _ in pairs) / len(pairs))
    assert metrics["f1"] == pytest.approx(100 * sum(f for _, f in pairs) / len(pairs))
    return rows


QUESTIONS = [
    qa("q1", "where was the car ?", "Paris"),
    qa("q2", "who sat on the mat ?", "Mary"),
    qa("q3", "what was red ?", "The big red car"),
    qa("q4", "where did john go ?", "the store"),
]
QA_CFG = dict(epochs=2, max_seq_len=32, doc_stride=8, **FAST)


def flat(question):
    """A SQuAD question as the flat record HF's datasets write."""
    answers = question["answers"]
    return {
        "id": question["id"],
        "question": question["question"],
        "context": CONTEXT,
        "answers": {
            "text": [a["text"] for a in answers],
            "answer_start": [a["answer_start"] for a in answers],
        },
    }


def test_qa_squad_json_official_head(tmp_path, tiny_pretrained):
    from electra.finetuning.run import finetune

    data = tmp_path / "data"
    data.mkdir()
    questions = [*QUESTIONS, qa("q5", "what is money ?", None, impossible=True)]
    squad_file(data / "train.json", questions)
    # dev: train's questions reversed, each a word longer (a training question is refused)
    squad_file(
        data / "dev.json", [{**q, "question": f"so {q['question']}"} for q in questions[::-1]]
    )
    out = tmp_path / "ft"
    finetune(tiny_pretrained, "qa", data, out, FinetuneConfig.from_values(QA_CFG, "test"))
    head = json.loads((out / "seed_0" / "finetune.json").read_text())["head"]
    assert head == {"qa_head": "official", "version": "2.0"}
    rows = assert_qa_scores_recomputed(out, "exact")
    assert rows[0]["label"] == [] and rows[4]["label"] == ["Paris"]  # dev is reversed
    assert {"HasAns_exact", "NoAns_exact", "best_f1"} <= set(seed_metrics(out))


def test_qa_flat_jsonl_linear_head(tmp_path, tiny_pretrained):
    from electra.finetuning.results import score_predictions
    from electra.finetuning.run import finetune
    from electra.folders.finetuned import load_finetuned

    data = tmp_path / "data"
    data.mkdir()
    records = [flat(q) for q in QUESTIONS]
    records[1]["answers"] = [{"text": "Mary", "answer_start": CONTEXT.index("Mary")}]  # a list
    records.append({**flat(QUESTIONS[0]), "id": "none", "question": "what is money ?"})
    records[-1]["answers"] = {"text": [], "answer_start": []}  # unanswerable, as HF writes it
    lines = "\n".join(json.dumps(r) for r in records) + "\n"
    (data / "train.jsonl").write_text(lines)
    near = [{**r, "question": f"so {r['question']}"} for r in records]  # train's are refused
    (data / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in near) + "\n")
    unknown = {k: v for k, v in records[0].items() if k != "answers"}
    (data / "test.jsonl").write_text(json.dumps(unknown) + "\n")
    out = tmp_path / "ft"
    cfg = FinetuneConfig.from_values({**QA_CFG, "epochs": 5, "qa_head": "linear"}, "test")
    finetune(tiny_pretrained, "qa", data, out, cfg)
    seed = out / "seed_0"
    assert json.loads((seed / "config.json").read_text())["architectures"] == [
        "ElectraForSpanQuestionAnswering"
    ]
    weights = load_file(seed / "model.safetensors")
    head = {k: v.shape for k, v in weights.items() if not k.startswith("electra.")}
    assert head == {"qa_outputs.weight": (2, 32), "qa_outputs.bias": (2,)}  # HF's names
    rows = assert_qa_scores_recomputed(out, "exact")
    assert rows[-1]["label"] == [] and "NoAns_total" in seed_metrics(out)
    # `electra score` of the predictions knows neither head nor threshold, and agrees.
    assert score_predictions(QaTask(), seed / "predictions.jsonl") == seed_metrics(out)
    (tested,) = read_rows(seed / "test_predictions.jsonl")  # no answers given: predicted only
    assert tested["id"] == "q1" and tested["label"] is None
    losses = json.loads((out / "results.json").read_text())["per_seed"][0]["train_loss"]
    assert losses[-1] < losses[0]  # the start/end cross-entropy goes down
    task, model, *_ = load_finetuned(out)
    assert task.qa_head == "linear" and task.null_threshold == 0.0 and task.version == "2.0"
    assert type(model).__name__ == "ElectraForSpanQuestionAnswering"


def test_qa_version_comes_from_the_training_file(tmp_path):
    v1 = tmp_path / "train.json"
    squad_file(v1, [{k: v for k, v in q.items() if k != "is_impossible"} for q in QUESTIONS])
    unfitted = QaTask()
    task = unfitted.fit(unfitted.read(v1, "train"), v1)
    assert task.version == "1.1" and task.baseline([]) is None and unfitted.version is None
    squad_file(tmp_path / "dev.json", [qa("z", "what is money ?", None, impossible=True)])
    with pytest.raises(ElectraError, match=r"dev.json: question z has no answer, but the train"):
        task.read(tmp_path / "dev.json", "dev")
    squad_file(tmp_path / "train2.json", QUESTIONS)  # "is_impossible": false throughout: 2.0
    train2 = tmp_path / "train2.json"
    assert unfitted.fit(unfitted.read(train2, "train"), train2).version == "2.0"
    (tmp_path / "t.jsonl").write_text(json.dumps(flat(QUESTIONS[0])) + "\n")
    assert (
        unfitted.fit(unfitted.read(tmp_path / "t.jsonl", "train"), tmp_path / "t.jsonl").version
        == "1.1"
    )


def test_linear_head_decoding_and_its_null_rule(tmp_path, task_tokenizer):
    """The best start <= end span by start + end logit; no answer when start[0] + end[0] beats
    the best span by more than the threshold (0.0 for this head, HF's default)."""
    questions = QaTask().read(squad_file(tmp_path / "d.json", [QUESTIONS[0]]), "dev")
    task = SquadTask("2.0", QaSettings(doc_stride=64, max_query_length=16, qa_head="linear"))
    assert task.null_threshold == 0.0 and task.token_outputs == ("start_logits", "end_logits")
    for threshold in (-2.75, 1.5):
        given = QaSettings(null_threshold=threshold, qa_head="linear")
        assert SquadTask("2.0", given).null_threshold == threshold
    enc = task.encode(questions, task_tokenizer, max_len=64, training=False)
    assert len(enc) == 1
    offsets = enc.meta["offsets"][0]
    pos = next(p for p, off in enumerate(offsets) if off and off[0] == CONTEXT.index("Paris"))
    start, end = torch.zeros(1, 64), torch.zeros(1, 64)
    start[0, pos], end[0, pos] = 5.0, 4.0
    end[0, pos - 1] = 8.0  # an end before the start is never taken
    start[0, 0], end[0, 0] = 4.0, 4.0
    pred = task.decode(questions, enc, {"start_logits": start, "end_logits": end})[0]
    assert pred["best_span"] == pred["prediction"] == "Paris" and pred["null_score"] == -1.0
    start[0, 0] = 6.0
    pred = task.decode(questions, enc, {"start_logits": start, "end_logits": end})[0]
    assert pred["prediction"] == "" and pred["best_span"] == "Paris" and pred["null_score"] == 1.0


def bad_qa(tmp_path, name, text, split="train"):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ElectraError) as e:
        QaTask().read(path, split)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


def test_qa_bad_input_names_file_line_and_what_to_do(tmp_path):
    good = json.dumps(flat(QUESTIONS[0]))
    moved = {**flat(QUESTIONS[1]), "answers": {"text": ["Mary"], "answer_start": [3]}}
    message = bad_qa(tmp_path, "a.jsonl", good + "\n" + json.dumps(moved) + "\n")
    assert "line 2 (question q2): answer 'Mary' is not at offset 3" in message
    assert "correct answer_start" in message
    message = bad_qa(tmp_path, "b.jsonl", json.dumps({**flat(QUESTIONS[0]), "question": " "}))
    assert "line 1 (question q1): empty question" in message
    message = bad_qa(tmp_path, "c.jsonl", json.dumps({**flat(QUESTIONS[0]), "context": ""}))
    assert "line 1 (question q1): empty context" in message
    no_answers = {k: v for k, v in flat(QUESTIONS[0]).items() if k != "answers"}
    message = bad_qa(tmp_path, "d.jsonl", json.dumps(no_answers), split="dev")
    assert 'line 1 (question q1): no "answers"' in message
    message = bad_qa(tmp_path, "e.jsonl", good + "\n" + good + "\n")
    assert "line 2: id 'q1' repeats line 1" in message
    message = bad_qa(tmp_path, "f.jsonl", good + "\n{not json\n")
    assert "line 2: not JSON" in message
    message = bad_qa(tmp_path, "g.jsonl", json.dumps({**flat(QUESTIONS[0]), "answers": "Paris"}))
    assert 'line 1 (question q1): "answers" must be' in message
    message = bad_qa(tmp_path, "h.txt", good)
    assert "qa reads .json (SQuAD format) or .jsonl (flat records) files, not .txt" in message
    # SQuAD JSON: the offset check, and empty texts, at the question's line.
    squad_file(tmp_path / "i.json", [QUESTIONS[0], qa("bad", "who ?", "Mary", start=0)])
    lines = (tmp_path / "i.json").read_text().splitlines()
    line = next(i for i, t in enumerate(lines, start=1) if '"bad"' in t)
    message = bad_qa(tmp_path, "i.json", (tmp_path / "i.json").read_text())
    assert f"line {line} (question bad): answer 'Mary' is not at offset 0" in message
    squad_file(tmp_path / "j.json", [QUESTIONS[0], {**qa("empty", "", "Mary")}])
    lines = (tmp_path / "j.json").read_text().splitlines()
    line = next(i for i, t in enumerate(lines, start=1) if '"empty"' in t)
    message = bad_qa(tmp_path, "j.json", (tmp_path / "j.json").read_text())
    assert f"line {line} (question empty): empty question" in message
    squad_file(tmp_path / "k.json", [QUESTIONS[0], QUESTIONS[1], QUESTIONS[0]])
    lines = (tmp_path / "k.json").read_text().splitlines()
    line = [i for i, t in enumerate(lines, start=1) if '"q1"' in t][1]
    message = bad_qa(tmp_path, "k.json", (tmp_path / "k.json").read_text())
    assert f"line {line} (question q1): repeated id" in message
    # A test record may leave its answers out: predicted, not scored; so may `electra predict`'s.
    (tmp_path / "test.jsonl").write_text(json.dumps(no_answers) + "\n")
    assert QaTask().read(tmp_path / "test.jsonl", "test")[0].answers == ()
    assert QaTask().read_inputs(tmp_path / "test.jsonl")[0].question == "where was the car ?"


def test_a_bad_file_stops_the_command_before_anything_is_written(tmp_path, capsys, tiny_pretrained):
    from electra.cli.main import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"tokens": ["a", "b"], "tags": ["O"]}\n')
    (data / "dev.jsonl").write_text('{"tokens": ["a"], "tags": ["O"]}\n')
    out = tmp_path / "out"
    argv = ["finetune", "--model", tiny_pretrained, "--task", "tagging", "--data", data]
    code = main([str(a) for a in [*argv, "--out", out]])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("electra: error:")]
    assert code == 2 and len(lines) == 1, err
    assert "train.jsonl, line 1: 2 tokens but 1 tags" in lines[0]
    assert not out.exists() and not any(tmp_path.glob(".out*"))


@pytest.mark.parametrize("qa_head", ["official", "linear"])
def test_qa_predicts_batches_narrower_than_n_best(tmp_path, task_tokenizer, qa_head):
    """Batches are trimmed to their longest row: one of fewer tokens than n_best candidates
    still joins the others (each head's outputs keep a common width)."""
    from electra.config import RuntimeConfig
    from electra.engine.runtime import Runtime
    from electra.finetuning.inference import predict
    from electra.tasks.qa_files import Question

    long = [Question(f"l{i}", "where was the car ?", CONTEXT, (), False) for i in range(8)]
    short = Question("s", "who ?", "Mary sat .", (), False)
    task = SquadTask("2.0", QaSettings(qa_head=qa_head))
    enc = task.encode([*long, short], task_tokenizer, max_len=64, training=False)
    torch.manual_seed(0)
    model = task.build_model(tiny_model_config(vocab_size=task_tokenizer.get_vocab_size()))
    fp32 = Runtime(torch.device("cpu"), RuntimeConfig(precision="fp32"))
    rows = predict(task, model, [*long, short], enc, fp32)
    assert [r["id"] for r in rows] == [*(q.id for q in long), "s"]
    assert rows[-1]["best_span"] in ("", "Mary", "Mary sat", "Mary sat .", "sat", "sat .", ".")


@pytest.mark.parametrize(
    ("task", "name", "raw"),
    [
        ("tagging", "train.txt", b"Caf\xe9 B-LOC\n"),
        (
            "qa",
            "train.jsonl",
            b'{"id": "1", "question": "o\xf9?", "context": "c", "answers": []}\n',
        ),
        ("conll2003", "train.txt", b"Caf\xe9 NNP B-NP B-LOC\n"),
    ],
)
def test_a_file_not_in_utf8_is_one_line_naming_it(tmp_path, task, name, raw):
    from electra.finetuning.predict import input_chunks
    from electra.finetuning.results import read_split
    from electra.tasks import get_task

    path = tmp_path / name
    path.write_bytes(raw)
    for read in (
        lambda: read_split(get_task(task), get_task(task).resolve({"train": path}), "train"),
        lambda: list(input_chunks(get_task(task), str(path))),
    ):
        with pytest.raises(ElectraError) as e:
            read()
        message = str(e.value)
        assert message.startswith(f"{path}: not UTF-8 text (") and "\n" not in message
        assert message.endswith("): save it as UTF-8")
