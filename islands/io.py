"""Every file the tools write goes through here: atomic writes, formats chosen by the extension,
``-`` for stdout, and any OS error turned into one line naming the path (``UserError``).

Atomic: write to a temporary file beside the target, fsync, then rename over it, so a crash or
Ctrl+C mid-write leaves the previous file intact, never a truncated one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import UserError
from .numbers import is_finite_number

STDOUT = "-"
PLOT_FORMATS = ("png", "svg", "pdf")
TABLE_FORMATS = ("csv", "parquet", "json")
MAX_INPUT_BYTES = (
    64 * 2**20
)  # no scenario, profile, calibration or trace file this reads is near this
UNSAFE_IN_NAMES = re.compile(
    r"[^A-Za-z0-9._-]+|\.{2,}"
)  # besides letters, digits, . _ -: runs of dots


def is_stdout(target: str | Path) -> bool:
    return str(target) == STDOUT


def shown(target: str | Path) -> str:
    """How a message names a written target: its path, or ``stdout``."""
    return "stdout" if is_stdout(target) else str(target)


def output_format(target: str | Path, formats: Sequence[str]) -> str:
    """The format ``target``'s extension names, one of ``formats``; stdout (``-``) gets the first.

    Also refuses a target that is a folder, before any work is done. Raises ``UserError``.
    """
    check_not_folder(target)
    if is_stdout(target):
        return formats[0]
    suffix = Path(target).suffix.lower().lstrip(".")
    if suffix not in formats:
        named = f"'.{suffix}'" if suffix else "no extension"
        raise UserError(
            f"{target}: {named} is not a format this writes; "
            f"end the name with {', '.join('.' + f for f in formats)}"
        )
    return suffix


def check_output(target: str | Path, formats: Sequence[str]) -> str:
    """``output_format``, and a trial write in the target's folder (created if missing, the trial file
    removed), so that an unwritable path fails in one line before any work, not after it."""
    file_format = output_format(target, formats)
    if not is_stdout(target):
        temporary_beside(Path(target)).unlink()
    return file_format


def check_not_folder(target: str | Path) -> None:
    text = str(target)
    if text.endswith(os.sep) or Path(text).is_dir():
        raise UserError(f"{text}: is a folder; name a file in it, e.g. {Path(text) / 'NAME'}")


def safe_name(name: str) -> str:
    """``name`` usable as one file name: runs of characters other than letters, digits, ``.``, ``_``
    and ``-``, and runs of dots, become one ``_``; leading and trailing ``._-`` go. So
    ``../../escaped/x`` becomes ``escaped_x`` and cannot leave the folder it is put in."""
    cleaned = re.sub("_+", "_", UNSAFE_IN_NAMES.sub("_", name)).strip("._-")
    return cleaned or "unnamed"


def os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_out_folder(flag: str, folder: str | Path) -> None:
    """Refuse, before any work, an output folder that is a file or where no file can be written
    (a trial write in it, the folder created if missing)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {folder}: is a file; name a folder for the outputs")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UserError(f"{flag} {folder}: cannot write there: {os_reason(exc)}") from None


def temporary_beside(target: Path) -> Path:
    """A new empty file in ``target``'s folder (created if missing), readable as the umask allows."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = (
            "a file of that name is in the way"
            if isinstance(exc, FileExistsError)
            else os_reason(exc)
        )
        raise UserError(f"{target}: cannot create its folder {target.parent}: {reason}") from None
    try:
        handle, name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp" + target.suffix, dir=target.parent
        )
    except OSError as exc:
        raise UserError(f"{target}: cannot write in {target.parent}: {os_reason(exc)}") from None
    try:
        os.fchmod(
            handle, 0o666 & ~current_umask()
        )  # mkstemp makes 0600; a shared report should not be
    finally:
        os.close(handle)
    return Path(name)


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it is fsynced and renamed onto ``target``.

    Any OS error (no such folder, permission, a file where a folder should be, a full disk) is raised
    as one ``UserError`` naming ``target``.
    """
    check_not_folder(target)
    target = Path(target)
    temporary = temporary_beside(target)
    try:
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, target)
        fsync_folder(target.parent)
    except OSError as exc:
        raise UserError(f"{target}: {os_reason(exc)}") from None
    finally:
        temporary.unlink(missing_ok=True)


