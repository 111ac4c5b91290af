"""Section chunking contract (SPEC §2.3)."""

from __future__ import annotations

from kbflow.ingest.chunking import chunk_markdown

DOC = """# Kafka consumer lag

Intro paragraph.

## Diagnosis

Check the group.

```bash
kafka-consumer-groups.sh --describe --group chat
```

| metric | meaning |
|---|---|
| records-lag-max | worst partition |

## Fix

### Scale consumers

Add consumers up to the partition count.
"""


def test_sections_carry_heading_path_and_never_cross_headings():
    chunks = chunk_markdown(DOC, max_chars=1000, overlap=100)
    paths = [c.heading_path for c in chunks]
    assert paths == [
        ("Kafka consumer lag",),
        ("Kafka consumer lag", "Diagnosis"),
        ("Kafka consumer lag", "Fix", "Scale consumers"),
    ]
    assert [c.index for c in chunks] == [0, 1, 2]
    assert chunks[1].text.startswith("Kafka consumer lag > Diagnosis\n\n")
    assert "Add consumers" not in chunks[1].text and "Check the group" not in chunks[2].text


def test_code_blocks_and_tables_stay_whole_when_they_fit():
    diag = chunk_markdown(DOC, max_chars=1000, overlap=100)[1].text
    assert "```bash\nkafka-consumer-groups.sh --describe --group chat\n```" in diag
    assert "| metric | meaning |\n|---|---|\n| records-lag-max | worst partition |" in diag


def test_long_prose_is_capped_with_overlap():
    sentences = " ".join(f"Sentence number {i} explains one more detail of the failure." for i in range(80))
    chunks = chunk_markdown(f"# T\n\n## Long\n\n{sentences}\n", max_chars=400, overlap=80)
    assert len(chunks) > 5
    assert all(len(c.text) <= 400 for c in chunks)
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        body_prev = prev.text.split("\n\n", 1)[1]
        body_next = nxt.text.split("\n\n", 1)[1]
        overlap = body_next.split("\n\n", 1)[0]
        assert body_prev.endswith(overlap) and 0 < len(overlap) <= 80  # next starts with prev's tail
    joined = " ".join(c.text for c in chunks)
    assert all(f"number {i} " in joined for i in range(80))  # nothing dropped


def test_oversize_code_block_splits_on_lines_and_keeps_fences():
    code = "\n".join(f"line {i:03d} = value" for i in range(100))
    chunks = chunk_markdown(f"# T\n\n```python\n{code}\n```\n", max_chars=300, overlap=50)
    assert len(chunks) > 3
    for c in chunks:
        body = c.text.split("\n\n", 1)[1]
        assert body.startswith("```python\n") and body.endswith("\n```") and len(c.text) <= 300
    seen = "".join(c.text for c in chunks)
    assert all(f"line {i:03d} = value" in seen for i in range(100))


def test_oversize_table_repeats_header():
    rows = "\n".join(f"| k{i} | v{i} |" for i in range(60))
    chunks = chunk_markdown(f"# T\n\n| key | value |\n|---|---|\n{rows}\n", max_chars=250, overlap=50)
    assert len(chunks) > 2
    assert all("| key | value |\n|---|---|" in c.text for c in chunks)


def test_chinese_prose_splits_without_spaces():
    text = "连接池耗尽时请求会排队等待。" * 120
    chunks = chunk_markdown(f"# 连接池\n\n{text}\n", max_chars=300, overlap=40)
    assert len(chunks) > 3 and all(len(c.text) <= 300 for c in chunks)


def test_headings_only_document_is_kept():
    chunks = chunk_markdown("# Only a title\n\n## And a heading\n", max_chars=500, overlap=50)
    assert len(chunks) == 1 and "Only a title" in chunks[0].text
