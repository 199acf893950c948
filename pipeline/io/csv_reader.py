"""CSV and other delimited text, as customers' tools write it.

Encoding, unless the caller names one:

- a byte-order mark decides: UTF-8 (with BOM), UTF-16 LE/BE (Excel's "Unicode text");
- without a BOM, NUL bytes in every other position mean UTF-16 (LE or BE);
- otherwise UTF-8 if the bytes are valid UTF-8;
- otherwise Windows-1256 (the CSV encoding of Arabic Excel) if, decoded that way, most non-ASCII
  characters are Arabic letters; otherwise an InputError suggesting ``--encoding``.

A legacy single-byte file whose non-ASCII text is not Arabic (e.g. Latin-1) is therefore refused
rather than guessed; ``encoding="latin-1"`` reads it. A named encoding is for what detection cannot
tell: a byte-order mark, or Arabic text that is valid UTF-8, is read as such whatever is named
(a nightly job's ``--encoding cp1256`` outlives the day its export switches to UTF-8), and the
read says so. A file mixing the two (UTF-8 text pasted into a Windows-1256 export) is refused
unless an encoding is named; then its UTF-8 lines are read as UTF-8, the others as named.

Separator: a first line ``sep=X`` (Excel's hint) names it; otherwise the candidate among comma,
semicolon, tab and pipe that occurs outside double quotes in the header line, preferring one whose
count is the same on the next lines, then the most frequent, then that order.

UTF-8 input is handed to polars as the file (no copy); other encodings are decoded in Python and
re-encoded as UTF-8 bytes first. All cells are read as text (``infer_schema=False``).

A quoted cell may hold line breaks (Excel's Alt+Enter). When a line inside one looks like a row
of the table (it holds at least as many separators as the header, less one, and at least two:
a listing has four fields), a stray quote (a
notes cell starting ``"corner plot``, an inch mark ``TV 55"`` further down) has probably joined
rows into that cell: the read is valid CSV, as LibreOffice reads it too, so it is not refused,
but the cells are named for the run's summary (`RowsInQuotedCell`).
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.errors import InputError

SNIFF_BYTES = 64 * 1024
SNIFF_LINES = 20
SEPARATORS = (",", ";", "\t", "|")
ENCODING_HINT = (
    "try --encoding cp1256 (Arabic Windows), --encoding cp1252 (English Windows), "
    "--encoding utf-16 or --encoding latin-1"
)


@dataclass(frozen=True, kw_only=True)
class RowsInQuotedCell:
    """A quoted cell whose line breaks hold lines shaped like rows of the table."""

    row: int  # data row, 1-based (the header is not a row)
    position: int  # the cell's column, 0-based among the header's cells
    column: str = ""  # its name in the frame read (set by pipeline.io.read)
    first_line: int  # the file's lines the cell spans, 1-based
    last_line: int
    rows_inside: int  # lines in it, after its first, shaped like rows


def read_csv(
    path: Path, *, encoding: str | None = None
) -> tuple[list[str | None], pl.DataFrame, dict[str, object]]:
    """The header cells, the data rows (positional column names) and how the file was read."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    codec, overridden = _chosen_codec(path, head, encoding)

    if codec in ("utf-8", "utf-8-sig") and not _old_mac_lines(head):
        text_head = head.decode("utf-8", errors="ignore").lstrip("\ufeff")
        source: Path | bytes = path
    else:
        content = path.read_bytes()
        if encoding is None and codec == "cp1256":
            _refuse_pasted_utf8(path, content)  # anywhere in the file, not just its start
        named_single_byte = encoding is not None and not codec.startswith("utf")
        # Arabic only past the sniffed start: the whole file tells
        if overridden is None and named_single_byte and _is_utf8_arabic(content):
            codec, overridden = "utf-8", _not_used(encoding, "is UTF-8 Arabic text")
        if named_single_byte and codec != "utf-8" and _UTF8_ARABIC_WORD.search(content):
            codec, data, overridden = _named_with_utf8(path, content, encoding)
        else:
            data = _decode(path, content, codec)
        if _old_mac_lines(data[:SNIFF_BYTES]):
            data = _LONE_CR.sub("\n", data)
        text_head = data[:SNIFF_BYTES]
        source = data.encode("utf-8")

    separator, skip, empty_above = _sniff_separator(
        text_head, default="\t" if path.suffix == ".tsv" else ","
    )
    try:
        raw = _polars_read(source, separator, skip)
    except pl.exceptions.ComputeError as exc:
        named_utf = encoding is not None and _codec_name(path, encoding).startswith("utf")
        refused: pl.exceptions.ComputeError | None = exc
        if (
            isinstance(source, Path)
            and not named_utf
            and not _is_utf8(content := path.read_bytes())
        ):
            # Valid UTF-8 at the start, invalid later (polars may have stopped at something
            # else first, a stray quote): decide on the whole file.
            if encoding is None:
                codec = _detect_encoding(path, content)
                data = _decode(path, content, codec)
            else:
                codec, data, overridden = _named_with_utf8(path, content, encoding)
            source, refused = data.encode("utf-8"), None
        raw = _read_refused(path, source, separator, skip, refused)

    if (
        raw.height > 1
        and raw.row(-1)[0] == _DOS_END_OF_FILE
        and raw.row(-1).count(None) == raw.width - 1
    ):
        raw = raw.slice(0, raw.height - 1)  # the end-of-file mark old DOS programs end text with
    if raw.height == 0:
        raise InputError(f"{path}: has no header row (the first line names the columns)")
    headers = list(raw.row(0))
    # The row Excel shows the header on: under the empty lines (a `sep=` line it hides)
    details: dict[str, object] = {
        "encoding": codec,
        "separator": separator,
        "first_row": 1 + empty_above,
    }
    if overridden is not None:
        details["encoding_overridden"] = overridden
    rows_in_cells = [] if _no_line_break_in_a_cell(source, raw, skip) else None
    if rows_in_cells is None:
        rows_in_cells = rows_in_quoted_cells(raw, separator, skip)
    if rows_in_cells:
        details["rows_in_quoted_cells"] = rows_in_cells
    return headers, raw.slice(1), details


