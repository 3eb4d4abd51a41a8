"""`errors.printable`: what every printed line of the commands goes through, so a file
name cannot rewrite the terminal or forge a line."""

import os

from dbaf_jax.core.errors import printable


def test_control_and_format_characters_are_escaped_and_the_rest_kept():
    name = "ph\x1b[2Ko\nerror: forged\r\t\x7f\u202egpj.exe \u2028 Grüne Wiese 字.jpg"
    shown = printable(name)
    assert (
        shown == "ph\\x1b[2Ko\\nerror: forged\\r\\t\\x7f\\u202egpj.exe \\u2028 Grüne Wiese 字.jpg"
    )
    assert shown.isprintable()


def test_a_name_that_is_not_utf8_shows_its_bytes():
    name = os.fsdecode(b"photo\xff\xfe.jpg")
    assert printable(name) == "photo\\xff\\xfe.jpg"
    printable(name).encode("utf-8")  # printable on a UTF-8 terminal, where the surrogates raise
