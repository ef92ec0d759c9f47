"""Reading spec files: TOML into plain tables, and the naming of fields in errors.

Every spec file (experiment, topology, nic plan) is read here, so a file that is missing,
unreadable, not UTF-8 or not TOML gets the same one-line error naming the file, and every
field of every table is named alike ("links[1].queue.target").
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

from bloatlab.errors import SpecError, show


# An experiment's or a workload's name: it names result files and columns.
NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,30}")


def load_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; any failure is a SpecError whose field is the file."""
    where = path_text(path)
    if "\0" in str(path):  # no file name holds one (the OS refuses it)
        raise SpecError("is not a file name: it holds a NUL character", field=where)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError("no such file; check the path", field=where) from None
    except IsADirectoryError:
        raise SpecError("is a directory; give the path of a .toml file", field=where) from None
    except OSError as error:
        raise SpecError(
            f"cannot read the file ({error.strerror}); check its permissions", field=where
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise SpecError(f"line {line}: not UTF-8 text; save the file as UTF-8", field=where) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(_toml_error_message(str(error)), field=where) from None
    except ValueError:  # tomllib's int() of a number of more than 4300 digits
        raise SpecError("a number too long to read (over 4300 digits); shorten it", field=where) from None
    except RecursionError:  # tomllib reads nested arrays and tables recursively
        raise SpecError("arrays or tables nested too deeply to read; nest them less", field=where) from None


def _toml_error_message(message: str) -> str:
    # tomllib (3.11) only puts the position into its message: "Invalid value (at line 3, column 8)".
    match = re.fullmatch(r"(.*) \(at (line \d+, column \d+|end of document)\)", message, re.DOTALL)
    what, where = (match[1], match[2]) if match else (message, None)
    if what.startswith(("Cannot overwrite", "Cannot declare", "Cannot mutate")):
        fix = "each key and each table may appear only once; remove or merge the repeated one"
    else:
        fix = "fix the TOML syntax (strings in double quotes, tables as [name], arrays of tables as [[name]])"
    text = f"invalid TOML: {what[:1].lower()}{what[1:]}; {fix}"
    if where == "end of document":
        where = "at the end of the file"
    return f"{where}: {text}" if where else text


def key_name(key: str) -> str:
    """A key as a field name: as it is, or quoted when it is empty or holds a character a
    terminal does not print (a line break), so that an error naming it names something, on one line."""
    return key if key and key.isprintable() else show(key)


def field_of(base: str, key: str | int) -> str:
    """The field name of `key` inside `base`: "links" + 1 -> "links[1]", "links[1]" + "rate"."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    key = key_name(key)
    return f"{base}.{key}" if base else key


def path_text(path: Path) -> str:
    """A path as errors show it: as it is, or quoted when it holds a line break or another
    character a terminal does not print."""
    text = str(path)
    return text if text.isprintable() else show(text)


def check_keys(table: dict[str, Any], allowed: tuple[str, ...], base: str, what: str) -> None:
    for key in table:
        if key in allowed:
            continue
        if not allowed:
            raise SpecError(
                f"unknown key {show(key)}; {what} takes no keys, leave its table empty", field=field_of(base, key)
            )
        close = difflib.get_close_matches(key, allowed, n=1)
        guess = f"did you mean {show(close[0])}? " if close else ""
        raise SpecError(
            f"unknown key {show(key)} in {what}; {guess}allowed keys: {', '.join(allowed)}",
            field=field_of(base, key),
        )


# A kernel congestion control's name (TCP_CA_NAME_MAX is 16 with the NUL).
CC_RE = re.compile(r"[a-z][a-z0-9_]{0,15}")


def congestion_control(value: object, field: str) -> str:
    """A TCP congestion control's name, as workloads and hosts take it; whether this kernel has
    it is the testbed's question (testbed.capabilities.congestion_controls)."""
    if not isinstance(value, str) or not CC_RE.fullmatch(value):
        raise SpecError(f"{show(value)} is not a congestion control name; e.g. reno, cubic or bbr", field=field)
    return value