def rows_in_quoted_cells(raw: pl.DataFrame, separator: str, skip: int) -> list[RowsInQuotedCell]:
    """The cells of `raw` (the header its first row, read after `skip` lines) holding a line,
    after their first, with at least as many separators as the header less one (and at least
    two). One search for a line break, in every cell, is all a file without one costs."""
    if raw.height < 2:
        return []
    columns = raw.columns
    broken = raw.with_row_index("index").filter(
        pl.any_horizontal(pl.col(columns).str.contains("\n"))  # memchr, as a regex
    )
    if broken.height == 0:
        return []
    s = re.escape(separator)
    row_like = re.compile(rf"\n(?:[^\n{s}]*{s}){{{max(raw.width - 2, 2)}}}")
    flagged = broken.filter(pl.any_horizontal(pl.col(columns).str.contains(row_like.pattern)))
    if flagged.height == 0:
        return []
    return _cells_with_rows(broken, flagged, row_like, skip)


def _no_line_break_in_a_cell(source: Path | bytes, raw: pl.DataFrame, skip: int) -> bool:
    """True when the file has no more line breaks than its lines read (`skip` lines, then one
    a row of `raw`), so that no cell holds one: a count over the bytes, several times faster
    than looking into every cell. (A byte 0x0A inside another character, in UTF-16, only
    counts one too many: the cells are looked into then.)"""
    if isinstance(source, bytes):
        breaks, ends_with_break = source.count(b"\n"), source.endswith(b"\n")
    else:
        breaks, last = 0, b""
        with source.open("rb") as handle:
            while block := handle.read(1 << 20):
                breaks, last = breaks + block.count(b"\n"), block
        ends_with_break = last.endswith(b"\n")
    lines = skip + raw.height  # each ended by a line break, but perhaps the last
    return breaks <= lines - (0 if ends_with_break else 1)


def describe_rows_in_quoted_cells(cells: list[RowsInQuotedCell]) -> str:
    """The summary's warning: the first three cells, and how many more."""
    shown = [
        f"row {c.row}, column {c.column!r} (lines {c.first_line}-{c.last_line}: "
        f"{c.rows_inside} line{'s' * (c.rows_inside > 1)} shaped like rows)"
        for c in cells[:3]
    ]
    more = f" and {len(cells) - 3} more" if len(cells) > 3 else ""
    return (
        f'{"; ".join(shown)}{more}. A stray quote opening a cell (such as `"corner plot`) '
        'and another closing a later value (such as `TV 55"`) make the rows between text of '
        "that cell: check the quotes on those lines (notes meant to span lines are fine)"
    )


