from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferroload_format import FormatError, InvalidModalityError, InvalidSampleIdError
from ferroload_format._names import SAMPLE_ID_RE, check_modality, check_sample_id


@pytest.mark.parametrize("sid", ["s0000", "n01440764_10026", "a-b+c=d,e@f~g#h", "X" * 100])
def test_valid_sample_ids(sid: str) -> None:
    assert check_sample_id(sid) == sid


@pytest.mark.parametrize(
    ("sid", "why"),
    [
        ("", "empty"),
        ("a/b", "separator"),
        ("..", "dot"),
        ("../etc/passwd", "dot"),
        ("a.b", "dot"),
        ("a\x00b", "NUL"),
        ("a\\b", "separator"),
        ("/abs", "separator"),
        ("with space", "use ASCII"),
        ("x" * 101, "limit is 100"),
        (42, "must be a str"),
        (None, "must be a str"),
    ],
)
def test_invalid_sample_ids_say_why(sid: object, why: str) -> None:
    with pytest.raises(InvalidSampleIdError, match=why) as info:
        check_sample_id(sid)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, FormatError)


@given(st.text(max_size=30))
def test_accepted_ids_can_never_escape_or_confuse_webdataset(sid: str) -> None:
    try:
        check_sample_id(sid)
    except InvalidSampleIdError:
        assert not SAMPLE_ID_RE.fullmatch(sid)
        return
    assert sid and len(sid) <= 100
    assert not any(c in sid for c in "./\\\x00:")
    assert sid.isascii()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("Image", "jpg", "tensor", "image"), "modality name"),
        (("sample_id", "jpg", "tensor", "image"), "reserved"),
        (("shard", "jpg", "tensor", "image"), "reserved"),
        (("image", "tar.gz", "tensor", "image"), "extension"),
        (("image", "", "tensor", "image"), "extension"),
        (("image", "jpg", "blob", "image"), "kind"),
        (("image", "jpg", "tensor", "Image Codec"), "codec hint"),
    ],
)
def test_bad_modality_declarations(args: tuple[str, str, str, str], match: str) -> None:
    with pytest.raises(InvalidModalityError, match=match):
        check_modality(*args)
