"""Reading corpora: formats, path resolution and robustness against broken input."""

import gzip
import json
from pathlib import Path

import pytest

from electra.data.corpus import ReadStats, iter_documents, resolve_paths
from electra.errors import ElectraError

from ..conftest import shared_data as need


def read(*paths, **kwargs) -> list[list[str]]:
    return list(iter_documents([Path(p) for p in paths], **kwargs))


PLAIN = "first line\n  second line  \n\n\n second doc\n\r\nthird doc\n"
PLAIN_DOCS = [["first line", "second line"], ["second doc"], ["third doc"]]


def test_plain_text_blank_lines_and_file_end_separate_documents(tmp_path):
    (tmp_path / "a.txt").write_text(PLAIN)
    (tmp_path / "b.txt").write_text("no trailing newline")
    stats = ReadStats()
    docs = list(iter_documents([tmp_path / "a.txt", tmp_path / "b.txt"], stats))
    assert docs == [*PLAIN_DOCS, ["no trailing newline"]]
    assert (stats.files, stats.documents, stats.lines) == (2, 4, 8)


def test_jsonl_each_record_is_one_document(tmp_path):
    records = [
        {"text": "line one\nline two\n\nline three", "id": 1},
        {"text": "  \n"},
        {"text": "b"},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    assert read(path) == [["line one", "line two", "line three"], ["b"]]


def test_gzip_of_plain_text_and_jsonl(tmp_path):
    with gzip.open(tmp_path / "a.txt.gz", "wt") as f:
        f.write(PLAIN)
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write(json.dumps({"text": "x\n\ny"}) + "\n")
    assert read(tmp_path / "a.txt.gz") == PLAIN_DOCS
    assert read(tmp_path / "b.jsonl.gz") == [["x", "y"]]


def test_corrupt_gzip_is_a_user_error(tmp_path):
    (tmp_path / "bad.txt.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ElectraError, match="bad.txt.gz"):
        read(tmp_path / "bad.txt.gz")


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n{"text": broken\n')
    with pytest.raises(ElectraError, match=r"bad.jsonl line 2 is not valid JSON"):
        read(path)
    path.write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(ElectraError, match=r"bad.jsonl line 2 has no string \"text\""):
        read(path)
    path.write_text('{"text": 3}\n')
    with pytest.raises(ElectraError, match="line 1"):
        read(path)


WIKI = """<doc id="1" url="u1" title="Alpha">
Alpha

Alpha is the first letter.
It has a second paragraph.
</doc>
<doc id="2" url="u2" title="Beta">
Beta
Beta follows alpha.

</doc>
<doc id="3" url="u3" title="Empty">
Empty
</doc>
"""


def test_wikiextractor_blocks_are_documents_without_title_lines(tmp_path):
    path = tmp_path / "wiki_00"
    path.write_text(WIKI)
    assert read(path) == [
        ["Alpha is the first letter.", "It has a second paragraph."],
        ["Beta follows alpha."],
    ]


def test_wikiextractor_on_real_file_excerpt(tmp_path):
    source = need("wikipedia-en/AA/wiki_00")
    with source.open(encoding="utf-8") as f:
        lines = [next(f) for _ in range(400)]
    end = max(i for i, line in enumerate(lines) if line.strip() == "</doc>")
    excerpt = tmp_path / "wiki_excerpt"
    excerpt.write_text("".join(lines[: end + 1]), encoding="utf-8")
    starts = [i for i, line in enumerate(lines[: end + 1]) if line.startswith("<doc ")]
    titles = [lines[i + 1].strip() for i in starts]

    docs = read(excerpt)
    assert len(docs) == len(starts) >= 2
    assert titles[0] == "Anarchism"
    for doc, title in zip(docs, titles, strict=True):
        assert doc[0] != title  # the repeated title line is dropped
        assert all(line and not line.startswith(("<doc", "</doc")) for line in doc)
    assert docs[0][0].startswith("Anarchism is a political philosophy")


def test_real_wikipedia_file_has_one_document_per_doc_block():
    source = need("wikipedia-en/AA/wiki_00")
    blocks = source.read_text(encoding="utf-8").count("<doc ")
    stats = ReadStats()
    docs = list(iter_documents([source], stats))
    assert len(docs) == blocks == stats.documents
    assert stats.bad_utf8_lines == 0 and stats.long_lines == 0


def test_invalid_utf8_is_counted_and_replaced(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\nbad \xff\xfe line\n\nalso bad \xc3\n\xef\xbb\xbfok\n")
    stats = ReadStats()
    docs = list(iter_documents([path], stats))
    assert docs == [["good line", "bad \ufffd\ufffd line"], ["also bad \ufffd", "\ufeffok"]]
    assert stats.bad_utf8_lines == 2


def test_byte_order_mark_at_file_start_is_dropped(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf<doc id='1'>\ntitle\nbody\n</doc>\n")
    assert read(path) == [["body"]]


def test_five_megabyte_line_is_read_in_pieces_and_counted(tmp_path):
    path = tmp_path / "long.txt"
    with path.open("wb") as f:
        f.write(b"before\n")
        f.write(b"\xc3\xa9" * 2_500_000 + b"\n")  # 5 MB of two-byte characters
        f.write(b"after\n")
    stats = ReadStats()
    docs = list(iter_documents([path], stats, max_line_chars=1000))
    assert docs == [["before", *["\u00e9" * 1000] * 2500, "after"]]  # nothing lost
    assert stats.long_lines == 1 and stats.bad_utf8_lines == 0


def test_long_line_cut_inside_a_multibyte_character_is_not_bad_utf8(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"a" + "\u20ac".encode() * 50 + b"\n")
    stats = ReadStats()
    docs = list(iter_documents([path], stats, max_line_chars=10))
    assert "".join(docs[0]) == "a" + "\u20ac" * 50 and max(map(len, docs[0])) == 10
    assert (stats.long_lines, stats.bad_utf8_lines) == (1, 0)


def test_long_document_is_yielded_in_parts(tmp_path):
    path = tmp_path / "one_doc.txt"
    path.write_text("".join(f"line {i:03d}\n" for i in range(100)))
    stats = ReadStats()
    docs = list(iter_documents([path], stats, max_document_chars=80))
    assert [line for doc in docs for line in doc] == [f"line {i:03d}" for i in range(100)]
    assert all(len(doc) == 10 for doc in docs)
    assert stats.split_documents == 1 and stats.documents == 10


def test_resolve_files_folders_and_globs(tmp_path):
    for name in ["b.txt", "a.txt", "sub/c.jsonl", "sub/deeper/d.txt.gz", ".hidden", "sub/.git/x"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    folder = resolve_paths([str(tmp_path)])
    assert [p.relative_to(tmp_path).as_posix() for p in folder] == [
        "a.txt",
        "b.txt",
        "sub/c.jsonl",
        "sub/deeper/d.txt.gz",
    ]
    assert resolve_paths([str(tmp_path / "*.txt")]) == [tmp_path / "a.txt", tmp_path / "b.txt"]
    recursive = resolve_paths([str(tmp_path / "**" / "*.jsonl")])
    assert recursive == [tmp_path / "sub" / "c.jsonl"]
    # Overlapping specs are de-duplicated and the result is sorted.
    both = resolve_paths([str(tmp_path / "b.txt"), str(tmp_path), str(tmp_path / "a.txt")])
    assert both == folder


def test_missing_path_is_a_user_error(tmp_path):
    with pytest.raises(ElectraError, match="corpus path not found: .*nope.txt"):
        resolve_paths([str(tmp_path / "nope.txt")])
    with pytest.raises(ElectraError, match="corpus path not found"):
        resolve_paths([str(tmp_path / "*.missing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ElectraError, match="empty"):
        resolve_paths([str(tmp_path / "empty")])
    with pytest.raises(ElectraError, match="no corpus files"):
        resolve_paths([])


def write_tables(folder: Path, texts: list) -> dict[str, Path]:
    """The same rows as Parquet, an Arrow stream (`datasets`' save_to_disk) and an Arrow file."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": list(range(len(texts))), "text": texts})
    paths = {k: folder / f"{k}.{ext}" for k, ext in [("pq", "parquet"), ("st", "arrow")]}
    pq.write_table(table, paths["pq"], row_group_size=2)
    with pa.ipc.new_stream(paths["st"], table.schema) as w:
        w.write_table(table, max_chunksize=2)
    paths["file"] = folder / "file.arrow"
    with pa.ipc.new_file(paths["file"], table.schema) as w:
        w.write_table(table, max_chunksize=2)
    return paths


def test_parquet_and_arrow_rows_are_documents_like_jsonl_records(tmp_path):
    texts = ["a b\n\n c ", None, "", "d\ne", "x" * 50, "last"]
    with open(tmp_path / "same.jsonl", "w") as f:
        for t in texts:
            if t is not None:
                f.write(json.dumps({"text": t}) + "\n")
    expected = read(tmp_path / "same.jsonl", max_line_chars=20)
    assert expected == [["a b", "c"], ["d", "e"], ["x" * 20, "x" * 20, "x" * 10], ["last"]]
    for path in write_tables(tmp_path / "t", texts).values():
        stats = ReadStats()
        assert list(iter_documents([path], stats, max_line_chars=20)) == expected, path
        assert (stats.documents, stats.long_lines) == (4, 1)


def test_a_table_without_a_text_column_names_its_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    with pytest.raises(ElectraError, match=r"t.parquet has no 'text' column \(it has: body\)"):
        read(tmp_path / "t.parquet")
    pq.write_table(pa.table({"text": [1]}), tmp_path / "n.parquet")
    with pytest.raises(ElectraError, match=r"column 'text' holds int64, not strings"):
        read(tmp_path / "n.parquet")
    (tmp_path / "junk.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(ElectraError, match=r"cannot read .*junk.arrow as arrow"):
        read(tmp_path / "junk.arrow")


def test_a_datasets_folder_reads_its_arrow_files_not_its_metadata(tmp_path):
    folder = tmp_path / "saved"
    write_tables(folder, ["one", "two"])
    (folder / "state.json").write_text('{"_data_files": []}')
    (folder / "dataset_info.json").write_text("{}")
    found = resolve_paths([str(folder)])
    assert [p.name for p in found] == ["file.arrow", "pq.parquet", "st.arrow"]