def _cells_with_rows(
    broken: pl.DataFrame, flagged: pl.DataFrame, row_like: re.Pattern[str], skip: int
) -> list[RowsInQuotedCell]:
    """Where each flagged row's cells lie in the file. A row starts on the line after the
    previous row's last: one line per row read, plus the line breaks in the cells of the rows
    before it (only `broken` rows have any)."""
    columns = [c for c in broken.columns if c != "index"]
    breaks = pl.sum_horizontal(pl.col(columns).str.count_matches("\n", literal=True))
    before = broken.select("index", earlier=breaks.cum_sum() - breaks)
    earlier = dict(before.iter_rows())
    found = []
    for record in flagged.iter_rows(named=True):
        index = record["index"]
        line = skip + 1 + index + earlier[index]
        if index == 0:
            continue  # the header: a long heading is no row
        for position, column in enumerate(columns):
            cell = record[column] or ""
            lines = cell.count("\n")
            if row_like.search(cell):
                inside = len(row_like.findall(cell))
                found.append(
                    RowsInQuotedCell(
                        row=index,
                        position=position,
                        first_line=line,
                        last_line=line + lines,
                        rows_inside=inside,
                    )
                )
            line += lines
    return found


_DOS_END_OF_FILE = "\x1a"  # Ctrl-Z


def _old_mac_lines(head: bytes | str) -> bool:
    """Lines ended by CR alone (classic Mac OS, Excel's "CSV (Macintosh)"): more lone CRs
    than LFs (an LF may still be a line break inside a cell, Excel's Alt+Enter)."""
    text = head.decode("latin-1") if isinstance(head, bytes) else head
    lone_cr = text.count("\r") - text.count("\r\n")
    return lone_cr > text.count("\n")


def _polars_read(source: Path | bytes, separator: str, skip: int) -> pl.DataFrame:
    try:
        return pl.read_csv(
            source,
            has_header=False,
            separator=separator,
            infer_schema=False,
            skip_lines=skip,
            raise_if_empty=False,
        )
    except pl.exceptions.NoDataError:
        return pl.DataFrame()


def _read_refused(
    path: Path,
    source: Path | bytes,
    separator: str,
    skip: int,
    refused: pl.exceptions.ComputeError | None,
) -> pl.DataFrame:
    """The table polars refused (`refused`; None: read it again, it may not refuse), read
    leniently where Excel would read it, or InputError saying why it cannot be."""
    try:
        if refused is not None:
            raise refused
        return _polars_read(source, separator, skip)
    except pl.exceptions.ComputeError as exc:
        message = str(exc).lower()
        if "malformed" in message or "could not parse" in message:
            # A quote inside an unquoted value (`TV 55" included`): Excel reads it as a quote
            # mark, polars refuses the file. The csv module reads it as Excel does, and still
            # refuses what is really broken (a quote never closed), naming the line.
            return _lenient_read(path, source, separator, skip)
        raise _translate(path, exc, separator, source, skip) from exc


def _is_utf8(content: bytes) -> bool:
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _lenient_read(path: Path, source: Path | bytes, separator: str, skip: int) -> pl.DataFrame:
    """The table read with the csv module (error path only): cells as text, empty ones null."""
    text = _text_of(source)
    records = csv.reader(io.StringIO(text, newline=""), delimiter=separator, strict=True)
    rows: list[list[str]] = []
    record_ended = 0  # the line the last whole record ended on
    try:
        for number, record in enumerate(records, start=1):
            if number > skip:
                rows.append(record)
            record_ended = records.line_num
    except csv.Error as exc:
        stopped = records.line_num
        opened = _quote_opened_on(text, record_ended + 1, stopped, separator)
        said = str(exc) if stopped == opened else f"line {stopped}: {exc}"
        where = f"line {opened}: a quote opens a value here that " + (
            "is never closed (the file ends inside it)"
            if "end of data" in str(exc)
            else f"is not closed where the value ends ({said})"
        )
        raise InputError(
            f"{path}: {where}; a value that contains quotes or the separator {separator!r} must "
            "be wholly in quotes, with each quote doubled"
        ) from None
    while rows and not rows[-1]:
        rows.pop()  # trailing blank lines, as polars drops them
    width = len(rows[0]) if rows else 0
    if any(len(row) > width for row in rows):
        raise InputError(f"{path}: {_too_many_fields(source, separator, skip)}")
    columns = [
        [row[i] if i < len(row) and row[i] != "" else None for row in rows] for i in range(width)
    ]
    return pl.DataFrame(
        {f"column_{i}": values for i, values in enumerate(columns)},
        schema={f"column_{i}": pl.String for i in range(width)},
    )


