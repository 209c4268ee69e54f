"""Damaged files give errors that name the file, offset and kind; skip mode steps over them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sparktrain import errors, tfrecord

RECORDS = [b"alpha", b"", b"gamma-gamma"]
# Each record is 12 header bytes, the payload, and 4 CRC bytes.
STARTS = [0, 21, 37]
END = 37 + 16 + len(RECORDS[2])


def _file(tmp_path: Path) -> bytes:
    path = tmp_path / "good.tfrecord"
    with tfrecord.RecordWriter(str(path)) as w:
        w.write_many(RECORDS)
    data = path.read_bytes()
    assert len(data) == END
    return data


def _read(tmp_path: Path, data: bytes, **kw: object) -> tuple[list[bytes], list[dict[str, object]]]:
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(data)
    reader = tfrecord.RecordReader(str(path), **kw)
    return list(reader), reader.skipped


@pytest.mark.parametrize(
    ("record", "pos", "kind"),
    [
        (0, 0, "not_tfrecord"),  # the first header: this is no TFRecord file at all
        (1, 2, "length_crc_mismatch"),
        (1, 9, "length_crc_mismatch"),  # the length's CRC itself
        (2, 14, "payload_crc_mismatch"),  # a payload byte
        (2, 12 + 11 + 1, "payload_crc_mismatch"),  # the payload's CRC
    ],
)
def test_flipped_bits(tmp_path: Path, record: int, pos: int, kind: str) -> None:
    data = bytearray(_file(tmp_path))
    data[STARTS[record] + pos] ^= 0x10
    with pytest.raises(errors.TFRecordCorruptError) as info:
        _read(tmp_path, bytes(data))
    assert (info.value.kind, info.value.offset) == (kind, STARTS[record])
    assert info.value.path.endswith("bad.tfrecord")
    assert f"offset {STARTS[record]}" in str(info.value)

    records, skipped = _read(tmp_path, bytes(data), skip_corrupt=True)
    assert records == [r for i, r in enumerate(RECORDS) if i != record]
    assert [(s["offset"], s["bytes"], s["kind"]) for s in skipped] == [
        (STARTS[record], 16 + len(RECORDS[record]), kind)
    ]


def test_truncation_at_every_boundary(tmp_path: Path) -> None:
    data = _file(tmp_path)
    for cut in range(1, END):
        record = max(i for i, s in enumerate(STARTS) if s <= cut)
        within = cut - STARTS[record]
        if within == 0:
            assert _read(tmp_path, data[:cut])[0] == RECORDS[:record]
            continue
        kind = "truncated_header" if within < 12 else "truncated_payload"
        with pytest.raises(errors.TFRecordCorruptError) as info:
            _read(tmp_path, data[:cut])
        assert (info.value.kind, info.value.offset) == (kind, STARTS[record]), cut
        records, skipped = _read(tmp_path, data[:cut], skip_corrupt=True)
        assert records == RECORDS[:record]
        assert [(s["offset"], s["bytes"]) for s in skipped] == [(STARTS[record], within)]


def test_gzip_file_read_as_plain_says_so(tmp_path: Path) -> None:
    path = tmp_path / "x.tfrecord.gz"
    with tfrecord.RecordWriter(str(path)) as w:
        w.write(b"payload")
    with pytest.raises(errors.TFRecordCorruptError, match=r"(?i)gzip") as info:
        list(tfrecord.RecordReader(str(path), "NONE"))
    assert info.value.kind == "not_tfrecord"
    # Without an explicit compression the extension (or the magic bytes) decides.
    renamed = tmp_path / "x.bin"
    path.rename(renamed)
    assert list(tfrecord.RecordReader(str(renamed))) == [b"payload"]


def test_skip_mode_in_dataset_reader_reports_regions(tmp_path: Path) -> None:
    import pyarrow as pa

    good = tmp_path / "a.tfrecord"
    tfrecord.write_batches(str(good), pa.table({"v": [1, 2, 3]}))
    data = bytearray(good.read_bytes())
    first_len = struct.unpack("<Q", data[:8])[0]
    second = 16 + first_len
    data[second + 13] ^= 0xFF  # damage the second record's payload
    good.write_bytes(bytes(data))
    with pytest.raises(errors.TFRecordCorruptError):
        tfrecord.read(str(good), schema=pa.schema([("v", pa.int64())])).read_all()
    batches = tfrecord.read(str(good), schema=pa.schema([("v", pa.int64())]), skip_corrupt=True)
    assert batches.read_all().column("v").to_pylist() == [1, 3]
    assert [(s["offset"], s["kind"]) for s in batches.skipped] == [(second, "payload_crc_mismatch")]


def _masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C, in Python, to forge headers."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", _masked_crc(raw))


def test_a_gzip_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # A valid header claiming 8 GiB, then zeros: a few hundred kB compressed. The reader must
    # refuse the claim itself rather than buffer the zeros while it waits for 8 GiB.
    import gzip

    bomb = tmp_path / "bomb.tfrecord.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as f:
        f.write(_header(8 << 30))
        zeros = bytes(1 << 20)
        for _ in range(64):
            f.write(zeros)
    with pytest.raises(errors.TFRecordCorruptError) as info:
        list(tfrecord.RecordReader(str(bomb)))
    assert (info.value.kind, info.value.offset) == ("record_too_long", 0)
    assert "claims 8589934592 bytes" in str(info.value)


def test_a_record_over_a_chosen_limit_is_skipped_in_skip_mode(tmp_path: Path) -> None:
    data = _header(5000) + bytes(5000) + struct.pack("<I", _masked_crc(bytes(5000)))
    path = tmp_path / "long.tfrecord"
    with tfrecord.RecordWriter(str(tmp_path / "good.tfrecord")) as w:
        w.write_many([b"after"])
    path.write_bytes(data + (tmp_path / "good.tfrecord").read_bytes())
    reader = tfrecord.RecordReader(str(path), skip_corrupt=True, max_record_bytes=1000)
    assert list(reader) == [b"after"]
    assert [(s.kind, s.offset, s.bytes) for s in reader.skipped] == [("record_too_long", 0, 5016)]
    assert list(tfrecord.RecordReader(str(path))) == [bytes(5000), b"after"]


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_a_damaged_compressed_file_is_damage_not_an_io_error(tmp_path: Path, compression: str) -> None:
    import pyarrow as pa

    ext = ".gz" if compression == "GZIP" else ".zlib"
    table = pa.table({"v": list(range(20_000)), "s": [f"row {i}" * (i % 9) for i in range(20_000)]})
    whole = tmp_path / f"whole.tfrecord{ext}"
    tfrecord.write_batches(str(whole), table, compression=compression)
    cut = tmp_path / f"cut.tfrecord{ext}"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])

    strict: list[bytes] = []
    with pytest.raises(errors.TFRecordCorruptError) as info:
        strict.extend(tfrecord.RecordReader(str(cut)))
    assert info.value.kind == "damaged_compression"
    assert info.value.path.endswith(cut.name)
    assert info.value.offset == sum(16 + len(r) for r in strict), "the offset of the first record lost"
    assert "decompression failed" in str(info.value)
    assert "skip_corrupt" in str(info.value)

    reader = tfrecord.RecordReader(str(cut), skip_corrupt=True)
    assert list(reader) == strict
    assert [(s.kind, s.offset) for s in reader.skipped] == [("damaged_compression", info.value.offset)]

    # The batch reader keeps the rows before the damage, in order, and reports the region.
    batches = tfrecord.read(str(cut), skip_corrupt=True)
    kept = batches.read_all().column("v").to_pylist()
    assert kept == list(range(len(kept)))
    assert 0 < len(kept) < 20_000
    assert [s["kind"] for s in batches.skipped] == ["damaged_compression"]
    with pytest.raises(errors.TFRecordCorruptError, match="damaged compressed stream"):
        tfrecord.read(str(cut)).read_all()
