from triage.core.errors import MAX_SHOWN, shown


def test_a_short_value_is_quoted_whole() -> None:
    assert shown("nope.json") == "'nope.json'"


def test_a_long_path_keeps_its_start_and_its_file_name() -> None:
    path = "/check/" + "deep/" * 40 + "nope.json"
    text = shown(path)
    assert text.startswith("'/check/deep/")
    assert text.endswith("nope.json'")
    assert "..." in text
    assert len(text) <= MAX_SHOWN + 2  # the quotes


def test_line_breaks_never_reach_the_message() -> None:
    assert "\n" not in shown("a\nb\r\nc")