def _quote_opened_on(text: str, first: int, last: int, separator: str) -> int:
    """The line on which the last quoted value opened in lines `first` to `last` (1-based, as
    the csv module counts them) of `text`, a record the csv module refused. A quote opens a
    value only at the value's start; `""` inside a quoted value is a quote mark; the scan ends
    where the csv module stopped (text after a closing quote) or at `last`. `first` if no value
    opened with a quote."""
    lines = itertools.islice(io.StringIO(text, newline=""), first - 1, last)
    opened, state = first, "start"
    for number, line in enumerate(lines, start=first):
        for ch in line:
            if state == "quoted":
                state = "quote in quoted" if ch == '"' else "quoted"
            elif state == "quote in quoted" and ch == '"':
                state = "quoted"  # a doubled quote
            elif state == "quote in quoted" and ch not in (separator, "\n", "\r"):
                return opened  # where the csv module stopped: `"..."x`
            elif ch in (separator, "\n", "\r"):
                state = "start"
            elif ch == '"' and state == "start":
                state, opened = "quoted", number
            else:
                state = "unquoted"
    return opened


def _text_of(source: Path | bytes) -> str:
    """The text as it is: line ends untouched (a CRLF inside a quoted cell stays one)."""
    if isinstance(source, Path):
        content = source.read_bytes()
        try:
            return content.decode("utf-8-sig")
        except UnicodeDecodeError:  # named UTF-8 by --encoding, and it is not
            raise _not_utf8(source, content, _first_invalid_utf8(content)) from None
    return source.decode("utf-8")


def _not_utf8(path: Path, content: bytes, offset: int | None) -> InputError:
    where = f" ({_where(content, offset)})" if offset is not None else ""
    return InputError(f"{path}: is not valid UTF-8 text{where}; {ENCODING_HINT}")


def _first_invalid_utf8(content: bytes) -> int | None:
    """The offset of the first byte that is not UTF-8 (a BOM is: utf-8-sig would count the
    offset after it)."""
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def _translate(
    path: Path, exc: Exception, separator: str, source: Path | bytes, skip: int
) -> InputError:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "utf-8" in message.lower():
        # which chunk polars refuses first depends on its thread count; the byte is found here
        content = source.read_bytes() if isinstance(source, Path) else source
        return _not_utf8(path, content, _first_invalid_utf8(content))
    if "more fields" in message:
        return InputError(f"{path}: {_too_many_fields(source, separator, skip)}")
    return InputError(f"{path}: cannot be read as CSV ({message})")


def _too_many_fields(source: Path | bytes, separator: str, skip: int) -> str:
    """Which record is longer than the header, found with the csv module (error path only),
    and what to do about it."""
    records = csv.reader(io.StringIO(_text_of(source), newline=""), delimiter=separator)
    advice = "quote values that contain the separator, or give every column a header"
    width = None
    for number, record in enumerate(records, start=1):
        if number <= skip:
            continue
        if width is None:
            width = len(record)
        elif len(record) > width:
            row, line = number - skip - 1, records.line_num
            if width == 1:
                advice = "if the first line is a title above the header, delete it; " + advice
            return (
                f"row {row} (line {line}) has {len(record)} fields but the header line has "
                f"{width} (separator {separator!r}); {advice}"
            )
    return f"a row has more fields than the header line (separator {separator!r}); {advice}"


def _chosen_codec(path: Path, head: bytes, encoding: str | None) -> tuple[str, str | None]:
    """The codec to read with, and why a named `encoding` was not used (None if it was)."""
    if encoding is None:
        return _detect_encoding(path, head), None
    named = _codec_name(path, encoding)
    if head.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        detected = _detect_encoding(path, head)  # utf-8-sig or utf-16
        family = "utf-8" if detected == "utf-8-sig" else "utf-16"
        if named.startswith(family):
            return detected, None
        return detected, _not_used(encoding, f"begins with a {family.upper()} byte-order mark")
    if not named.startswith("utf") and _is_utf8_arabic(head):
        return "utf-8", _not_used(encoding, "is UTF-8 Arabic text")
    return named, None


def _not_used(encoding: str, why: str) -> str:
    return f"--encoding {encoding} not used: the file {why}"


