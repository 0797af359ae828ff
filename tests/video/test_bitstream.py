"""The messages inside a coded picture (vsr.video.bitstream): what is written reads back, goes where the
standards put it, and a damaged access unit gives what it still holds, never an exception.  FFmpeg's decoders
reading the written messages back from real streams is tested in test_captions.py and test_hdr10plus.py."""

from __future__ import annotations

import random

from vsr.video.bitstream import (escaped, inject, inject_obus, leb128, metadata_obu, nal_length_size, obus, sei_nal,
                                 t35_payloads, unescaped)

VPS = bytes([32 << 1, 1, 0x0C])
SLICE_TID2 = bytes([1 << 1, 3, 0xAF])  # TRAIL_R of TemporalId 2 (nuh_temporal_id_plus1 3)
TD, SEQUENCE = b"\x12\x00", bytes([1 << 3 | 2, 2, 0xAA, 0xBB])
FRAME = bytes([6 << 3 | 2, 3, 1, 2, 3])


def test_emulation_prevention_round_trips_on_random_bytes():
    rng = random.Random(5)
    for _ in range(200):
        raw = bytes(rng.choice((0, 0, 0, 1, 2, 3, 0xFF)) for _ in range(rng.randrange(1, 40)))
        coded = escaped(raw)
        assert unescaped(coded) == raw
        assert b"\x00\x00\x00" not in coded and b"\x00\x00\x01" not in coded and b"\x00\x00\x02" not in coded


def test_sei_payloads_read_back_in_both_framings_and_sizes_over_255():
    payloads = [bytes([0xB5, 0, 0x3C, 0, 1, 4]) + bytes(300), bytes([0xB5, 0, 0x31]) + b"GA94\x03\x00\x00\x01"]
    for codec in ("h264", "hevc"):
        nal = sei_nal(payloads, codec)
        assert t35_payloads(b"\x00\x00\x00\x01" + nal + b"\x00\x00\x01" + VPS, codec) == payloads
        framed = len(nal).to_bytes(4, "big") + nal
        assert t35_payloads(framed, codec, 4) == payloads


def test_an_hevc_sei_takes_its_pictures_temporal_id():
    nal = sei_nal([b"\xb5\x00\x3c"], "hevc")
    assert nal[1] == 1
    out = inject(b"\x00\x00\x00\x01" + VPS + b"\x00\x00\x00\x01" + SLICE_TID2, nal, "hevc")
    assert out == b"\x00\x00\x00\x01" + VPS + b"\x00\x00\x00\x01" + nal[:1] + b"\x03" + nal[2:] + \
        b"\x00\x00\x00\x01" + SLICE_TID2


def test_av1_metadata_goes_after_the_sequence_header_and_reads_back():
    t35 = bytes([0xB5, 0, 0x3C, 0, 1, 4, 1, 0x40, 0x00])  # (ends in a zero byte: the trailing bits are not it)
    out = inject_obus(TD + SEQUENCE + FRAME, metadata_obu(t35))
    assert [kind for _, kind, _ in obus(out)] == [2, 1, 5, 6]
    assert t35_payloads(out, "av1") == [t35]
    assert t35_payloads(TD + SEQUENCE + FRAME + metadata_obu(t35), "av1") == []  # (after the picture: not its)
    assert leb128(300) == b"\xac\x02"


def test_damaged_access_units_give_what_they_hold():
    nal = sei_nal([bytes([0xB5, 0, 0x3C, 0, 1, 4, 1, 2, 3])], "hevc")
    rng = random.Random(11)
    for _ in range(300):
        data = bytearray(b"\x00\x00\x00\x01" + nal + b"\x00\x00\x01" + SLICE_TID2)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        t35_payloads(bytes(data[:rng.randrange(len(data) + 1)]), "hevc")
        t35_payloads(bytes(data), "hevc", 4)
        t35_payloads(bytes(data), "av1")


def test_nal_length_size_from_the_decoder_configuration():
    assert nal_length_size("h264", bytes([1, 0x64, 0, 0x1F, 0xFF, 0xE1])) == 4
    assert nal_length_size("hevc", bytes([1]) + bytes(20) + bytes([0x0F])) == 4
    assert nal_length_size("hevc", bytes([1]) + bytes(20) + bytes([0x0D])) == 2
    assert nal_length_size("hevc", b"\x00\x00\x00\x01" + VPS) is None  # Annex B parameter sets (MPEG-TS)
    assert nal_length_size("hevc", None) is None