def fsync_folder(folder: Path) -> None:
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(target: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically, or to stdout for ``-``."""
    if is_stdout(target):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with atomic_path(target) as temporary:
        temporary.write_text(text, encoding="utf-8")


def write_bytes(target: str | Path, data: bytes) -> None:
    """Write ``data`` atomically, or to stdout for ``-``."""
    if is_stdout(target):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    with atomic_path(target) as temporary:
        temporary.write_bytes(data)


def write_table(frame, target: str | Path) -> None:
    """Write a DataFrame as CSV, Parquet or JSON (one object per row), as the extension says; ``-``
    writes CSV to stdout. Other extensions are refused, as is Parquet without pyarrow."""
    file_format = output_format(target, TABLE_FORMATS)
    if is_stdout(target):
        write_text(target, frame.to_csv(index=False))
        return
    with atomic_path(target) as temporary:
        if file_format == "parquet":
            try:
                frame.to_parquet(temporary, index=False)
            except ImportError as exc:
                raise UserError(
                    f"{target}: writing Parquet needs pyarrow ({exc}); use a .csv name"
                ) from None
        elif file_format == "json":
            frame.to_json(temporary, orient="records", indent=1)
        else:
            frame.to_csv(temporary, index=False)


def finite_json(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (JSON has no NaN or Infinity)."""
    if isinstance(value, float):
        return value if is_finite_number(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    return value


def json_text(document: Any, **options: Any) -> str:
    """Strict JSON of ``document``: a value that is not finite becomes null, never ``NaN``."""
    return json.dumps(finite_json(document), allow_nan=False, **options)


def read_bounded_bytes(path: str | Path, what: str, limit_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the file ``path`` (a ``what``, for messages), refused in one ``UserError`` when it
    is missing, a folder, unreadable, or longer than ``limit_bytes`` (so ``/dev/zero`` or a huge file
    costs one bounded read, never gigabytes)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit_bytes + 1)
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read this {what}: {os_reason(exc)}") from None
    if len(data) > limit_bytes:
        raise UserError(f"{path}: a {what} is at most {limit_bytes} bytes; this one is longer")
    return data


def read_bounded_text(path: str | Path, what: str, limit_bytes: int = MAX_INPUT_BYTES) -> str:
    """``read_bounded_bytes`` decoded as UTF-8, with bad bytes refused in one line."""
    try:
        return read_bounded_bytes(path, what, limit_bytes).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: this {what} is not UTF-8 text (byte {exc.start})") from None


def read_bounded_json(path: str | Path, what: str) -> Any:
    """The JSON document in the file ``path`` (a ``what``), read bounded (``parse_json``)."""
    return parse_json(read_bounded_text(path, what), path, what)


def parse_json(text: str, path: str | Path, what: str, constant_hint: str = "") -> Any:
    """The JSON document ``text`` read from ``path`` (a ``what``): bad syntax, a number too long to
    convert, nesting too deep, NaN or Infinity (no numbers in JSON) and a key written twice in one
    object (one value would win silently) are one ``UserError`` each. ``constant_hint`` follows the
    NaN message (e.g. what the writer writes instead)."""

    def refuse_constant(name: str) -> None:
        raise UserError(f"{path}: holds {name}, which is no number in JSON{constant_hint}")

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for key, value in pairs:
            if key in document:
                shown = key if len(key) <= 40 else key[:37] + "..."
                raise UserError(
                    f"{path}: the key {shown!r} is written twice in one object: one value would be lost"
                )
            document[key] = value
        return document

    try:
        return json.loads(text, parse_constant=refuse_constant, object_pairs_hook=unique_keys)
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a {what}") from None
    except ValueError as error:  # json.JSONDecodeError is one, as is an integer too long to convert
        raise UserError(f"{path}: not valid JSON ({error})") from None


def same_file(first: str | Path, second: str | Path) -> bool:
    """Whether two paths name one file: the same resolved path, or (both existing) the same inode."""
    if Path(first).resolve() == Path(second).resolve():
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def refuse_shared_paths(
    outputs: Mapping[str, str | Path | None], inputs: Mapping[str, str | Path | None] | None = None
) -> None:
    """Refuse, in one line, an output that is also an input or two outputs on one path.

    ``outputs`` and ``inputs`` map what the user calls each path (``--trace``, ``the scenario``) to the
    path, or None where it was not given; stdout (``-``) is never a clash."""
    named_outputs = [
        (name, path) for name, path in outputs.items() if path is not None and not is_stdout(path)
    ]
    named_inputs = [
        (name, path)
        for name, path in (inputs or {}).items()
        if path is not None and not is_stdout(path)
    ]
    for index, (name, path) in enumerate(named_outputs):
        for input_name, input_path in named_inputs:
            if same_file(path, input_path):
                raise UserError(
                    f"{path}: {name} would overwrite {input_name}, which this reads; "
                    "write it elsewhere"
                )
        for other_name, other_path in named_outputs[index + 1 :]:
            if same_file(path, other_path):
                raise UserError(
                    f"{path}: {name} and {other_name} name the same file; give each its own"
                )