def _is_utf8_arabic(head: bytes) -> bool:
    """Valid UTF-8 with Arabic words in it: no single-byte Arabic file reads that way."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"):
            return False
    return _UTF8_ARABIC_WORD.search(head) is not None


def _codec_name(path: Path, encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise InputError(
            f"{path}: unknown encoding {encoding!r}; use a name such as utf-8, cp1256, utf-16"
        ) from None


def _detect_encoding(path: Path, head: bytes) -> str:
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    sample = head[:4096]
    if b"\x00" in sample:
        even, odd = sample[0::2].count(0), sample[1::2].count(0)
        # ASCII characters (separators, digits, line ends) leave a NUL in their high byte, all
        # on one side; and UTF-16 text reads as lines of text, a UTF-8 file with a NUL not.
        if even == 0 and _reads_as(head, "utf-16-le"):
            return "utf-16-le"
        if odd == 0 and _reads_as(head, "utf-16-be"):
            return "utf-16-be"
        raise InputError(
            f"{path}: contains NUL bytes ({_where(head, head.index(0))}) and is not text; "
            "is it really a CSV file?"
        )
    try:
        head.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as exc:
        bad = exc.start
        if bad >= len(head) - 3 and exc.reason == "unexpected end of data":
            return "utf-8"  # the sample cut a character in two
        if _mostly_utf8_arabic(head):
            raise InputError(
                f"{path}: is UTF-8 text except at {_where(head, bad)}, so it mixes two "
                f"encodings (pasted text?); re-save it as UTF-8, or name the other one "
                f"(--encoding cp1256 for Arabic Windows): the UTF-8 lines are still read as "
                f"UTF-8, the others as named"
            ) from None
    if _looks_arabic_cp1256(head):
        _refuse_pasted_utf8(path, head)
        return "cp1256"
    raise InputError(
        f"{path}: is not UTF-8 text ({_where(head, bad)}) and its encoding is not recognised; "
        f"{ENCODING_HINT}"
    )


_UTF8_ARABIC = re.compile(rb"[\xd8-\xdb][\x80-\xbf]")
_ASCII = bytes(range(128))
_LONE_CR = re.compile("\r(?!\n)")
# Three Arabic letters in UTF-8 in a row: in Windows-1256 text that would be three of four
# letters each followed by a symbol, which no word is.
_UTF8_ARABIC_WORD = re.compile(rb"(?:[\xd8-\xdb][\x80-\xbf]){3}")
_UTF8_ARABIC_RUN = re.compile(rb"((?:[\xd8-\xdb][\x80-\xbf]){2,})")  # split() keeps the runs


def _refuse_pasted_utf8(path: Path, data: bytes) -> None:
    pasted = _UTF8_ARABIC_WORD.search(data)
    if pasted is not None:
        raise InputError(
            f"{path}: is Windows-1256 text except at {_where(data, pasted.start())}, which "
            f"is UTF-8 (pasted text?); re-save it as UTF-8, or read it with --encoding "
            f"cp1256: the UTF-8 lines are still read as UTF-8, the others as Windows-1256"
        )


def _reads_as(data: bytes, codec: str) -> bool:
    """True when `data` decodes as `codec` (UTF-16) into lines of text: nearly every
    character ASCII, Arabic or white space, and at least one line end."""
    whole = len(data) // 2 * 2
    try:
        text = data[:whole].decode(codec)
    except UnicodeDecodeError as exc:
        if exc.start < whole - 4:  # not just a character cut at the sample's end
            return False
        text = data[: exc.start].decode(codec)
    plain = sum(1 for ch in text if ch < "\x80" or "\u0600" <= ch <= "\u06ff" or ch.isspace())
    return "\n" in text and plain >= 0.9 * len(text)


def _mostly_utf8_arabic(data: bytes) -> bool:
    """True when most non-ASCII bytes pair up as UTF-8 Arabic letters. Windows-1256 Arabic
    text almost never does: there those pairs are one of four letters followed by a symbol."""
    high = len(data.translate(None, _ASCII))
    pairs = len(_UTF8_ARABIC.findall(data))
    return pairs > 0 and 4 * pairs >= high


def _where(data: bytes, offset: int) -> str:
    line = data.count(b"\n", 0, offset) + 1
    return f"byte {offset}, line {line}"


def _looks_arabic_cp1256(data: bytes) -> bool:
    non_ascii = [ch for ch in data.decode("cp1256", errors="replace") if ord(ch) > 127]
    arabic = sum(1 for ch in non_ascii if "\u0600" <= ch <= "\u06ff")
    return bool(non_ascii) and arabic / len(non_ascii) >= 0.6


def _decode(path: Path, data: bytes, codec: str) -> str:
    try:
        return data.decode(codec).lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: cannot be decoded as {codec} (byte {exc.start}: {exc.reason}); "
            f"{ENCODING_HINT}"
        ) from None


def _named_with_utf8(path: Path, content: bytes, encoding: str) -> tuple[str, str, str]:
    """The codec, text and note of a file not all UTF-8, with UTF-8 Arabic text in it, read
    with a named single-byte `encoding`: its UTF-8 text read as UTF-8, the rest as named."""
    codec = _codec_name(path, encoding)
    data, lines = _decode_mixed(path, content, codec)
    return codec, data, f"--encoding {encoding} not used for {lines}: UTF-8 (pasted text?)"


def _decode_mixed(path: Path, data: bytes, codec: str) -> tuple[str, str]:
    """A single-byte file with UTF-8 text pasted into it: each line that is UTF-8 read as
    UTF-8; in the others, runs of two or more UTF-8 Arabic letters read as UTF-8 and the rest
    as `codec`. (Arabic in a single-byte encoding never reads as such a run: each of its letters
    would need a symbol after it.) The text, and the lines holding UTF-8 ("lines 3, 8 and 2
    more")."""
    decoded: list[str] = []
    utf8: list[int] = []
    for number, line in enumerate(data.splitlines(keepends=True), start=1):
        if _UTF8_ARABIC.search(line) is None:
            decoded.append(_decode_line(path, number, line, codec))
            continue
        utf8.append(number)
        try:
            decoded.append(line.decode("utf-8"))
            continue
        except UnicodeDecodeError:
            pass
        for i, part in enumerate(_UTF8_ARABIC_RUN.split(line)):  # runs at the odd places
            text = part.decode("utf-8") if i % 2 else _decode_line(path, number, part, codec)
            decoded.append(text)
    named = ", ".join(str(n) for n in utf8[:5])
    more = f" and {len(utf8) - 5} more" if len(utf8) > 5 else ""
    return "".join(decoded).lstrip("\ufeff"), f"line{'s' * (len(utf8) > 1)} {named}{more}"


def _decode_line(path: Path, number: int, data: bytes, codec: str) -> str:
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: line {number} cannot be decoded as {codec} ({exc.reason}); {ENCODING_HINT}"
        ) from None


def _sniff_separator(text: str, *, default: str) -> tuple[str, int, int]:
    """The separator, how many leading lines to skip (empty lines above the header, and a
    ``sep=X`` line) and how many of those are empty (Excel shows them as rows; not the
    ``sep=`` line)."""
    blank = _leading_empty_lines(text)
    text = text.split("\n", blank)[-1] if blank else text
    first_line = text.split("\n", 1)[0].rstrip("\r")
    if first_line.lower().startswith("sep=") and len(first_line) == 5:
        return first_line[4], blank + 1, blank
    records = _count_outside_quotes(text, SNIFF_LINES)
    if not records:
        return default, 0
    header, rest = records[0], records[1:-1] or records[1:]

    def rank(sep: str) -> tuple[bool, int, int]:
        consistent = all(r[sep] == header[sep] for r in rest)
        return (header[sep] > 0 and consistent, header[sep], -SEPARATORS.index(sep))

    best = max(SEPARATORS, key=rank)
    return (best if header[best] > 0 else default), blank, blank


def _leading_empty_lines(text: str) -> int:
    """Empty lines (or only spaces) at the start: above the header, which they are not."""
    for count, line in enumerate(text.split("\n", SNIFF_LINES)):
        if line.strip(" \t\r\ufeff"):
            return count
    return 0  # nothing but empty lines in the start read: the file's emptiness is said later


def _count_outside_quotes(text: str, max_records: int) -> list[dict[str, int]]:
    """Per record (line, quotes respected), how often each candidate separator occurs."""
    records: list[dict[str, int]] = []
    counts = dict.fromkeys(SEPARATORS, 0)
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch == "\n":
            records.append(counts)
            if len(records) == max_records:
                return records
            counts = dict.fromkeys(SEPARATORS, 0)
        elif ch in counts:
            counts[ch] += 1
    records.append(counts)
    return records
